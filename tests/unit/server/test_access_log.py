"""The access log's own path: the same JSON lines as structlog writes, written together right
after the RPCs that made them, none lost at shutdown."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import logging

from wm_server.telemetry import observability
from wm_server.telemetry.observability import AccessLog, RpcLogContext, merge_rpc_context


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


FIELDS = {
    "method": "/wm.v1.WorkingMemoryService/GetSession",
    "code": "OK",
    "duration_ms": 0.25,
    "session_id": "s1",
    "tenant": "default",
    "request_id": "r1",
    "messages_sent": 0,
    "malformed_request": False,
}


async def test_lines_of_one_loop_pass_are_written_together_after_it() -> None:
    stream = CountingStream()
    access = AccessLog()
    access.configure(stream, logging.INFO)
    for number in range(3):
        access.emit(logging.INFO, {**FIELDS, "request_id": f"r{number}"})
    assert stream.getvalue() == ""  # not on the calls' path
    await asyncio.sleep(0)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert stream.writes == 1
    assert [line["request_id"] for line in lines] == ["r0", "r1", "r2"]
    for line in lines:
        assert line.keys() == {*FIELDS, "event", "level", "timestamp"}
        assert (line["event"], line["level"]) == ("rpc", "info")
        stamp = dt.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))
        assert abs((dt.datetime.now(dt.UTC) - stamp).total_seconds()) < 60


async def test_levels_below_the_threshold_are_dropped_and_flush_writes_what_is_pending() -> None:
    stream = CountingStream()
    access = AccessLog()
    access.configure(stream, logging.INFO)
    assert not access.enabled(logging.DEBUG)
    assert access.enabled(logging.WARNING)
    access.emit(logging.WARNING, dict(FIELDS))
    access.flush()  # what the server does when it stops
    (line,) = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["level"] == "warning"
    await asyncio.sleep(0)  # the flush scheduled earlier finds nothing left
    assert stream.writes == 1


def test_other_lines_carry_the_rpc_fields_and_keep_their_own() -> None:
    rpc = RpcLogContext("/wm.v1.WorkingMemoryService/AddMessages")
    rpc.request_id, rpc.session_id, rpc.tenant = "r9", "s9", "t9"

    def merged() -> dict[str, object]:
        return dict(merge_rpc_context(None, "info", {"event": "x", "session_id": "own"}))

    token = observability._rpc_context.set(rpc)
    try:
        assert merged() == {
            "event": "x",
            "session_id": "own",
            "request_id": "r9",
            "method": rpc.method,
            "tenant": "t9",
        }
    finally:
        observability._rpc_context.reset(token)
    assert merged() == {"event": "x", "session_id": "own"}
