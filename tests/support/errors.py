"""Read the rich details of a failed call."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


def details(error: grpc.aio.AioRpcError) -> tuple[error_details_pb2.ErrorInfo, list[str]]:
    """The ErrorInfo and the BadRequest field paths of a failed call."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "the error carries no google.rpc.Status details"
    info = error_details_pb2.ErrorInfo()
    fields: list[str] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields.extend(v.field for v in bad.field_violations)
    assert info.domain == "wm"
    return info, fields


def outcome(result: object) -> str:
    """One caller's result in a line (code, ErrorInfo reason, message), for failure messages."""
    if isinstance(result, grpc.aio.AioRpcError):
        try:
            reason = details(result)[0].reason
        except AssertionError:
            reason = "no ErrorInfo"
        return f"{result.code().name} ({reason}): {result.details()}"
    if isinstance(result, BaseException):
        return f"{type(result).__name__}: {result}"
    return "OK"
