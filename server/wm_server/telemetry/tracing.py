"""Optional OpenTelemetry traces: a server span per RPC, spans for the stages of Phase 2 and
one per model call (provider, model, tokens), exported by OTLP.

Why optional and this shape: most deployments have no collector, and the request path is
tuned to the microsecond. So nothing of OpenTelemetry is imported unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (the SDK's own variable; it and the other ``OTEL_*``
variables, such as ``OTEL_SERVICE_NAME``, are read by the SDK). Off, the server gets no
interceptor and Phase 2 a :data:`NO_TRACING` whose spans are one shared no-op context. The
packages are the ``[otel]`` extra: an endpoint set without them stops the start with a clear
error rather than silently tracing nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import grpc

    from wm_server.llm.chain import LlmCallFinished, LlmCallStarted

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
SERVICE_NAME = "working-memory-service"
_NO_SPAN: AbstractContextManager[None] = contextlib.nullcontext()


class ModelCall(Protocol):
    """A model call's span, from its start to its answer."""

    def finish(self, event: LlmCallFinished) -> None: ...


class Tracing(Protocol):
    """What Phase 2 asks of tracing."""

    def span(self, name: str, **attributes: str | int) -> AbstractContextManager[Any]: ...

    def model_call(self, event: LlmCallStarted) -> ModelCall: ...


class _NoModelCall:
    def finish(self, event: LlmCallFinished) -> None:
        pass


class _NoTracing:
    """Tracing off: every span is the same no-op context."""

    _call = _NoModelCall()

    def span(self, name: str, **attributes: str | int) -> AbstractContextManager[None]:
        return _NO_SPAN

    def model_call(self, event: LlmCallStarted) -> ModelCall:
        return self._call


NO_TRACING: Tracing = _NoTracing()


class OtelTracing:
    """Tracing on, over an OpenTelemetry TracerProvider (the OTLP one, or a test's)."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry import trace

        self.provider = provider
        self._trace = trace
        self._tracer = provider.get_tracer("wm_server")

    @contextlib.contextmanager
    def span(self, name: str, **attributes: str | int) -> Iterator[Any]:
        with self._tracer.start_as_current_span(name, attributes=attributes) as span:
            yield span

    def model_call(self, event: LlmCallStarted) -> ModelCall:
        # A child of the current span (the Phase 2 stage that makes the call).
        span = self._tracer.start_span(
            f"model_call {event.purpose.value}",
            kind=self._trace.SpanKind.CLIENT,
            attributes={
                "gen_ai.system": event.provider,
                "gen_ai.request.model": event.model,
                "wm.model_call.purpose": event.purpose.value,
            },
        )
        return _OtelModelCall(span, self._trace)

    def server_interceptor(self) -> grpc.aio.ServerInterceptor:
        """A server span per RPC (opentelemetry-instrumentation-grpc)."""
        from opentelemetry.instrumentation.grpc import aio_server_interceptor

        interceptor: grpc.aio.ServerInterceptor = aio_server_interceptor(  # type: ignore[no-untyped-call]
            tracer_provider=self.provider
        )
        return interceptor

    def shutdown(self) -> None:
        """Export what is buffered (a stopping server's last spans)."""
        self.provider.shutdown()


class _OtelModelCall:
    def __init__(self, span: Any, trace: Any) -> None:
        self._span = span
        self._trace = trace

    def finish(self, event: LlmCallFinished) -> None:
        usage = event.usage
        self._span.set_attributes(
            {
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read_input_tokens": usage.cache_read_input_tokens,
                "gen_ai.usage.cache_creation_input_tokens": usage.cache_creation_input_tokens,
                "gen_ai.response.finish_reason": event.stop_reason,
                "wm.model_call.duration_ms": event.duration_ms,
            }
        )
        if event.error:
            self._span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, event.error))
        self._span.end()


def otlp_tracing() -> OtelTracing | None:
    """OTLP tracing when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, else None (nothing imported)."""
    if not os.environ.get(ENDPOINT_VARIABLE, "").strip():
        return None
    from wm_server.config import ConfigurationError

    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as error:
        raise ConfigurationError(
            f"{ENDPOINT_VARIABLE} is set but OpenTelemetry is not installed ({error.name}):"
            " pip install 'working-memory-service[otel]'"
        ) from None
    # OTEL_SERVICE_NAME, when set, names the service (the SDK reads it); this is the default.
    named = os.environ.get("OTEL_SERVICE_NAME", "").strip()
    provider = TracerProvider(
        resource=Resource.create({} if named else {"service.name": SERVICE_NAME})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return OtelTracing(provider)
