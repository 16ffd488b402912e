"""The server interceptor: request id, authentication, tenant, access log and RPC metrics.

One interceptor wraps the *behaviour* of each handler (grpc-conventions 2.4) rather than
answering from ``intercept_service`` itself, because the wrapper runs inside the RPC's own
task: context variables it sets (the tenant, the structlog context) belong to that RPC only,
it can abort with a rich status on any kind of method (unary or streaming), and it sees the
final status code for the log line and the metrics.

Per RPC, in order:

1. request id: the caller's ``x-request-id`` when it is a sane token, else a new one; returned
   in the trailing metadata of every call (with its status, errors included) and, for server
   streams, also in the initial metadata before the first message; on every log line of the
   RPC. Unary calls get it in the trailers only: sending initial metadata on its own costs an
   extra batch through gRPC core (about a fifth of a health check's server time), while the
   trailers travel with the status the call sends anyway;
2. authentication, for ``wm.v1`` methods when API keys are configured:
   ``authorization: Bearer <key>``; missing or wrong → UNAUTHENTICATED. Health and
   reflection stay open so Kubernetes probes and tools work without a key;
3. the tenant (the key's, or the default tenant when authentication is off) is set for the
   services, which scope every store call with it;
4. the caller's budget (``admission``): a slot of the tenant's (or, for health and
   reflection, the anonymous callers') concurrency budget and, for a mutating call, a token
   of the tenant's bucket; over budget → RESOURCE_EXHAUSTED with RetryInfo;
5. the request is decoded only now: bytes that are not the method's message are
   INVALID_ARGUMENT (reason ``MALFORMED_REQUEST``, one fixed message), logged at warning
   level and counted, without a traceback;
6. the behaviour itself, with service errors mapped to their rich status
   (``ServiceError`` → its code and details; anything unexpected is logged with its traceback
   and answered INTERNAL, so a client never sees UNKNOWN): one wrapper layer per RPC, not an
   error decorator inside the interceptor's wrapper;
7. one access-log line when the RPC ends: method, code, duration, session id, tenant,
   request id (never message content), and the RPC count and latency metrics.

Everything a call needs that does not depend on the call (the method's properties, metric
children, refusal statuses) is built once per method or per server, not per call.

Unknown methods pass through untouched (gRPC answers UNIMPLEMENTED).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
import structlog

from wm_proto.v1 import working_memory_service_pb2 as service_pb2
from wm_server.api import request_rules
from wm_server.api.admission import Admission, Budget
from wm_server.api.status import internal_status, rpc_status_of, status_of_error
from wm_server.errors import ServiceError
from wm_server.security.auth import ApiKeyring
from wm_server.security.tenancy import DEFAULT_TENANT, set_tenant
from wm_server.telemetry.metrics import Metrics, RpcSeries
from wm_server.telemetry.observability import ACCESS_LOG, RpcLogContext, set_rpc_log_context

Context = grpc.aio.ServicerContext[Any, Any]
if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
else:  # generic only in the type stubs
    Handler = grpc.RpcMethodHandler

REQUEST_ID_HEADER = "x-request-id"
AUTHORIZATION_HEADER = "authorization"
PROTECTED_PREFIX = "/wm.v1."
# Probes and tooling call these often: their access lines are logged at debug level.
QUIET_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
_SERVER_FAULTS = frozenset({"INTERNAL", "UNKNOWN", "DATA_LOSS"})
# Every mutating RPC takes a request_id (DESIGN section 5): the contract itself says which
# calls pass the tenant's token bucket.
MUTATING_METHODS = frozenset(
    f"/{service.full_name}/{method.name}"
    for service in service_pb2.DESCRIPTOR.services_by_name.values()
    for method in service.methods
    if "request_id" in method.input_type.fields_by_name
)
MALFORMED_REQUEST = "MALFORMED_REQUEST"
# One fixed text: the decoder's own message would tell a prober how far its bytes got.
_MALFORMED = rpc_status_of(
    "INVALID_ARGUMENT",
    "the request message could not be decoded (not the protobuf message this method takes)",
    MALFORMED_REQUEST,
    {},
    [("request", "not a protobuf message of this method's request type", MALFORMED_REQUEST)],
)


class UndecodableText(ValueError):
    """A text request (the HTTP door's JSON) that is not the method's message: unlike binary
    bytes, its parser's description helps the caller and tells a prober nothing, so it is
    answered instead of the fixed text."""


def _malformed_text(error: UndecodableText) -> grpc.Status:
    description = str(error)[:300]
    return rpc_status_of(
        "INVALID_ARGUMENT",
        f"the request body is not this method's request message in JSON: {description}",
        MALFORMED_REQUEST,
        {},
        [("request", description, MALFORMED_REQUEST)],
    )


_MISSING_KEY = rpc_status_of(
    "UNAUTHENTICATED",
    "missing credentials: send 'authorization: Bearer <api key>' metadata",
    "API_KEY_MISSING",
    {},
)
_INVALID_KEY = rpc_status_of(
    "UNAUTHENTICATED", "invalid credentials: the API key is not valid", "API_KEY_INVALID", {}
)

log = structlog.get_logger("wm_server.api")

# Request ids the server makes: a random prefix per process and a counter, 32 hex digits like
# a UUID. Unique without a system call per RPC (``uuid4`` reads the OS's random source); they
# trace calls, they are not secrets.
_ID_PREFIX = secrets.token_hex(8)
_ID_COUNTER = itertools.count(1)


def _new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016x}"


class _Rpc(RpcLogContext):
    """What the access line of one RPC reports; also the log context of its other lines."""

    __slots__ = ("budget", "code", "malformed", "messages_sent", "started")

    def __init__(self, method: str) -> None:
        super().__init__(method)
        self.tenant = DEFAULT_TENANT
        self.started = time.perf_counter()
        self.code = "OK"
        self.messages_sent = 0
        self.budget: Budget | None = None  # the slot held, given back when the RPC ends
        self.malformed = False


def _headers(context: Context) -> tuple[str | None, str | None]:
    """The request id and authorization headers (the first of each), in one pass over the
    metadata."""
    offered = authorization = None
    for name, value in context.invocation_metadata() or ():
        if name == REQUEST_ID_HEADER and offered is None:
            offered = value.decode("latin-1") if isinstance(value, bytes) else value
        elif name == AUTHORIZATION_HEADER and authorization is None:
            authorization = value.decode("latin-1") if isinstance(value, bytes) else value
    return offered, authorization


def _session_of(request: object) -> str:
    """The session a request names (its name or parent, "sessions/{session}/..."), for the
    log context; "" when it names none."""
    for field in ("name", "parent"):
        value = getattr(request, field, "")
        if isinstance(value, str) and value.startswith("sessions/"):
            return value.split("/", 2)[1][:128]
    value = getattr(request, "session_id", "")  # CreateSession names the session to make
    return value[:128] if isinstance(value, str) else ""


def _code_name(context: Context, default: str) -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int):
        for candidate in grpc.StatusCode:
            if candidate.value[0] == code:
                return str(candidate.name)
    return default


def _threaded(behavior: Callable[..., Any]) -> Callable[[Any, Context], Awaitable[Any]]:
    """A synchronous behaviour (here only the generated "not implemented" stubs of library
    servicers, such as ``Health/List``) run off the loop as gRPC would, so that it is
    admitted, decoded and logged like every other method."""

    async def run(request: Any, context: Context) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(
                None, behavior, request, context
            )
        except NotImplementedError:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "method not implemented")

    return run


@dataclass(frozen=True, slots=True)
class _Method:
    """What the interceptor knows of one method, worked out once when it is first called."""

    name: str
    short: str  # the name without the leading "/": the metrics label and rpc_failed's
    decode: Callable[[bytes], Any] | None  # the handler's own request deserializer
    protected: bool  # needs an API key when keys are configured
    stream: bool  # a server stream: counted against the stream budget
    mutating: bool  # carries a request_id: passes the tenant's token bucket
    quiet: bool  # health and reflection: access lines at debug level
    series: RpcSeries | None  # the method's metric children, one pair per status code


class RpcInterceptor(grpc.aio.ServerInterceptor):
    """Request id, authentication, tenant, budgets, request decoding, access log and metrics
    for every RPC."""

    def __init__(
        self,
        *,
        keyring: ApiKeyring | None,
        metrics: Metrics | None,
        admission: Admission | None = None,
    ) -> None:
        self._keyring = keyring
        self._metrics = metrics
        self._admission = admission
        # method → (the server's handler, its wrapped copy): wrapping happens once per method,
        # not on every call.
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, method: str, handler: Handler) -> Handler:
        """The handler with its behaviour wrapped and *no* request deserializer: gRPC hands
        the raw bytes over, and the wrapper decodes them once the caller is admitted, so a
        request that does not decode is answered INVALID_ARGUMENT (gRPC itself would answer
        UNKNOWN with the exception text and log a traceback) and an unauthenticated caller's
        bytes are never parsed."""
        spec = _Method(
            name=method,
            short=method.lstrip("/"),
            decode=handler.request_deserializer,
            protected=method.startswith(PROTECTED_PREFIX),
            stream=handler.response_streaming,
            mutating=method in MUTATING_METHODS,
            quiet=method.startswith(QUIET_PREFIXES),
            series=self._metrics.rpc_series(method.lstrip("/")) if self._metrics else None,
        )
        unary_request = not handler.request_streaming
        if not handler.response_streaming:
            given: Callable[..., Any] | None = (
                handler.unary_unary if unary_request else handler.stream_unary
            )
            if given is None:
                return handler
            behavior = given if inspect.iscoroutinefunction(given) else _threaded(given)
            factory = (
                grpc.unary_unary_rpc_method_handler
                if unary_request
                else grpc.stream_unary_rpc_method_handler
            )
            return factory(
                self._wrap_unary(spec, behavior, unary_request),
                request_deserializer=None,
                response_serializer=handler.response_serializer,
            )
        streaming: Any = handler.unary_stream if unary_request else handler.stream_stream
        if inspect.isasyncgenfunction(streaming):
            stream: Callable[..., Any] = self._wrap_generator(spec, streaming, unary_request)
        elif inspect.iscoroutinefunction(streaming):
            stream = self._wrap_unary(spec, streaming, unary_request)  # uses context.write
        else:
            return handler
        factory = (
            grpc.unary_stream_rpc_method_handler
            if unary_request
            else grpc.stream_stream_rpc_method_handler
        )
        return factory(
            stream,
            request_deserializer=None,
            response_serializer=handler.response_serializer,
        )

    # --- wrappers --------------------------------------------------------------------------
    def _wrap_unary(
        self, spec: _Method, behavior: Callable[..., Awaitable[Any]], unary_request: bool
    ) -> Callable[[Any, Context], Awaitable[Any]]:
        async def handle(request: Any, context: Context) -> Any:
            rpc = _Rpc(spec.name)
            try:
                await self._admit(rpc, spec, context)
                request = await self._request(rpc, spec, request, context, unary_request)
                try:
                    if unary_request:
                        request_rules.check(request)
                    return await behavior(request, context)
                except ServiceError as error:
                    status = status_of_error(error)
                except (asyncio.CancelledError, grpc.aio.AbortError):
                    raise
                except Exception:
                    log.exception("rpc_failed", rpc=spec.short)
                    status = internal_status()
                await _abort(context, status, rpc.request_id)
            except BaseException as error:
                rpc.code = self._failure_code(error, context)
                raise
            finally:
                self._finish(rpc, spec, context)

        return handle

    def _wrap_generator(
        self, spec: _Method, behavior: Callable[..., AsyncIterator[Any]], unary_request: bool
    ) -> Callable[[Any, Context], AsyncIterator[Any]]:
        async def handle(request: Any, context: Context) -> AsyncIterator[Any]:
            rpc = _Rpc(spec.name)
            try:
                await self._admit(rpc, spec, context)
                request = await self._request(rpc, spec, request, context, unary_request)
                try:
                    if unary_request:
                        request_rules.check(request)
                    async for response in behavior(request, context):
                        rpc.messages_sent += 1
                        yield response
                    return
                except ServiceError as error:
                    status = status_of_error(error)
                except (asyncio.CancelledError, grpc.aio.AbortError, GeneratorExit):
                    raise
                except Exception:
                    log.exception("rpc_failed", rpc=spec.short)
                    status = internal_status()
                await _abort(context, status, rpc.request_id)
            except BaseException as error:
                rpc.code = self._failure_code(error, context)
                raise
            finally:
                self._finish(rpc, spec, context)

        return handle

    # --- steps -----------------------------------------------------------------------------
    async def _admit(self, rpc: _Rpc, spec: _Method, context: Context) -> None:
        """Request id, authentication, tenant and budget; aborts UNAUTHENTICATED on a bad key
        and RESOURCE_EXHAUSTED when the caller's budget is spent."""
        offered, authorization = _headers(context)
        rid = offered if offered and _REQUEST_ID.fullmatch(offered) else _new_request_id()
        rpc.request_id = rid
        set_rpc_log_context(rpc)
        echo = ((REQUEST_ID_HEADER, rid),)
        context.set_trailing_metadata(echo)
        if spec.stream:  # a stream's caller may read for long: it learns the id at once
            await context.send_initial_metadata(echo)
        if self._keyring is not None and spec.protected:
            rpc.tenant = ""  # unknown until the key is checked
            rpc.tenant = await self._authenticate(self._keyring, authorization, context, rid)
        set_tenant(rpc.tenant)
        admission = self._admission
        if admission is None:
            return
        budget = admission.budget(rpc.tenant) if spec.protected else admission.anonymous
        refusal = admission.enter(budget, stream=spec.stream, mutating=spec.mutating)
        if refusal is not None:
            await _abort(context, refusal, rid)
        rpc.budget = budget  # only once a slot is held: _finish gives it back

    async def _request(
        self, rpc: _Rpc, spec: _Method, raw: Any, context: Context, unary_request: bool
    ) -> Any:
        """The decoded request (or, for a client stream, an iterator of decoded requests);
        its session id joins the log context of the RPC."""
        if not unary_request:
            return self._decoded(rpc, spec, raw, context)
        request = raw
        if spec.decode is not None:
            try:
                request = spec.decode(raw)
            except Exception as exc:
                await self._malformed(rpc, spec, context, exc)
        rpc.session_id = _session_of(request)
        return request

    async def _decoded(
        self, rpc: _Rpc, spec: _Method, requests: AsyncIterator[bytes], context: Context
    ) -> AsyncIterator[Any]:
        async for raw in requests:
            if spec.decode is None:
                yield raw
                continue
            try:
                request = spec.decode(raw)
            except Exception as exc:
                await self._malformed(rpc, spec, context, exc)
            yield request

    async def _malformed(
        self, rpc: _Rpc, spec: _Method, context: Context, error: Exception
    ) -> None:
        """Refuse bytes that are not the method's request message: one fixed message (never
        the binary decoder's text; a JSON parser's is UndecodableText), a warning access line
        and a metric, no traceback."""
        rpc.malformed = True
        if self._metrics is not None:
            self._metrics.request_undecodable(spec.short)
        status = _malformed_text(error) if isinstance(error, UndecodableText) else _MALFORMED
        await _abort(context, status, rpc.request_id)

    @staticmethod
    async def _authenticate(
        keyring: ApiKeyring, header: str | None, context: Context, request_id: str
    ) -> str:
        if header is None:
            await _abort(context, _MISSING_KEY, request_id)
        scheme, _, key = (header or "").strip().partition(" ")
        tenant = keyring.authenticate(key.strip()) if scheme.lower() == "bearer" else None
        if tenant is None:
            await _abort(context, _INVALID_KEY, request_id)
        assert tenant is not None  # _abort raises
        return tenant

    @staticmethod
    def _failure_code(error: BaseException, context: Context) -> str:
        if isinstance(error, grpc.aio.AbortError):
            return _code_name(context, "UNKNOWN")
        if isinstance(error, asyncio.CancelledError):
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0:
                return "DEADLINE_EXCEEDED"
            return "CANCELLED"
        if isinstance(error, GeneratorExit):
            return "CANCELLED"
        return "UNKNOWN"

    def _finish(self, rpc: _Rpc, spec: _Method, context: Context) -> None:
        if rpc.code == "OK":
            rpc.code = _code_name(context, "OK")
        seconds = time.perf_counter() - rpc.started
        admission = self._admission
        if admission is not None:
            budget = rpc.budget
            if budget is not None:
                admission.leave(budget, stream=spec.stream)
            else:  # refused before it held a slot: counted where it was refused
                budget = (
                    admission.budget(rpc.tenant)
                    if spec.protected and rpc.tenant
                    else admission.anonymous
                )
            budget.finished[rpc.code] = budget.finished.get(rpc.code, 0) + 1
        if spec.series is not None:
            spec.series.finished(rpc.code, seconds)
        level = logging.DEBUG if spec.quiet else logging.INFO
        if rpc.malformed or rpc.code in _SERVER_FAULTS:
            level = logging.WARNING
        if ACCESS_LOG.enabled(level):
            ACCESS_LOG.emit(
                level,
                {
                    "method": rpc.method,
                    "code": rpc.code,
                    "duration_ms": round(seconds * 1000, 3),
                    "session_id": rpc.session_id,
                    "tenant": rpc.tenant,
                    "request_id": rpc.request_id,
                    "messages_sent": rpc.messages_sent,
                    "malformed_request": rpc.malformed,
                },
            )


async def _abort(context: Context, status: grpc.Status, request_id: str) -> None:
    """End the call with ``status``, the request id still in its trailers: a status carries
    its details in the trailing metadata, which replaces what was set before."""
    await context.abort(
        status.code, status.details, (*status.trailing_metadata, (REQUEST_ID_HEADER, request_id))
    )
