"""The Connect protocol's side of the HTTP door (https://connectrpc.com/docs/protocol): the
two message codecs, the error JSON and its HTTP statuses, the envelopes of a stream, and what
a request says in its headers (content type, encodings, deadline, metadata), each refusal of
the transport answered in Connect's form. Nothing here runs a method: ``api.connect`` serves
the calls through the one interceptor with what this module reads and writes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.message import Message
from google.rpc import status_pb2

from wm_server.api.interceptors import REQUEST_ID_HEADER, UndecodableText

STATUS_DETAILS_KEY = "grpc-status-details-bin"
TIMEOUT_HEADER = "connect-timeout-ms"
_TIMEOUT = re.compile(r"[0-9]{1,10}")
ENVELOPE = struct.Struct(">BI")
COMPRESSED = 0x01
END_STREAM = 0x02
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
class Codec:
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


JSON = Codec("json", _json_bytes)
PROTO = Codec("proto", lambda message: message.SerializeToString())
CODECS = {"json": JSON, "proto": PROTO}


# --- errors in Connect's form ----------------------------------------------------------------
class Refusal(Exception):
    """A transport-level refusal, before any method runs."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def b64(data: bytes) -> str:
    return base64.b64encode(data).rstrip(b"=").decode("ascii")


def _detail(packed: Any) -> dict[str, Any]:
    """One ``google.protobuf.Any`` of a status as a Connect error detail."""
    type_name = packed.TypeName()
    detail: dict[str, Any] = {"type": type_name, "value": b64(packed.value)}
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


def metadata_values(
    pairs: Iterable[tuple[str, str | bytes]],
) -> Iterable[tuple[str, str]]:
    """Metadata as header values: binary values in unpadded base64, the status details left
    out (they travel in the error itself)."""
    for key, value in pairs:
        if key == STATUS_DETAILS_KEY:
            continue
        yield key, b64(value) if isinstance(value, bytes) else value


def error_body(error: Mapping[str, Any]) -> bytes:
    return json.dumps(error, ensure_ascii=False).encode()


def refusal_response(refusal: Refusal) -> web.Response:
    return web.Response(
        status=refusal.status,
        body=error_body({"code": refusal.code, "message": refusal.message}),
        content_type="application/json",
        headers=refusal.headers,
    )


async def stream_refusal(
    request: web.Request, codec: Codec, refusal: Refusal
) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers=refusal.headers)
    response.content_type = f"application/connect+{codec.name}"
    await response.prepare(request)
    error = {"code": refusal.code, "message": refusal.message}
    await response.write(envelope(END_STREAM, error_body({"error": error})))
    await response.write_eof()
    return response


# --- requests --------------------------------------------------------------------------------
def codec_of(content_type: str, stream: bool) -> Codec:
    prefix = "application/connect+" if stream else "application/"
    name = content_type.removeprefix(prefix) if content_type.startswith(prefix) else ""
    codec = CODECS.get(name)
    if codec is None:
        wanted = ", ".join(f"{prefix}{n}" for n in CODECS)
        raise Refusal(
            415,
            "unknown",
            f"unsupported content-type {content_type!r}: this method takes {wanted}",
            {"Accept-Post": wanted},
        )
    return codec


def deadline(headers: Mapping[str, str]) -> float | None:
    text = headers.get(TIMEOUT_HEADER)
    if text is None:
        return None
    if not _TIMEOUT.fullmatch(text.strip()):
        raise Refusal(
            400,
            "invalid_argument",
            f"{TIMEOUT_HEADER} must be a positive integer of at most 10 digits",
        )
    return asyncio.get_running_loop().time() + int(text) / 1000


def inflate(data: bytes, encoding: str, limit: int) -> bytes:
    if encoding == "identity" or not data:
        return data
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error:
        raise Refusal(400, "invalid_argument", "the request body is not valid gzip") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise too_large(limit)
    return out


def too_large(limit: int) -> Refusal:
    return Refusal(429, "resource_exhausted", f"the request message is larger than {limit} bytes")


def encoding(headers: Mapping[str, str], name: str) -> str:
    """The body's (unary) or messages' (stream) encoding, if the door can read it."""
    encoding = headers.get(name, "identity").strip().lower() or "identity"
    if encoding not in ENCODINGS:
        accept = "accept-encoding" if name == "content-encoding" else "connect-accept-encoding"
        raise Refusal(
            501,
            "unimplemented",
            f"unsupported {name} {encoding!r}: supported encodings are {', '.join(ENCODINGS)}",
            {accept: ", ".join(ENCODINGS)},
        )
    return encoding


def unwrap(body: bytes, encoding: str, limit: int) -> bytes:
    """The one message of a server-streaming request, out of its envelope."""
    if len(body) < ENVELOPE.size:
        raise Refusal(400, "invalid_argument", "a streaming request needs one enveloped message")
    flags, length = ENVELOPE.unpack_from(body)
    message = body[ENVELOPE.size :]
    if len(message) != length:
        raise Refusal(
            400, "invalid_argument", "a server-streaming request takes exactly one message"
        )
    if flags & ~COMPRESSED:
        raise Refusal(400, "invalid_argument", f"unexpected envelope flags {flags:#04x}")
    if flags & COMPRESSED:
        if encoding == "identity":
            raise Refusal(
                400, "invalid_argument", "a compressed message needs connect-content-encoding"
            )
        return inflate(message, encoding, limit)
    return message


def request_metadata(request: web.Request) -> grpc.aio.Metadata:
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


def peer_of(request: web.Request) -> str:
    peername = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peername, tuple) and len(peername) >= 2:
        host, port = peername[0], peername[1]
        return f"ipv6:[{host}]:{port}" if ":" in str(host) else f"ipv4:{host}:{port}"
    return "unknown"


def envelope(flags: int, payload: bytes) -> bytes:
    return ENVELOPE.pack(flags, len(payload)) + payload


def request_id_of(pairs: Iterable[tuple[str, str | bytes]]) -> str | None:
    for key, value in pairs:
        if key == REQUEST_ID_HEADER and isinstance(value, str):
            return value
    return None
