"""The server interceptor: request id, authentication, tenant, access log and RPC metrics.

One interceptor wraps the *behaviour* of each handler (grpc-conventions 2.4) rather than
answering from ``intercept_service`` itself, because the wrapper runs inside the RPC's own
task: context variables it sets (the tenant, the structlog context) belong to that RPC only,
it can abort with a rich status on any kind of method (unary or streaming), and it sees the
final status code for the log line and the metrics.

Per RPC, in order:

1. request id: the caller's ``x-request-id`` when it is a sane token, else a new one; sent
   back at once in the initial (response) metadata and bound to every log line of the RPC;
2. authentication, for ``wm.v1`` methods when API keys are configured:
   ``authorization: Bearer <key>``; missing or wrong → UNAUTHENTICATED. Health and
   reflection stay open so Kubernetes probes and tools work without a key;
3. the tenant (the key's, or the default tenant when authentication is off) is set for the
   services, which scope every store call with it;
4. one access-log line when the RPC ends: method, code, duration, session id, tenant,
   request id (never message content), and the RPC count and latency metrics.

Unknown methods pass through untouched (gRPC answers UNIMPLEMENTED).
"""

from __future__ import annotations

import asyncio
import inspect
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
import structlog

from wm_server.api.status import rpc_status_of
from wm_server.auth import ApiKeyring
from wm_server.metrics import Metrics
from wm_server.tenancy import DEFAULT_TENANT, set_tenant

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

access_log = structlog.get_logger("wm_server.access")


@dataclass
class _Rpc:
    """What the access line of one RPC reports."""

    method: str
    started: float = field(default_factory=time.perf_counter)
    request_id: str = ""
    tenant: str = DEFAULT_TENANT
    session_id: str = ""
    code: str = "OK"
    messages_sent: int = 0


def _metadata(context: Context, key: str) -> str | None:
    for name, value in context.invocation_metadata() or ():
        if name == key:
            return value.decode("latin-1") if isinstance(value, bytes) else value
    return None


def _session_of(request: object) -> str:
    value = getattr(request, "session_id", "")
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


class RpcInterceptor(grpc.aio.ServerInterceptor):
    """Request id, authentication, tenant, access log and metrics for every RPC."""

    def __init__(self, *, keyring: ApiKeyring | None, metrics: Metrics | None) -> None:
        self._keyring = keyring
        self._metrics = metrics
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
        unary_request = not handler.request_streaming
        if not handler.response_streaming:
            behavior = handler.unary_unary if unary_request else handler.stream_unary
            if not inspect.iscoroutinefunction(behavior):
                return handler  # a sync handler: not used by this server, left alone
            factory = (
                grpc.unary_unary_rpc_method_handler
                if unary_request
                else grpc.stream_unary_rpc_method_handler
            )
            return factory(
                self._wrap_unary(method, behavior, unary_request),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        behavior = handler.unary_stream if unary_request else handler.stream_stream
        if inspect.isasyncgenfunction(behavior):
            stream: Callable[..., Any] = self._wrap_generator(method, behavior, unary_request)
        elif inspect.iscoroutinefunction(behavior):
            stream = self._wrap_unary(method, behavior, unary_request)  # uses context.write
        else:
            return handler
        factory = (
            grpc.unary_stream_rpc_method_handler
            if unary_request
            else grpc.stream_stream_rpc_method_handler
        )
        return factory(
            stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    # --- wrappers --------------------------------------------------------------------------
    def _wrap_unary(
        self, method: str, behavior: Callable[..., Awaitable[Any]], unary_request: bool
    ) -> Callable[[Any, Context], Awaitable[Any]]:
        async def handle(request: Any, context: Context) -> Any:
            rpc = _Rpc(method)
            try:
                await self._admit(rpc, request if unary_request else None, context)
                return await behavior(request, context)
            except BaseException as error:
                rpc.code = self._failure_code(error, context)
                raise
            finally:
                self._finish(rpc, context)

        return handle

    def _wrap_generator(
        self, method: str, behavior: Callable[..., AsyncIterator[Any]], unary_request: bool
    ) -> Callable[[Any, Context], AsyncIterator[Any]]:
        async def handle(request: Any, context: Context) -> AsyncIterator[Any]:
            rpc = _Rpc(method)
            try:
                await self._admit(rpc, request if unary_request else None, context)
                async for response in behavior(request, context):
                    rpc.messages_sent += 1
                    yield response
            except BaseException as error:
                rpc.code = self._failure_code(error, context)
                raise
            finally:
                self._finish(rpc, context)

        return handle

    # --- steps -----------------------------------------------------------------------------
    async def _admit(self, rpc: _Rpc, request: object, context: Context) -> None:
        """Request id, authentication and tenant; aborts UNAUTHENTICATED on a bad key."""
        structlog.contextvars.clear_contextvars()
        offered = _metadata(context, REQUEST_ID_HEADER)
        rpc.request_id = offered if offered and _REQUEST_ID.fullmatch(offered) else uuid.uuid4().hex
        rpc.session_id = _session_of(request) if request is not None else ""
        structlog.contextvars.bind_contextvars(
            request_id=rpc.request_id, method=rpc.method, session_id=rpc.session_id
        )
        await context.send_initial_metadata(((REQUEST_ID_HEADER, rpc.request_id),))
        if self._keyring is not None and rpc.method.startswith(PROTECTED_PREFIX):
            rpc.tenant = ""  # unknown until the key is checked
            rpc.tenant = await self._authenticate(self._keyring, context)
        set_tenant(rpc.tenant)
        structlog.contextvars.bind_contextvars(tenant=rpc.tenant)

    @staticmethod
    async def _authenticate(keyring: ApiKeyring, context: Context) -> str:
        header = _metadata(context, AUTHORIZATION_HEADER)
        if header is None:
            await context.abort_with_status(
                rpc_status_of(
                    "UNAUTHENTICATED",
                    "missing credentials: send 'authorization: Bearer <api key>' metadata",
                    "API_KEY_MISSING",
                    {},
                )
            )
        scheme, _, key = (header or "").strip().partition(" ")
        tenant = keyring.authenticate(key.strip()) if scheme.lower() == "bearer" else None
        if tenant is None:
            await context.abort_with_status(
                rpc_status_of(
                    "UNAUTHENTICATED",
                    "invalid credentials: the API key is not valid",
                    "API_KEY_INVALID",
                    {},
                )
            )
        assert tenant is not None  # abort_with_status raises
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

    def _finish(self, rpc: _Rpc, context: Context) -> None:
        if rpc.code == "OK":
            rpc.code = _code_name(context, "OK")
        seconds = time.perf_counter() - rpc.started
        if self._metrics is not None:
            self._metrics.rpc_finished(rpc.method.lstrip("/"), rpc.code, seconds)
        quiet = rpc.method.startswith(QUIET_PREFIXES)
        emit = access_log.debug if quiet else access_log.info
        if rpc.code in _SERVER_FAULTS:
            emit = access_log.warning
        emit(
            "rpc",
            method=rpc.method,
            code=rpc.code,
            duration_ms=round(seconds * 1000, 3),
            session_id=rpc.session_id,
            tenant=rpc.tenant,
            request_id=rpc.request_id,
            messages_sent=rpc.messages_sent,
        )
