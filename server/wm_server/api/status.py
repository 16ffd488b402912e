"""Turn service errors into rich gRPC statuses (AIP-193): ErrorInfo always, BadRequest for
field violations."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from wm_proto.v1 import errors_pb2
from wm_server.errors import ServiceError

# AIP-193: the domain names the service, not a version of it.
ERROR_DOMAIN = "wm"


# The status travels in the trailers, which every client caps (gRPC's default: 8 KiB soft,
# 16 KiB hard); a bigger one reaches the client as a detail-less RESOURCE_EXHAUSTED ("stream
# removed") instead of the real code. Text that grows with the request (echoed ids, many
# violations) is therefore bounded here, for every error.
MAX_MESSAGE_BYTES = 512
MAX_VALUE_BYTES = 128
MAX_VIOLATIONS_BYTES = 2500


def _clip(text: str, limit: int) -> str:
    """At most ``limit`` UTF-8 bytes, cut on a character boundary and marked with "…"."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode(errors="ignore") + "…"


def rpc_status_of(
    code_name: str,
    message: str,
    reason: str,
    metadata: dict[str, str],
    violations: list[tuple[str, str, str]] | None = None,
    retry_delay: float | None = None,
) -> grpc.Status:
    """Build the status with its details, ready for ``context.abort_with_status``;
    ``retry_delay`` (seconds) adds RetryInfo, which clients read instead of guessing."""
    details = []
    errors_pb2.ErrorReason.Value(
        f"ERROR_REASON_{reason}"
    )  # a reason the contract lists, or a defect
    info = error_details_pb2.ErrorInfo(
        reason=reason,
        domain=ERROR_DOMAIN,
        metadata={key: _clip(value, MAX_VALUE_BYTES) for key, value in metadata.items()},
    )
    packed = any_pb2.Any()
    packed.Pack(info)
    details.append(packed)
    if violations:
        bad = error_details_pb2.BadRequest()
        for field, description, why in violations:
            violation = bad.field_violations.add(
                field=_clip(field, MAX_VALUE_BYTES),
                description=_clip(description, 2 * MAX_VALUE_BYTES),
                reason=_clip(why, MAX_VALUE_BYTES),
            )
            if bad.ByteSize() > MAX_VIOLATIONS_BYTES:
                bad.field_violations.remove(violation)
                left = len(violations) - len(bad.field_violations)
                message = f"({left} more field violations not shown) {message}"
                break
        packed_bad = any_pb2.Any()
        packed_bad.Pack(bad)
        details.append(packed_bad)
    if retry_delay is not None:
        whole = int(retry_delay)
        delay = duration_pb2.Duration(seconds=whole, nanos=round((retry_delay - whole) * 1e9))
        packed_retry = any_pb2.Any()
        packed_retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        details.append(packed_retry)
    status = status_pb2.Status(
        code=code_pb2.Code.Value(code_name),
        message=_clip(message, MAX_MESSAGE_BYTES),
        details=details,
    )
    return rpc_status.to_status(status)


def status_of_error(error: ServiceError) -> grpc.Status:
    return rpc_status_of(
        error.code_name,
        error.message,
        error.reason,
        error.metadata,
        [(v.field, v.description, v.reason) for v in error.violations],
        retry_delay=error.retry_delay,
    )


def internal_status(message: str = "internal error") -> grpc.Status:
    return rpc_status_of("INTERNAL", message, "INTERNAL", {})
