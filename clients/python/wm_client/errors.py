"""Exceptions of the client: one per canonical gRPC code, carrying the decoded details.

Why: a runtime must act on an error without parsing its text. The server sends every error
as a ``google.rpc.Status`` with an ``ErrorInfo`` (domain "wm", a machine-readable reason and
metadata) and, for INVALID_ARGUMENT, ``BadRequest`` field violations; this module decodes them
once, at the edge, so callers catch :class:`NotFoundError` and read ``error.reason`` instead of
handling raw ``grpc.aio.AioRpcError`` objects.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2

ERROR_DOMAIN = "wm"
_DETAILS_KEY = "grpc-status-details-bin"
REQUEST_ID_KEY = "x-request-id"  # the server's id of the call, in its trailing metadata
# Detail types a client may meet; anything else stays a packed Any.
_KNOWN_DETAILS: tuple[type[Message], ...] = (
    error_details_pb2.ErrorInfo,
    error_details_pb2.BadRequest,
    error_details_pb2.RetryInfo,
    error_details_pb2.DebugInfo,
    error_details_pb2.QuotaFailure,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.ResourceInfo,
    error_details_pb2.RequestInfo,
    error_details_pb2.Help,
    error_details_pb2.LocalizedMessage,
)


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field of a request, with its path (e.g. ``messages[3].parts[0].text``)."""

    field: str
    description: str
    reason: str = ""


class WmError(Exception):
    """A failed call: the gRPC code, the server's message, the decoded status details and
    ``request_id``, the server's id of the call (its log lines carry it: quote it in a bug
    report); empty when the call never reached the service."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        status: status_pb2.Status | None = None,
        request_id: str = "",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.details: tuple[Message, ...] = tuple(_unpack(status.details)) if status else ()
        info = next((d for d in self.details if isinstance(d, error_details_pb2.ErrorInfo)), None)
        self.reason: str = info.reason if info else ""
        self.domain: str = info.domain if info else ""
        self.metadata: dict[str, str] = dict(info.metadata) if info else {}
        self.field_violations: tuple[FieldViolation, ...] = tuple(
            FieldViolation(v.field, v.description, v.reason)
            for d in self.details
            if isinstance(d, error_details_pb2.BadRequest)
            for v in d.field_violations
        )

    @property
    def retry_delay(self) -> float | None:
        """Seconds the server asks to wait before retrying (its RetryInfo, sent with
        RESOURCE_EXHAUSTED when a tenant's budget or rate is spent); None when not given."""
        for detail in self.details:
            if isinstance(detail, error_details_pb2.RetryInfo):
                delay = detail.retry_delay
                return float(delay.seconds + delay.nanos / 1e9)
        return None

    @property
    def from_service(self) -> bool:
        """True when the service itself answered (its ErrorInfo is there), not the transport."""
        return self.domain == ERROR_DOMAIN

    def __str__(self) -> str:
        text = f"{self.code.name}: {self.message}"
        if self.reason:
            text += f" [{self.reason}]"
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}, {self.message!r}, reason={self.reason!r})"


class CancelledRpcError(WmError):
    """CANCELLED (named so as not to shadow asyncio.CancelledError)."""


class UnknownError(WmError):
    """UNKNOWN."""


class InvalidArgumentError(WmError):
    """INVALID_ARGUMENT: the request is malformed; see ``field_violations``."""


class DeadlineExceededError(WmError):
    """DEADLINE_EXCEEDED."""


class NotFoundError(WmError):
    """NOT_FOUND: the session (or commit, archive, version) does not exist for this caller."""


class AlreadyExistsError(WmError):
    """ALREADY_EXISTS."""


class PermissionDeniedError(WmError):
    """PERMISSION_DENIED."""


class ResourceExhaustedError(WmError):
    """RESOURCE_EXHAUSTED."""


class FailedPreconditionError(WmError):
    """FAILED_PRECONDITION: the resource is not in a state that allows the request."""


class AbortedError(WmError):
    """ABORTED: a concurrency conflict (e.g. an expected version did not match)."""


class OutOfRangeError(WmError):
    """OUT_OF_RANGE."""


class UnimplementedError(WmError):
    """UNIMPLEMENTED."""


class InternalError(WmError):
    """INTERNAL."""


class UnavailableError(WmError):
    """UNAVAILABLE: the server could not be reached or is shutting down; safe to retry."""


class DataLossError(WmError):
    """DATA_LOSS."""


class UnauthenticatedError(WmError):
    """UNAUTHENTICATED."""


_BY_CODE: dict[grpc.StatusCode, type[WmError]] = {
    grpc.StatusCode.CANCELLED: CancelledRpcError,
    grpc.StatusCode.UNKNOWN: UnknownError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRangeError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DATA_LOSS: DataLossError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
}


def error_class(code: grpc.StatusCode) -> type[WmError]:
    """The exception class raised for ``code``."""
    return _BY_CODE.get(code, WmError)


def error_from_rpc(error: grpc.aio.AioRpcError) -> WmError:
    """Translate a failed call into the matching :class:`WmError`, details decoded."""
    code = error.code()
    message = error.details() or ""
    trailing = error.trailing_metadata()
    return error_class(code)(
        code, message, status=_status_of(trailing), request_id=_request_id_of(trailing)
    )


def _request_id_of(trailing: Any) -> str:
    for key, value in trailing or ():
        if key == REQUEST_ID_KEY and isinstance(value, str):
            return value
    return ""


def _status_of(trailing: Any) -> status_pb2.Status | None:
    """The google.rpc.Status in the trailers, if any (a damaged one is ignored, not fatal)."""
    if not trailing:
        return None
    for key, value in trailing:
        if key == _DETAILS_KEY and isinstance(value, bytes):
            try:
                return status_pb2.Status.FromString(value)
            except DecodeError:
                return None
    return None


def _unpack(details: Iterable[any_pb2.Any]) -> Iterable[Message]:
    for packed in details:
        for kind in _KNOWN_DETAILS:
            if packed.Is(kind.DESCRIPTOR):  # type: ignore[arg-type]
                value = kind()
                packed.Unpack(value)
                yield value
                break
        else:
            yield packed
