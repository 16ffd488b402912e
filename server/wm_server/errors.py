"""Errors of the service layer, free of gRPC: the API edge maps them to canonical codes.

Each carries a machine-readable ``reason`` (google.rpc.ErrorInfo) and the metadata that
explains it, so that clients in any language can act on an error without parsing its text.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field of a request (google.rpc.BadRequest.FieldViolation)."""

    field: str
    description: str
    reason: str = "INVALID_VALUE"


class ServiceError(Exception):
    """Base of every error the API reports with a canonical status code."""

    code_name = "INTERNAL"
    # Seconds after which a retry may succeed (google.rpc.RetryInfo); None: say nothing.
    retry_delay: float | None = None

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        metadata: dict[str, str] | None = None,
        violations: list[FieldViolation] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.metadata = metadata or {}
        self.violations = violations or []


class InvalidArgument(ServiceError):
    """The request is malformed; nothing was changed."""

    code_name = "INVALID_ARGUMENT"

    def __init__(
        self,
        violations: list[FieldViolation],
        message: str | None = None,
        *,
        reason: str = "INVALID_REQUEST",
    ) -> None:
        summary = message or "; ".join(f"{v.field}: {v.description}" for v in violations)
        super().__init__(summary, reason=reason, violations=violations)


def invalid(
    field: str,
    description: str,
    reason: str = "INVALID_VALUE",
    *,
    error_reason: str = "INVALID_REQUEST",
) -> InvalidArgument:
    """Shorthand for a single-field InvalidArgument; ``error_reason`` is the ErrorInfo reason
    when the error has one of its own (e.g. PAGE_TOKEN_INVALID)."""
    return InvalidArgument([FieldViolation(field, description, reason)], reason=error_reason)


class OutOfRange(ServiceError):
    """A position past the end of what exists (e.g. a resume point beyond a commit's log)."""

    code_name = "OUT_OF_RANGE"


class NotFound(ServiceError):
    """The resource does not exist for this caller."""

    code_name = "NOT_FOUND"


class AlreadyExists(ServiceError):
    """A resource with that id exists already."""

    code_name = "ALREADY_EXISTS"


class FailedPrecondition(ServiceError):
    """The resource is not in a state that allows the request."""

    code_name = "FAILED_PRECONDITION"


class Aborted(ServiceError):
    """A concurrency conflict (e.g. an expected version did not match); retry higher up."""

    code_name = "ABORTED"


class Unavailable(ServiceError):
    """Temporarily unable to serve (shutting down, store busy); safe to retry."""

    code_name = "UNAVAILABLE"


def session_not_found(session_id: str) -> NotFound:
    return NotFound(
        f"session {session_id!r} not found",
        reason="SESSION_NOT_FOUND",
        metadata={"session_id": session_id},
    )


class StorageUnavailable(Unavailable):
    """The database cannot be reached or is locked right now; the transaction was rolled back
    and a retry succeeds once the cause is gone."""

    def __init__(self, message: str) -> None:
        super().__init__(f"storage unavailable: {message}", reason="STORAGE_UNAVAILABLE")


class StorageConflict(StorageUnavailable):
    """The database aborted the transaction to resolve a conflict (a deadlock, a
    serialization failure, a concurrent writer that stored the same unique key first):
    running the use case again is safe and usually succeeds. Use cases run again by
    themselves (``services.transactions.retry_conflicts``); a caller who still meets one
    gets ABORTED with RetryInfo (AIP-193: a concurrency conflict), never INTERNAL."""

    code_name = "ABORTED"
    retry_delay = 0.05

    def __init__(self, message: str) -> None:
        ServiceError.__init__(
            self, f"concurrent change: {message}; retry the call", reason="CONCURRENT_MODIFICATION"
        )


class StorageFull(ServiceError):
    """The database's disk is full; nothing was written. Retry once space is freed."""

    code_name = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str) -> None:
        super().__init__(f"storage full: {message}", reason="STORAGE_FULL")


def request_id_reused(request_id: str, method: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"request_id {request_id!r} was already used for a different {method} request",
        reason="REQUEST_ID_REUSED",
        metadata={"request_id": request_id, "method": method},
    )
