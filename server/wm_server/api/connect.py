"""The HTTP door: the same contract over the Connect protocol, for curl, browsers and runtimes
without a gRPC stack (https://connectrpc.com/docs/protocol).

Unary methods take ``POST /<service>/<method>`` with an ``application/json`` or
``application/proto`` body and answer 200 with the message, or the Connect error JSON
(``{code, message, details: [{type, value, debug}]}``) with the HTTP status of its code. Server
streams (WatchCommit) take ``application/connect+json`` or
``application/connect+proto``: one enveloped request message in, enveloped messages out, and an
end-of-stream message that carries the error, if any, and the trailing metadata. The details
are the ones the gRPC path sends (ErrorInfo always, BadRequest field violations, RetryInfo),
each as its protobuf bytes in base64 with its JSON form under ``debug``.
``Connect-Timeout-Ms`` is the call's deadline; ``x-request-id`` comes back as a header.

Why no second pipeline: every call runs through the same per-call wrapper as a gRPC call
(:class:`~wm_server.api.interceptors.RpcInterceptor`, over the same servicer, keyring, admission
budgets and metrics). The door asks the interceptor to wrap each method once, exactly as the
gRPC server does, and calls the wrapped behaviour with a ``ServicerContext`` that speaks HTTP
(:class:`HttpCallContext`): the request id, authentication, tenant, budgets, decoding (JSON is
decoded by the handler's request deserializer, *after* admission, like protobuf bytes), error
mapping, the access-log line and the RPC metrics are the interceptor's, unchanged. The door
itself only translates the transport: paths, content types, framing, the deadline, and a gRPC
status into a Connect error. Transport refusals that come before any method runs (unknown
path, wrong content type, a body over the size limit, broken framing) are answered here, as
gRPC core answers its own before the interceptor sees a call.

Why an adapter on aiohttp rather than the ``connectrpc`` package (0.13.0 on PyPI, "Beta"):
that package serves its own generated service classes, through its own handler signature,
error type and interceptor chain, on an ASGI server; reusing the one wrapper would still need
this module's context adapter, plus a second error model in between. It also brings a
protobuf runtime of its own (``protobuf-py``), an HTTP client (``pyqwest``), a code generator
and an ASGI server (uvicorn) the server does not have. aiohttp is already a dependency (the
inspector), runs on the server's own event loop, and streams over HTTP/1.1 chunked bodies,
which is all Connect needs for unary and server-streaming calls.

Left out: HTTP/2 (aiohttp serves HTTP/1.1; only bidirectional streams need HTTP/2 and the
contract has none), GET requests (for methods the proto marks side-effect free; it marks
none) and compressed answers (identity, which every Connect client accepts; gzip *requests*
are read). Cross-origin calls from browsers are allowed for the origins WM_HTTP_CORS_ORIGINS
names (:mod:`wm_server.api.cors`; off by default). gRPC's process-wide cap (``WM_MAX_CONCURRENT_RPCS``) counts gRPC calls only;
the per-tenant and anonymous budgets count both doors. Metrics and access lines are the gRPC
ones, with no transport label or field: a label would change every existing series.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from aiohttp import web
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import Message

from wm_server.api import connect_protocol as protocol
from wm_server.api.connect_context import Context, Handler, HttpCallContext
from wm_server.api.cors import Cors
from wm_server.api.interceptors import REQUEST_ID_HEADER, RpcInterceptor

log = structlog.get_logger("wm_server.api.connect")


# --- the procedures ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Procedure:
    """One method as the door serves it: its wrapped behaviour per codec."""

    path: str
    stream: bool
    behaviours: dict[str, Callable[..., Any]]  # codec name → the interceptor's wrapper


@dataclass(frozen=True, slots=True)
class _CallDetails(grpc.HandlerCallDetails):
    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


class _Registry:
    """Stands in for the gRPC server in the generated ``add_*Servicer_to_server`` functions,
    so that the door serves exactly the handlers the gRPC server registers."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        return None  # the same handlers also come by name below

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Handler]) -> None:
        for name, handler in handlers.items():
            self.handlers[f"/{service}/{name}"] = handler


def _message_type(method: str) -> type[Message]:
    service, _, name = method.lstrip("/").partition("/")
    descriptor = descriptor_pool.Default().FindServiceByName(service).methods_by_name[name]
    return message_factory.GetMessageClass(descriptor.input_type)


async def build_procedures(
    interceptor: RpcInterceptor, registrations: Iterable[tuple[Callable[..., None], object]]
) -> dict[str, _Procedure]:
    """Every unary-request method of the given servicers, wrapped by ``interceptor`` once per
    codec (the codec's decoder is the handler's request deserializer)."""
    registry = _Registry()
    for add, servicer in registrations:
        add(servicer, registry)
    procedures: dict[str, _Procedure] = {}
    for path, handler in registry.handlers.items():
        if handler.request_streaming:
            continue  # Connect over HTTP/1.1 has no client streams; this contract has none
        message_type = _message_type(path)
        given_behaviour: Callable[..., Any] | None = (
            handler.unary_stream if handler.response_streaming else handler.unary_unary
        )
        if given_behaviour is None:
            continue
        factory = (
            grpc.unary_stream_rpc_method_handler
            if handler.response_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        behaviours: dict[str, Callable[..., Any]] = {}
        for codec in protocol.CODECS.values():
            given: Handler = factory(
                given_behaviour, request_deserializer=codec.decoder(message_type)
            )

            async def continuation(details: grpc.HandlerCallDetails, h: Handler = given) -> Handler:
                return h

            wrapped = await interceptor.intercept_service(continuation, _CallDetails(path))
            assert wrapped is not None
            wrapped_behaviour = (
                wrapped.unary_stream if handler.response_streaming else wrapped.unary_unary
            )
            assert wrapped_behaviour is not None
            behaviours[codec.name] = wrapped_behaviour
        procedures[path] = _Procedure(path, handler.response_streaming, behaviours)
    return procedures


@dataclass
class _Call:
    """One HTTP call in flight: its context and the timer of its deadline."""

    context: HttpCallContext
    task: asyncio.Task[Any]
    timer: asyncio.TimerHandle | None = None

    def arm(self, deadline: float | None) -> None:
        if deadline is not None:
            self.timer = asyncio.get_running_loop().call_at(deadline, self._expire)

    def _expire(self) -> None:
        self.context.expired = True
        self.task.cancel()

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.context.finish()

    def timed_out(self) -> bool:
        """After a CancelledError: True (and the task's cancellation taken back) when it was
        the deadline's; False when the caller went away or the server is stopping."""
        if not self.context.expired:
            return False
        self.task.uncancel()
        return True


class ConnectDoor:
    """The Connect endpoint of one server."""

    def __init__(
        self, procedures: dict[str, _Procedure], max_body_bytes: int, cors: Cors | None = None
    ) -> None:
        self._procedures = procedures
        self._limit = max_body_bytes
        self._cors = cors or Cors()
        self.calls: set[asyncio.Task[Any]] = set()  # in flight, for the graceful stop

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self._limit)
        app.router.add_route("*", "/{path:.*}", self.serve)
        if self._cors.origins:  # every answer, streams and refusals included, before it starts
            app.on_response_prepare.append(self._cross_origin)
        return app

    async def _cross_origin(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers.update(self._cors.headers_for(request.headers))

    async def serve(self, request: web.Request) -> web.StreamResponse:
        if self._cors.is_preflight(request):
            return self._cors.preflight(request)
        task = _this_task()
        self.calls.add(task)
        try:
            return await self._serve(request)
        finally:
            self.calls.discard(task)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        try:
            procedure = self._procedures.get(request.path)
            if procedure is None:
                raise protocol.Refusal(
                    404, "unimplemented", f"{request.path} is not a method of this server"
                )
            if request.method != "POST":
                raise protocol.Refusal(
                    405, "unimplemented", "Connect calls are POST requests", {"Allow": "POST"}
                )
            codec = protocol.codec_of(request.content_type, procedure.stream)
        except protocol.Refusal as refusal:
            return protocol.refusal_response(refusal)
        try:
            headers = request.headers
            deadline = protocol.deadline(headers)
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise protocol.too_large(self._limit) from None
            if procedure.stream:
                raw = protocol.unwrap(
                    body, protocol.encoding(headers, "connect-content-encoding"), self._limit
                )
            else:
                raw = protocol.inflate(
                    body, protocol.encoding(headers, "content-encoding"), self._limit
                )
        except protocol.Refusal as refusal:
            if procedure.stream:  # a stream's errors travel in its end-of-stream message
                return await protocol.stream_refusal(request, codec, refusal)
            return protocol.refusal_response(refusal)
        behaviour = procedure.behaviours[codec.name]
        if procedure.stream:
            return await self._stream(request, behaviour, codec, raw, deadline)
        return await self._unary(request, behaviour, codec, raw, deadline)

    async def _unary(
        self,
        request: web.Request,
        behaviour: Callable[[bytes, Context], Awaitable[Message]],
        codec: protocol.Codec,
        raw: bytes,
        deadline: float | None,
    ) -> web.Response:
        context = HttpCallContext(
            protocol.request_metadata(request), protocol.peer_of(request), deadline
        )
        call = _Call(context, _this_task())
        call.arm(deadline)
        try:
            answer = await behaviour(raw, context)
        except grpc.aio.AbortError:
            return self._unary_error(context, context.code(), context.details())
        except asyncio.CancelledError:
            if not call.timed_out():
                raise
            return self._unary_error(
                context, grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline expired"
            )
        except Exception:
            log.exception("http_call_failed", path=request.path)
            return self._unary_error(context, grpc.StatusCode.INTERNAL, "internal error")
        finally:
            call.disarm()
        return web.Response(
            status=200,
            body=codec.encode(answer),
            content_type=f"application/{codec.name}",
            headers=self._unary_headers(context),
        )

    @staticmethod
    def _unary_headers(context: HttpCallContext) -> dict[str, str]:
        """Leading metadata as headers, trailing metadata as ``trailer-`` headers, and the
        request id as a plain header too (curl and browsers read headers)."""
        headers = dict(protocol.metadata_values(context.initial))
        for key, value in protocol.metadata_values(context.trailing):
            headers[f"trailer-{key}"] = value
        request_id = protocol.request_id_of(context.trailing) or protocol.request_id_of(
            context.initial
        )
        if request_id is not None:
            headers[REQUEST_ID_HEADER] = request_id
        return headers

    def _unary_error(
        self, context: HttpCallContext, code: grpc.StatusCode | None, message: str
    ) -> web.Response:
        status_code = code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
        _, http_status = protocol.CONNECT_CODES.get(
            status_code, protocol.CONNECT_CODES[grpc.StatusCode.UNKNOWN]
        )
        return web.Response(
            status=http_status,
            body=protocol.error_body(
                protocol.connect_error(status_code, message, context.trailing)
            ),
            content_type="application/json",
            headers=self._unary_headers(context),
        )

    async def _stream(
        self,
        request: web.Request,
        behaviour: Callable[[bytes, Context], AsyncGenerator[Message, None]],
        codec: protocol.Codec,
        raw: bytes,
        deadline: float | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.content_type = f"application/connect+{codec.name}"

        async def start(initial: Sequence[tuple[str, str | bytes]]) -> None:
            if response.prepared:
                return
            for key, value in protocol.metadata_values(initial):
                response.headers[key] = value
            await response.prepare(request)

        context = HttpCallContext(
            protocol.request_metadata(request), protocol.peer_of(request), deadline, start
        )
        call = _Call(context, _this_task())
        call.arm(deadline)
        messages = behaviour(raw, context)
        end: dict[str, Any] = {}
        try:
            async for message in messages:
                await start(context.initial)
                await response.write(protocol.envelope(0, codec.encode(message)))
        except grpc.aio.AbortError:
            end["error"] = protocol.connect_error(
                context.code(), context.details(), context.trailing
            )
        except asyncio.CancelledError:
            if not call.timed_out():
                raise
            end["error"] = protocol.connect_error(
                grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline expired", ()
            )
        except ConnectionResetError:
            return response  # the caller went away; the wrapper logged CANCELLED on close
        except Exception:
            log.exception("http_call_failed", path=request.path)
            end["error"] = protocol.connect_error(grpc.StatusCode.INTERNAL, "internal error", ())
        finally:
            await messages.aclose()
            call.disarm()
        metadata: dict[str, list[str]] = {}
        for key, value in protocol.metadata_values(context.trailing):
            metadata.setdefault(key, []).append(value)
        if metadata:
            end["metadata"] = metadata
        try:
            await start(context.initial)
            await response.write(protocol.envelope(protocol.END_STREAM, protocol.error_body(end)))
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response


def _this_task() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    assert task is not None  # aiohttp runs every handler in a task of its own
    return task


@dataclass
class HttpDoor:
    """The running door: its aiohttp runner, its calls and the port it listens on."""

    runner: web.AppRunner
    door: ConnectDoor
    port: int

    async def stop(self, grace: float) -> None:
        """Stop listening, let the calls in flight end within ``grace`` seconds (open commit
        streams end on their own once the server closes its event bus), cancel the rest."""
        for site in list(self.runner.sites):
            await site.stop()
        calls = set(self.door.calls)
        if calls:
            _, late = await asyncio.wait(calls, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=1.0)
        await self.runner.cleanup()


async def start_http_door(
    address: str,
    interceptor: RpcInterceptor,
    registrations: Iterable[tuple[Callable[..., None], object]],
    *,
    max_body_bytes: int,
    ssl_context: ssl.SSLContext | None,
    cors: Cors | None = None,
) -> HttpDoor:
    """Serve the Connect door on ``address`` (host:port; port 0 picks one)."""
    procedures = await build_procedures(interceptor, registrations)
    door = ConnectDoor(procedures, max_body_bytes, cors)
    # handler_cancellation: a caller that goes away cancels its call, as in gRPC, so a
    # stream it left stops holding a slot of its tenant's budget.
    # auto_decompress off: the door inflates bodies itself, within the size limit, and only
    # the encodings it announces.
    runner = web.AppRunner(
        door.application(),
        access_log=None,
        handler_cancellation=True,
        auto_decompress=False,
        shutdown_timeout=1.0,
    )
    await runner.setup()
    host, _, port = address.rpartition(":")
    site = web.TCPSite(runner, host.strip("[]") or "127.0.0.1", int(port), ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = int(runner.addresses[0][1])
    log.info("http_door_started", address=f"{host}:{bound}", tls=ssl_context is not None)
    return HttpDoor(runner, door, bound)
