"""A provider outage is waited out, not failed (issue #19, point 2).

The local Messages API answers 529 overloaded to everything for a few seconds (a compressed
ten-minute outage: backoff, breaker cooldown and maximum wait are scaled down with it), then
recovers. Several sessions commit during the outage. Every commit must complete after the
recovery, none may be FAILED, the waiting must show in the commit events, and the circuit
breaker must keep the number of attempts far below what each session retrying on its own
would cost.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import grpc
import pytest
from llm_backends import ANTHROPIC, Backend
from reliability_support import FRESH, LlmServer, Stub, assert_well_formed

from support import builders as b
from support import commit_flow, wm_names
from support.fake_anthropic import FakeAnthropic, RecordedRequest, Reply, error, tool_use
from wm_core import SECTIONS
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc


@pytest.fixture
def backend() -> Backend:
    """Anthropic only: the fake model below writes that API's answers and errors."""
    return ANTHROPIC


SESSIONS = [f"outage-{n}" for n in range(4)]
OUTAGE_SECONDS = 3.0
THRESHOLD = 3
COOLDOWN = 0.25
MAX_DELAY = 0.5
CONCURRENCY = 4
SDK_TRIES = 2  # WM_ANTHROPIC_MAX_RETRIES=1 in anthropic_env
CREATION = {name: f"{name} of the outage test" for name in SECTIONS}


def _healthy(request: RecordedRequest) -> Reply:
    name = str((request.tool_choice or {}).get("name", "update_working_memory"))
    if name == "create_working_memory":
        return tool_use(CREATION, name=name)
    sections: dict[str, Any] = {s: {"op": "KEEP"} for s in SECTIONS}
    sections["Key Facts & Decisions"] = {"op": "APPEND", "items": ["Survived the outage"]}
    return tool_use({"sections": sections})


class Outage:
    """529 overloaded until ``ends``; counts what the outage cost."""

    def __init__(self, seconds: float) -> None:
        self.ends = time.monotonic() + seconds
        self.refused = 0
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply:
        if time.monotonic() < self.ends:
            with self._lock:
                self.refused += 1
            return error(529, headers={"retry-after-ms": "5"})
        return _healthy(request)


async def _commit(stub: Stub, session_id: str, text: str) -> list[pb.CommitEvent]:
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session(session_id),
            messages=[b.user(text)],
            create_session_if_missing=True,
        )
    )
    return (await commit_flow.commit(stub, session_id, within=60))[1]


async def test_outage_is_waited_out_and_the_breaker_bounds_the_attempts(
    llm_server: LlmServer, fake: FakeAnthropic
) -> None:
    app = await llm_server(
        WM_PHASE2_CONCURRENCY=str(CONCURRENCY),
        WM_PHASE2_MAX_ATTEMPTS="2",  # an outage does not spend these
        WM_PHASE2_RETRY_BASE_DELAY="0.05",
        WM_PHASE2_RETRY_MAX_DELAY=str(MAX_DELAY),
        WM_PHASE2_BREAKER_THRESHOLD=str(THRESHOLD),
        WM_PHASE2_BREAKER_COOLDOWN_SECONDS=str(COOLDOWN),
        WM_PHASE2_MAX_WAIT_SECONDS="60",
    )
    fake.set_default(_healthy)
    async with grpc.aio.insecure_channel(app.address, options=FRESH) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        for session_id in SESSIONS:
            events = await _commit(stub, session_id, "Start the CSV importer")
            assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED

        outage = Outage(OUTAGE_SECONDS)
        fake.set_default(outage)
        runs = await asyncio.gather(
            *(_commit(stub, s, "Dates use DD.MM.YYYY now") for s in SESSIONS)
        )
        assert time.monotonic() >= outage.ends  # nothing completed before the recovery

        attempts = 0
        for session_id, events in zip(SESSIONS, runs, strict=True):
            terminal = assert_well_formed(events)
            assert terminal.stage == pb.COMMIT_STAGE_COMPLETED, terminal
            assert pb.COMMIT_STAGE_FAILED not in [e.stage for e in events]
            commit = await stub.GetCommit(api.GetCommitRequest(name=events[0].commit))
            assert commit.state == pb.COMMIT_STATE_COMPLETED
            attempts += commit.attempt_count
            retries = [
                e.retry_scheduled for e in events if e.stage == pb.COMMIT_STAGE_RETRY_SCHEDULED
            ]
            for retry in retries:  # the waiting is visible: why, how long, until when
                assert retry.provider_unavailable and "529" in retry.reason
                assert retry.next_attempt_time.seconds > 0
                assert 0 < retry.wait_remaining.ToTimedelta().total_seconds() <= 60
            wm = await stub.GetWorkingMemory(
                api.GetWorkingMemoryRequest(name=wm_names.working_memory(session_id))
            )
            assert wm.version == 2 and "Survived the outage" in wm.document

        assert outage.refused > 0
        # Without the breaker each session retries on its own every MAX_DELAY/2..MAX_DELAY
        # (measured: 23 failed attempts, 47 refused requests). With it: the failures that
        # open it, the jobs already running then, and one probe per cooldown (which doubles
        # from COOLDOWN up to MAX_DELAY) (measured: 9 and 18).
        probes = int(OUTAGE_SECONDS / MAX_DELAY) + 2
        bound = THRESHOLD + CONCURRENCY + probes
        failed_attempts = attempts - len(SESSIONS)
        assert failed_attempts <= bound, (failed_attempts, bound)
        assert outage.refused <= bound * SDK_TRIES, (outage.refused, bound)
        assert app.worker.breaker.opened_count >= 1
