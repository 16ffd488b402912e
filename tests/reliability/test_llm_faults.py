"""The LLM fault matrix: every way a model API can misbehave, through the real SDKs.

Each case runs once per vendor provider (``anthropic`` against a local Messages API,
``openai`` against a local Chat Completions server; see ``llm_backends``) on a real server
(settings from the environment, Phase 2 on that provider). A first commit creates working memory v1;
the second commit meets the fault in its update call. Whatever the fault, the commit must
end in exactly one terminal state: completed, or failed with a retryable error that
RetryCommit then completes. And the working memory a client reads is never a placeholder:
either v1 untouched, or a v2 that still holds everything v1 held.

Each fault is tried twice: once transient (the next answer is healthy, so the SDK's retry
or the recovery chain absorbs it) and once persistent (every answer is the fault, so Phase 2
exhausts its attempts, or, for a provider outage, waits until the job's maximum age).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from llm_backends import Backend
from reliability_support import (
    FRESH,
    LlmServer,
    Stub,
    assert_well_formed,
    wait_terminal,
)

from support import builders as b
from support import commit_flow, wm_names
from support.fake_http import FakeApi, RecordedRequest, Reply, connection_reset, slow
from wm_core import SECTIONS, parse_document
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

SESSION = "faults"
MAX_ATTEMPTS = 2  # WM_PHASE2_MAX_ATTEMPTS in conftest.server_env
# An outage is waited out for this long (short here) before the commit fails; the breaker's
# cooldown is short too so that RetryCommit after the recovery is not held back.
OUTAGE_ENV = {
    "WM_PHASE2_MAX_WAIT_SECONDS": "1",
    "WM_PHASE2_RETRY_MAX_DELAY": "0.2",
    "WM_PHASE2_BREAKER_COOLDOWN_SECONDS": "0.1",
}
SDK_TRIES = 2  # WM_<VENDOR>_MAX_RETRIES=1: one call and one SDK retry
# Codes of a Phase 2 failure that RetryCommit can fix (LLM_UNAVAILABLE, GENERATION_FAILED);
# FAILED_PRECONDITION (LLM_REJECTED: the API refused the request itself) is not one of them.
RETRYABLE = {grpc.StatusCode.UNAVAILABLE.value[0], grpc.StatusCode.ABORTED.value[0]}

CREATION = {
    "Session Title": "Reliability matrix for the CSV importer",
    "Current State": "Dates parse; duplicate detection comes next.",
    "Task & Goals": "- Import samples/dkb.csv without errors",
    "Key Facts & Decisions": "- Dates use the DD.MM.YYYY format",
    "Files & Context": "- `src/importer.py`: the CSV importer",
    "Errors & Corrections": "- ValueError on 31.01.2025: parse_date knew only ISO dates",
    "Open Issues": "- Should pending rows be imported?",
}
V1_LINES = list(CREATION.values())
NEW_FACT = "The importer survived the fault"
# A cut-off answer: a complete APPEND, then an UPDATE the model was still writing.
CUT_OFF = {
    "sections": {
        "Key Facts & Decisions": {"op": "APPEND", "items": ["Cut-off answers are salvaged"]},
        "Current State": {"op": "UPDATE", "content": "Half a sen"},
    }
}
NO_MEMORIES: dict[str, Any] = {"ops": []}  # the memory extraction's answer: nothing durable
SCHEMA_INVALID = {"sections": {"Bogus": {"op": "DELETE"}, "Current State": {"op": "DELETE"}}}


Answer = Callable[[Backend, RecordedRequest], Reply]


def healthy(backend: Backend, request: RecordedRequest) -> Reply:
    """What a well-behaved model answers to the forced tool of the request."""
    if backend.requested_tool(request) == "create_working_memory":
        return backend.tool(CREATION, name="create_working_memory")
    if backend.requested_tool(request) == "update_memories":
        return backend.tool(NO_MEMORIES, name="update_memories")
    sections: dict[str, Any] = {name: {"op": "KEEP"} for name in SECTIONS}
    sections["Key Facts & Decisions"] = {"op": "APPEND", "items": [NEW_FACT]}
    return backend.tool({"sections": sections}, name="update_working_memory")


def _with_tool(tool_input: dict[str, Any], cut_off: bool = False) -> Answer:
    return lambda backend, request: backend.tool(
        tool_input, name=backend.requested_tool(request), cut_off=cut_off
    )


def answering(backend: Backend, answer: Answer) -> Callable[[RecordedRequest], Reply]:
    """``answer`` as a responder of the backend's fake server."""
    return lambda request: answer(backend, request)


FAST_RETRY = {"retry-after-ms": "5"}  # the SDK honours it: its backoff stays short


@dataclass(frozen=True)
class Fault:
    """One misbehaviour, and what Phase 2 must make of it when it never stops."""

    name: str
    reply: Answer
    persistent_state: int  # terminal state when every answer is this fault
    # Requests the server makes before that state; None when the recovery chain decides
    # (a salvaged answer may or may not be followed by a repair call for what was cut off).
    persistent_requests: int | None
    salvaged: bool = False  # the faulty answer itself still carries usable ops
    # A provider outage: waited out until the maximum age, attempts not counted, so the
    # number of requests is that of the attempts made in the meantime.
    outage: bool = False


FAULTS = [
    Fault(
        "429",
        lambda backend, _: backend.error(429, retry_after=0.01),
        pb.COMMIT_STATE_FAILED,
        None,
        outage=True,
    ),
    Fault(
        "500",
        lambda backend, _: backend.error(500, headers=FAST_RETRY),
        pb.COMMIT_STATE_FAILED,
        None,
        outage=True,
    ),
    Fault(
        "529",
        lambda backend, _: backend.error(529, headers=FAST_RETRY),
        pb.COMMIT_STATE_FAILED,
        None,
        outage=True,
    ),
    # Longer than WM_<VENDOR>_TIMEOUT (0.5 s): the SDK gives up on it and retries.
    Fault(
        "timeout",
        lambda backend, request: slow(healthy(backend, request), 1.5),
        pb.COMMIT_STATE_FAILED,
        None,
        outage=True,
    ),
    Fault(
        "connection_reset",
        lambda backend, _: connection_reset(),
        pb.COMMIT_STATE_FAILED,
        None,
        outage=True,
    ),
    # Update, repair and creation fallback all come back as prose: nothing to store.
    Fault(
        "text_only",
        lambda backend, _: backend.text_only("The working memory looks fine to me."),
        pb.COMMIT_STATE_FAILED,
        MAX_ATTEMPTS * 3,
    ),
    # The complete APPEND is salvaged, the half-written UPDATE is not applied.
    Fault(
        "max_tokens",
        _with_tool(CUT_OFF, cut_off=True),
        pb.COMMIT_STATE_COMPLETED,
        None,
        salvaged=True,
    ),
    Fault("schema_invalid", _with_tool(SCHEMA_INVALID), pb.COMMIT_STATE_FAILED, MAX_ATTEMPTS * 3),
]


async def _commit(stub: Stub, *messages: pb.Message) -> list[pb.CommitEvent]:
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session(SESSION), messages=messages, create_session_if_missing=True
        )
    )
    return (await commit_flow.commit(stub, SESSION, within=60))[1]


async def _working_memories(stub: Stub) -> list[pb.WorkingMemory]:
    latest = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name=wm_names.working_memory(SESSION))
    )
    return [
        await stub.GetWorkingMemory(
            api.GetWorkingMemoryRequest(name=wm_names.working_memory(SESSION, v))
        )
        for v in range(1, latest.version + 1)
    ]


def _assert_holds_v1(document: str) -> None:
    """Not a placeholder: the seven sections, and every line working memory v1 had."""
    bodies = parse_document(document)
    assert list(bodies) == list(SECTIONS)
    for line in V1_LINES:
        assert line in document, f"lost {line!r}:\n{document}"


async def _create_v1(stub: Stub, fake: FakeApi, backend: Backend) -> pb.WorkingMemory:
    fake.enqueue(
        backend.tool(CREATION, name="create_working_memory"),
        backend.tool(NO_MEMORIES, name="update_memories"),  # the extraction after it
    )
    events = await _commit(
        stub, b.user("Import samples/dkb.csv please", "u1"), b.assistant("On it")
    )
    assert assert_well_formed(events).stage == pb.COMMIT_STAGE_COMPLETED
    wm = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name=wm_names.working_memory(SESSION))
    )
    assert wm.version == 1
    _assert_holds_v1(wm.document)
    fake.clear()
    return wm


@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_fault_ends_completed_or_retryable_and_keeps_the_working_memory(
    llm_server: LlmServer, fake: FakeApi, backend: Backend, fault: Fault, persistent: bool
) -> None:
    """The update after working memory v1 meets the fault; see the module docstring."""
    app = await llm_server(**OUTAGE_ENV)
    async with grpc.aio.insecure_channel(app.address, options=FRESH) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        v1 = await _create_v1(stub, fake, backend)

        if persistent:
            fake.set_default(answering(backend, fault.reply))
        else:
            fake.enqueue(answering(backend, fault.reply))
            fake.set_default(answering(backend, healthy))
        events = await _commit(stub, b.user("Dates now use DD.MM.YYYY", "u2"), b.assistant("Ok"))
        terminal = assert_well_formed(events)
        commit = await stub.GetCommit(api.GetCommitRequest(name=events[0].commit))
        assert commit.state == terminal.state
        expected = fault.persistent_state if persistent else pb.COMMIT_STATE_COMPLETED
        assert pb.CommitState.Name(commit.state) == pb.CommitState.Name(expected)
        assert all(r.path == backend.route for r in fake.requests)

        if fault.salvaged:
            assert fake.requests  # the first answer, the cut-off one, was salvaged
        elif persistent and fault.outage:
            assert len(fake.requests) == commit.attempt_count * SDK_TRIES
        elif persistent:
            assert len(fake.requests) == fault.persistent_requests
        else:
            assert len(fake.requests) >= 2  # the fault was met, and something came after it

        versions = await _working_memories(stub)
        assert versions[0].document == v1.document  # a stored version is never rewritten
        for wm in versions:
            _assert_holds_v1(wm.document)

        if commit.state == pb.COMMIT_STATE_COMPLETED:
            assert commit.working_memory_version == 2 and len(versions) == 2
            if fault.salvaged:
                assert "Cut-off answers are salvaged" in versions[1].document
                assert "Half a sen" not in versions[1].document
                parsed = [e for e in events if e.stage == pb.COMMIT_STAGE_OPS_PARSED]
                assert any("cut off" in p for p in parsed[0].ops_parsed.problems)
            else:
                assert NEW_FACT in versions[1].document
            return

        # A retryable failure: attempts exhausted, the reason kept, v1 still current, and the
        # archive's raw messages still reach the model through the assembled context.
        assert commit.error.code in RETRYABLE, commit.error
        assert commit.error.message
        retries = [e.retry_scheduled for e in events if e.stage == pb.COMMIT_STAGE_RETRY_SCHEDULED]
        if fault.outage:  # waited out for the maximum age, then failed, still retryable
            assert "provider unavailable for 1s" in commit.error.message
            assert len(retries) == commit.attempt_count - 1
            assert all(r.provider_unavailable and r.next_attempt_time.seconds for r in retries)
        else:
            assert commit.attempt_count == MAX_ATTEMPTS
            assert len(retries) == MAX_ATTEMPTS - 1
            assert not any(r.provider_unavailable for r in retries)
        assert [wm.version for wm in versions] == [1]
        context = await stub.AssembleContext(
            api.AssembleContextRequest(name=wm_names.session(SESSION), token_budget=100_000)
        )
        assert list(context.uncovered_archives) == [wm_names.archive(SESSION, "archive_002")]
        assert context.working_memory_version == 1
        assert "Dates now use DD.MM.YYYY" in str(context.messages)

        # The model recovers: RetryCommit completes the same commit, and v2 keeps v1.
        fake.set_default(answering(backend, healthy))
        await stub.RetryCommit(api.RetryCommitRequest(name=commit.name))
        retried = assert_well_formed(await wait_terminal(stub, commit.name))
        assert retried.stage == pb.COMMIT_STAGE_COMPLETED
        wm = await stub.GetWorkingMemory(
            api.GetWorkingMemoryRequest(name=wm_names.working_memory(SESSION))
        )
        assert wm.version == 2 and NEW_FACT in wm.document
        _assert_holds_v1(wm.document)
        context = await stub.AssembleContext(
            api.AssembleContextRequest(name=wm_names.session(SESSION), token_budget=100_000)
        )
        assert not context.uncovered_archives


@pytest.mark.parametrize("fault", FAULTS[:6], ids=[f.name for f in FAULTS[:6]])
async def test_failed_first_commit_stores_no_working_memory(
    llm_server: LlmServer, fake: FakeApi, backend: Backend, fault: Fault
) -> None:
    """Without a previous WM the creation call meets the fault: nothing may be stored in its
    place (a client reads NOT_FOUND, not an empty or made-up document)."""
    app = await llm_server(**OUTAGE_ENV)
    fake.set_default(answering(backend, fault.reply))
    async with grpc.aio.insecure_channel(app.address, options=FRESH) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        events = await _commit(stub, b.user("Import samples/dkb.csv please", "u1"))
        terminal = assert_well_formed(events)
        assert terminal.stage == pb.COMMIT_STAGE_FAILED
        assert terminal.failed.error.code in RETRYABLE
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetWorkingMemory(
                api.GetWorkingMemoryRequest(name=wm_names.working_memory(SESSION))
            )
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        session = await stub.GetSession(api.GetSessionRequest(name=wm_names.session(SESSION)))
        assert session.working_memory_version == 0
