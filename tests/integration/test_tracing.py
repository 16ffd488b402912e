"""OpenTelemetry traces: a server span per RPC, the Phase 2 stages with a model-call child,
exported by OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set, and nothing at all otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from support import wm_names
from support.providers import ProgrammableProvider
from support.server_process import ServerProcess
from wm_client import WmClient
from wm_client.jsonl import message_from_dict
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_server.app import Application, start_application
from wm_server.config import Settings
from wm_server.telemetry.tracing import ENDPOINT_VARIABLE, OtelTracing, otlp_tracing

CREATE_SESSION = "/wm.v1.WorkingMemoryService/CreateSession"
STAGES = [
    "wm.phase2.bound_input",
    "wm.phase2.update_working_memory",
    "wm.phase2.extract_memories",
    "wm.phase2.embed_and_index",
    "wm.phase2.complete",
]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
async def traced(tmp_path: Path, exporter: InMemorySpanExporter) -> AsyncIterator[Application]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = Settings(address="127.0.0.1:0", data_dir=tmp_path, llm_provider="offline")  # type: ignore[call-arg]
    app = await start_application(
        settings, provider=ProgrammableProvider(), tracing=OtelTracing(provider)
    )
    yield app
    await app.stop(grace=0.5)


def _named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def test_an_rpc_is_a_server_span_and_a_commit_traces_phase2(
    traced: Application, exporter: InMemorySpanExporter
) -> None:
    async with WmClient(traced.address) as client:
        await client.create_session("traced")
        (rpc,) = _named(exporter.get_finished_spans(), CREATE_SESSION)
        assert rpc.kind is SpanKind.SERVER
        assert rpc.attributes is not None and rpc.attributes["rpc.method"] == "CreateSession"

        turn = [message_from_dict({"role": "user", "content": "rename the parser module"})]
        await client.add_messages("traced", turn)
        terminal = await client.commit("traced", 0).wait()
        assert terminal.completed.working_memory_version == 1

    spans = exporter.get_finished_spans()
    (job,) = _named(spans, "wm.phase2")
    assert job.attributes is not None
    assert job.attributes["wm.commit_id"] == wm_names.last_segment(terminal.commit)
    assert job.attributes["wm.session_id"] == "traced"
    stages = sorted((s for s in spans if s.parent and s.parent.span_id == job.context.span_id),
                    key=lambda s: s.start_time or 0)  # fmt: skip
    assert [s.name for s in stages] == STAGES
    (generate,) = _named(spans, "wm.phase2.update_working_memory")
    (call,) = _named(spans, "model_call create")  # a first working memory is created
    assert call.parent is not None and call.parent.span_id == generate.context.span_id
    assert call.kind is SpanKind.CLIENT
    attributes = dict(call.attributes or {})
    assert isinstance(attributes.pop("wm.model_call.duration_ms"), int)
    assert attributes == {
        "gen_ai.system": "programmable",
        "gen_ai.request.model": "test-model",
        "wm.model_call.purpose": "create",
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.usage.cache_read_input_tokens": 0,
        "gen_ai.usage.cache_creation_input_tokens": 0,
        "gen_ai.response.finish_reason": "tool_use",
    }
    assert job.context.trace_id == call.context.trace_id


# --- OTLP, configured by the environment, end to end ---------------------------------------------
class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP trace receiver on loopback: what the server exports, as it sent it."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: object
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[str, str]]:
        """(service.name, span name) of everything received."""
        out = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                service = next(
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                )
                for scope in resource_spans.scope_spans:
                    out.extend((service, span.name) for span in scope.spans)
        return out


@pytest.fixture
def collector() -> Iterator[tuple[_Collector, int]]:
    receiver = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield receiver, port
    server.stop(0)


def test_with_the_endpoint_set_a_server_process_exports_by_otlp(
    tmp_path: Path, collector: tuple[_Collector, int]
) -> None:
    receiver, port = collector
    process = ServerProcess(
        tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
        OTEL_EXPORTER_OTLP_INSECURE="true",
        OTEL_BSP_SCHEDULE_DELAY="50",
        OTEL_SERVICE_NAME="wm-under-test",
    ).start()
    try:
        channel = grpc.insecure_channel(process.address)
        create = channel.unary_unary(CREATE_SESSION)
        create(api.CreateSessionRequest(session_id="exported").SerializeToString(), timeout=10)
        channel.close()
        deadline = time.monotonic() + 15
        while ("wm-under-test", CREATE_SESSION) not in receiver.spans():
            assert time.monotonic() < deadline, receiver.spans()
            time.sleep(0.05)
    finally:
        process.terminate()


def test_without_the_endpoint_nothing_of_opentelemetry_is_loaded(tmp_path: Path) -> None:
    """A real server and an RPC in a fresh interpreter: no interceptor, no module imported."""
    script = f"""
import asyncio, json, sys
from wm_client import WmClient
from wm_server.app import start_application
from wm_server.config import Settings

async def main() -> None:
    app = await start_application(Settings(address="127.0.0.1:0", data_dir={str(tmp_path)!r},
                                           llm_provider="offline"))
    async with WmClient(app.address) as client:
        await client.create_session("plain")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    print("RESULT", json.dumps({{"tracing": app.tracing is not None, "loaded": loaded}}))
    await app.stop(grace=0.1)

asyncio.run(main())
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WM_", "OTEL_"))}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("RESULT ")]
    outcome = json.loads(line.removeprefix("RESULT "))
    assert outcome == {"tracing": False, "loaded": []}


def test_the_endpoint_alone_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENDPOINT_VARIABLE, raising=False)
    assert otlp_tracing() is None
    monkeypatch.setenv(ENDPOINT_VARIABLE, "  ")
    assert otlp_tracing() is None
    monkeypatch.setenv(ENDPOINT_VARIABLE, "http://127.0.0.1:4317")
    tracing = otlp_tracing()
    assert isinstance(tracing, OtelTracing)
    assert tracing.provider.resource.attributes["service.name"] == "working-memory-service"
    tracing.shutdown()
