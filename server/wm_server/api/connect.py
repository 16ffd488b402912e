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
import base64
import binascii
import json
import re
import ssl
import struct
import zlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
import structlog
from aiohttp import web
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.message import Message
from google.rpc import status_pb2

from wm_server.api.cors import Cors
from wm_server.api.interceptors import REQUEST_ID_HEADER, RpcInterceptor, UndecodableText

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Context = grpc.aio.ServicerContext[Any, Any]
else:  # generic only in the type stubs
    Handler = grpc.RpcMethodHandler
    Context = grpc.aio.ServicerContext

log = structlog.get_logger("wm_server.api.connect")

STATUS_DETAILS_KEY = "grpc-status-details-bin"
TIMEOUT_HEADER = "connect-timeout-ms"
_TIMEOUT = re.compile(r"[0-9]{1,10}")
_ENVELOPE = struct.Struct(">BI")
_COMPRESSED = 0x01
_END_STREAM = 0x02
ENCODINGS = ("gzip", "identity")

# Connect's code names and HTTP statuses (the protocol's table; OK has no entry).
CONNECT_CODES: Mapping[grpc.StatusCode, tuple[str, int]] = {
    grpc.StatusCode.CANCELLED: ("canceled", 499),
    grpc.StatusCode.UNKNOWN: ("unknown", 500),
    grpc.StatusCode.INVALID_ARGUMENT: ("invalid_argument", 400),
    grpc.StatusCode.DEADLINE_EXCEEDED: ("deadline_exceeded", 504),
    grpc.StatusCode.NOT_FOUND: ("not_found", 404),
    grpc.StatusCode.ALREADY_EXISTS: ("already_exists", 409),
    grpc.StatusCode.PERMISSION_DENIED: ("permission_denied", 403),
    grpc.StatusCode.RESOURCE_EXHAUSTED: ("resource_exhausted", 429),
    grpc.StatusCode.FAILED_PRECONDITION: ("failed_precondition", 400),
    grpc.StatusCode.ABORTED: ("aborted", 409),
    grpc.StatusCode.OUT_OF_RANGE: ("out_of_range", 400),
    grpc.StatusCode.UNIMPLEMENTED: ("unimplemented", 501),
    grpc.StatusCode.INTERNAL: ("internal", 500),
    grpc.StatusCode.UNAVAILABLE: ("unavailable", 503),
    grpc.StatusCode.DATA_LOSS: ("data_loss", 500),
    grpc.StatusCode.UNAUTHENTICATED: ("unauthenticated", 401),
}


# --- codecs --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Codec:
    """One message encoding: its name in the content types and how a message is written."""

    name: str  # "json" or "proto"
    encode: Callable[[Message], bytes]

    def decoder(self, message_type: type[Message]) -> Callable[[bytes], Message]:
        """The request deserializer the interceptor runs once the caller is admitted."""
        if self.name == "proto":
            return message_type.FromString

        def decode(raw: bytes) -> Message:
            # An empty body is the empty message, as it is in protobuf. Unknown fields are
            # dropped, as the binary decoder drops them: an older server accepts a newer
            # client's requests.
            try:
                return json_format.Parse(raw or b"{}", message_type(), ignore_unknown_fields=True)
            except (json_format.ParseError, UnicodeDecodeError) as exc:
                raise UndecodableText(str(exc)) from None

        return decode


def _json_bytes(message: Message) -> bytes:
    return json_format.MessageToJson(message, indent=None, ensure_ascii=False).encode()


JSON = _Codec("json", _json_bytes)
PROTO = _Codec("proto", lambda message: message.SerializeToString())
CODECS = {"json": JSON, "proto": PROTO}


# --- the context the interceptor sees ---------------------------------------------------------
class HttpCallContext(Context):
    """A gRPC ``ServicerContext`` backed by one HTTP request, so that the interceptor and the
    servicer run for a Connect call exactly as for a gRPC one.

    What the interceptor records on it (the code, the details, the initial and trailing
    metadata) is what the door writes back in Connect's form; ``abort`` raises gRPC's own
    ``AbortError``, which the wrapper expects. The deadline is the door's timer: when it
    fires, the call's task is cancelled and :meth:`time_remaining` reads 0, so the wrapper
    logs DEADLINE_EXCEEDED as it would for gRPC."""

    def __init__(
        self,
        metadata: grpc.aio.Metadata,
        peer: str,
        deadline: float | None,
        on_initial_metadata: Callable[[Sequence[tuple[str, str | bytes]]], Awaitable[None]]
        | None = None,
    ) -> None:
        self._metadata = metadata
        self._peer = peer
        self._deadline = deadline
        self._on_initial = on_initial_metadata
        self.expired = False
        self.initial: tuple[tuple[str, str | bytes], ...] = ()
        self.trailing: tuple[tuple[str, str | bytes], ...] = ()
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._done = False
        self._callbacks: list[Callable[[Context], None]] = []

    # what the wrapper and the servicer use
    def invocation_metadata(self) -> grpc.aio.Metadata:
        return self._metadata

    async def send_initial_metadata(self, initial_metadata: Any) -> None:
        self.initial = tuple(initial_metadata)
        if self._on_initial is not None:
            await self._on_initial(self.initial)

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        self.trailing = tuple(trailing_metadata)

    def trailing_metadata(self) -> Any:
        return self.trailing

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()
    ) -> NoReturn:
        self._code = code
        self._details = details
        if trailing_metadata:
            self.trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    async def abort_with_status(self, status: grpc.Status) -> NoReturn:
        await self.abort(status.code, status.details, status.trailing_metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> Any:
        return self._code

    def set_details(self, details: str) -> None:
        self._details = details

    def details(self) -> str:
        return self._details

    def time_remaining(self) -> Any:
        if self.expired:
            return 0.0
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    def peer(self) -> str:
        return self._peer

    def cancelled(self) -> bool:
        return self._code == grpc.StatusCode.CANCELLED

    def done(self) -> bool:
        return self._done

    def add_done_callback(self, callback: Any) -> None:
        self._callbacks.append(callback)

    def finish(self) -> None:
        """The call has ended: run the done callbacks once."""
        if self._done:
            return
        self._done = True
        for callback in self._callbacks:
            callback(self)

    # what a servicer of this contract never asks of an HTTP call
    async def read(self) -> Any:
        raise RuntimeError("the HTTP door serves no client-streaming method")

    async def write(self, message: Any) -> None:
        raise RuntimeError("the HTTP door serves streams whose behaviour yields its messages")

    def set_compression(self, compression: grpc.Compression) -> None:
        return None

    def disable_next_message_compression(self) -> None:
        return None

    def peer_identities(self) -> Iterable[bytes] | None:
        return None

    def peer_identity_key(self) -> str | None:
        return None

    def auth_context(self) -> Mapping[str, Iterable[bytes]]:
        return {}


# --- errors in Connect's form ----------------------------------------------------------------
class _Refusal(Exception):
    """A transport-level refusal, before any method runs."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def _b64(data: bytes) -> str:
    return base64.b64encode(data).rstrip(b"=").decode("ascii")


def _detail(packed: Any) -> dict[str, Any]:
    """One ``google.protobuf.Any`` of a status as a Connect error detail."""
    type_name = packed.TypeName()
    detail: dict[str, Any] = {"type": type_name, "value": _b64(packed.value)}
    try:
        descriptor = descriptor_pool.Default().FindMessageTypeByName(type_name)
    except KeyError:
        return detail
    message = message_factory.GetMessageClass(descriptor).FromString(packed.value)
    detail["debug"] = json_format.MessageToDict(message)
    return detail


def connect_error(
    code: grpc.StatusCode, message: str, trailing: Iterable[tuple[str, str | bytes]]
) -> dict[str, Any]:
    """The Connect error of a gRPC status: its code, its message and, from the status details
    the wrapper put in the trailers, every detail (ErrorInfo, BadRequest, RetryInfo)."""
    name, _ = CONNECT_CODES.get(code, CONNECT_CODES[grpc.StatusCode.UNKNOWN])
    error: dict[str, Any] = {"code": name}
    if message:
        error["message"] = message
    for key, value in trailing:
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            if status.details:
                error["details"] = [_detail(packed) for packed in status.details]
            break
    return error


def _metadata_values(
    pairs: Iterable[tuple[str, str | bytes]],
) -> Iterable[tuple[str, str]]:
    """Metadata as header values: binary values in unpadded base64, the status details left
    out (they travel in the error itself)."""
    for key, value in pairs:
        if key == STATUS_DETAILS_KEY:
            continue
        yield key, _b64(value) if isinstance(value, bytes) else value


def _error_body(error: Mapping[str, Any]) -> bytes:
    return json.dumps(error, ensure_ascii=False).encode()


def _refusal_response(refusal: _Refusal) -> web.Response:
    return web.Response(
        status=refusal.status,
        body=_error_body({"code": refusal.code, "message": refusal.message}),
        content_type="application/json",
        headers=refusal.headers,
    )


async def _stream_refusal(
    request: web.Request, codec: _Codec, refusal: _Refusal
) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers=refusal.headers)
    response.content_type = f"application/connect+{codec.name}"
    await response.prepare(request)
    error = {"code": refusal.code, "message": refusal.message}
    await response.write(_envelope(_END_STREAM, _error_body({"error": error})))
    await response.write_eof()
    return response


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
        for codec in CODECS.values():
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


# --- requests --------------------------------------------------------------------------------
def _codec_of(content_type: str, stream: bool) -> _Codec:
    prefix = "application/connect+" if stream else "application/"
    name = content_type.removeprefix(prefix) if content_type.startswith(prefix) else ""
    codec = CODECS.get(name)
    if codec is None:
        wanted = ", ".join(f"{prefix}{n}" for n in CODECS)
        raise _Refusal(
            415,
            "unknown",
            f"unsupported content-type {content_type!r}: this method takes {wanted}",
            {"Accept-Post": wanted},
        )
    return codec


def _deadline(headers: Mapping[str, str]) -> float | None:
    text = headers.get(TIMEOUT_HEADER)
    if text is None:
        return None
    if not _TIMEOUT.fullmatch(text.strip()):
        raise _Refusal(
            400,
            "invalid_argument",
            f"{TIMEOUT_HEADER} must be a positive integer of at most 10 digits",
        )
    return asyncio.get_running_loop().time() + int(text) / 1000


def _inflate(data: bytes, encoding: str, limit: int) -> bytes:
    if encoding == "identity" or not data:
        return data
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error:
        raise _Refusal(400, "invalid_argument", "the request body is not valid gzip") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise _too_large(limit)
    return out


def _too_large(limit: int) -> _Refusal:
    return _Refusal(429, "resource_exhausted", f"the request message is larger than {limit} bytes")


def _encoding(headers: Mapping[str, str], name: str) -> str:
    """The body's (unary) or messages' (stream) encoding, if the door can read it."""
    encoding = headers.get(name, "identity").strip().lower() or "identity"
    if encoding not in ENCODINGS:
        accept = "accept-encoding" if name == "content-encoding" else "connect-accept-encoding"
        raise _Refusal(
            501,
            "unimplemented",
            f"unsupported {name} {encoding!r}: supported encodings are {', '.join(ENCODINGS)}",
            {accept: ", ".join(ENCODINGS)},
        )
    return encoding


def _unwrap(body: bytes, encoding: str, limit: int) -> bytes:
    """The one message of a server-streaming request, out of its envelope."""
    if len(body) < _ENVELOPE.size:
        raise _Refusal(400, "invalid_argument", "a streaming request needs one enveloped message")
    flags, length = _ENVELOPE.unpack_from(body)
    message = body[_ENVELOPE.size :]
    if len(message) != length:
        raise _Refusal(
            400, "invalid_argument", "a server-streaming request takes exactly one message"
        )
    if flags & ~_COMPRESSED:
        raise _Refusal(400, "invalid_argument", f"unexpected envelope flags {flags:#04x}")
    if flags & _COMPRESSED:
        if encoding == "identity":
            raise _Refusal(
                400, "invalid_argument", "a compressed message needs connect-content-encoding"
            )
        return _inflate(message, encoding, limit)
    return message


def _metadata(request: web.Request) -> grpc.aio.Metadata:
    """The request headers as gRPC metadata (names in lower case, ``-bin`` values decoded)."""
    pairs: list[tuple[str, str | bytes]] = []
    for name, value in request.headers.items():
        key = name.lower()
        if key.endswith("-bin"):
            try:
                pairs.append((key, base64.b64decode(value + "=" * (-len(value) % 4))))
            except (binascii.Error, ValueError):
                continue
        else:
            pairs.append((key, value))
    return grpc.aio.Metadata(*pairs)


def _peer(request: web.Request) -> str:
    peername = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peername, tuple) and len(peername) >= 2:
        host, port = peername[0], peername[1]
        return f"ipv6:[{host}]:{port}" if ":" in str(host) else f"ipv4:{host}:{port}"
    return "unknown"


def _envelope(flags: int, payload: bytes) -> bytes:
    return _ENVELOPE.pack(flags, len(payload)) + payload


def _request_id(pairs: Iterable[tuple[str, str | bytes]]) -> str | None:
    for key, value in pairs:
        if key == REQUEST_ID_HEADER and isinstance(value, str):
            return value
    return None


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
                raise _Refusal(
                    404, "unimplemented", f"{request.path} is not a method of this server"
                )
            if request.method != "POST":
                raise _Refusal(
                    405, "unimplemented", "Connect calls are POST requests", {"Allow": "POST"}
                )
            codec = _codec_of(request.content_type, procedure.stream)
        except _Refusal as refusal:
            return _refusal_response(refusal)
        try:
            headers = request.headers
            deadline = _deadline(headers)
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise _too_large(self._limit) from None
            if procedure.stream:
                raw = _unwrap(body, _encoding(headers, "connect-content-encoding"), self._limit)
            else:
                raw = _inflate(body, _encoding(headers, "content-encoding"), self._limit)
        except _Refusal as refusal:
            if procedure.stream:  # a stream's errors travel in its end-of-stream message
                return await _stream_refusal(request, codec, refusal)
            return _refusal_response(refusal)
        behaviour = procedure.behaviours[codec.name]
        if procedure.stream:
            return await self._stream(request, behaviour, codec, raw, deadline)
        return await self._unary(request, behaviour, codec, raw, deadline)

    async def _unary(
        self,
        request: web.Request,
        behaviour: Callable[[bytes, Context], Awaitable[Message]],
        codec: _Codec,
        raw: bytes,
        deadline: float | None,
    ) -> web.Response:
        context = HttpCallContext(_metadata(request), _peer(request), deadline)
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
        headers = dict(_metadata_values(context.initial))
        for key, value in _metadata_values(context.trailing):
            headers[f"trailer-{key}"] = value
        request_id = _request_id(context.trailing) or _request_id(context.initial)
        if request_id is not None:
            headers[REQUEST_ID_HEADER] = request_id
        return headers

    def _unary_error(
        self, context: HttpCallContext, code: grpc.StatusCode | None, message: str
    ) -> web.Response:
        status_code = code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
        _, http_status = CONNECT_CODES.get(status_code, CONNECT_CODES[grpc.StatusCode.UNKNOWN])
        return web.Response(
            status=http_status,
            body=_error_body(connect_error(status_code, message, context.trailing)),
            content_type="application/json",
            headers=self._unary_headers(context),
        )

    async def _stream(
        self,
        request: web.Request,
        behaviour: Callable[[bytes, Context], AsyncGenerator[Message, None]],
        codec: _Codec,
        raw: bytes,
        deadline: float | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.content_type = f"application/connect+{codec.name}"

        async def start(initial: Sequence[tuple[str, str | bytes]]) -> None:
            if response.prepared:
                return
            for key, value in _metadata_values(initial):
                response.headers[key] = value
            await response.prepare(request)

        context = HttpCallContext(_metadata(request), _peer(request), deadline, start)
        call = _Call(context, _this_task())
        call.arm(deadline)
        messages = behaviour(raw, context)
        end: dict[str, Any] = {}
        try:
            async for message in messages:
                await start(context.initial)
                await response.write(_envelope(0, codec.encode(message)))
        except grpc.aio.AbortError:
            end["error"] = connect_error(context.code(), context.details(), context.trailing)
        except asyncio.CancelledError:
            if not call.timed_out():
                raise
            end["error"] = connect_error(
                grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline expired", ()
            )
        except ConnectionResetError:
            return response  # the caller went away; the wrapper logged CANCELLED on close
        except Exception:
            log.exception("http_call_failed", path=request.path)
            end["error"] = connect_error(grpc.StatusCode.INTERNAL, "internal error", ())
        finally:
            await messages.aclose()
            call.disarm()
        metadata: dict[str, list[str]] = {}
        for key, value in _metadata_values(context.trailing):
            metadata.setdefault(key, []).append(value)
        if metadata:
            end["metadata"] = metadata
        try:
            await start(context.initial)
            await response.write(_envelope(_END_STREAM, _error_body(end)))
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
