"""Turn service errors into rich gRPC statuses (AIP-193): ErrorInfo always, BadRequest for
field violations."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from wm_server.errors import ServiceError

ERROR_DOMAIN = "wm.v1"


def rpc_status_of(
    code_name: str,
    message: str,
    reason: str,
    metadata: dict[str, str],
    violations: list[tuple[str, str, str]] | None = None,
) -> grpc.Status:
    """Build the status with its details, ready for ``context.abort_with_status``."""
    details = []
    info = error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=metadata)
    packed = any_pb2.Any()
    packed.Pack(info)
    details.append(packed)
    if violations:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=field, description=description, reason=why
                )
                for field, description, why in violations
            ]
        )
        packed_bad = any_pb2.Any()
        packed_bad.Pack(bad)
        details.append(packed_bad)
    status = status_pb2.Status(
        code=code_pb2.Code.Value(code_name), message=message, details=details
    )
    return rpc_status.to_status(status)


def status_of_error(error: ServiceError) -> grpc.Status:
    return rpc_status_of(
        error.code_name,
        error.message,
        error.reason,
        error.metadata,
        [(v.field, v.description, v.reason) for v in error.violations],
    )


def internal_status(message: str = "internal error") -> grpc.Status:
    return rpc_status_of("INTERNAL", message, "INTERNAL", {})
