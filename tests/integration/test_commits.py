"""Commit: Phase 1 archive, Phase 2 in the background, stored and resumable progress."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from support import builders as b
from support import commit_flow
from support import wm_names as names
from support.errors import details
from support.providers import Answer, ProgrammableProvider, creation, keep_all, ops
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.llm.port import LlmError

Stub = service_grpc.WorkingMemoryServiceStub


async def _add(stub: Stub, session: str, *messages: pb.Message) -> api.AddMessagesResponse:
    return await stub.AddMessages(
        api.AddMessagesRequest(
            parent=names.session(session), messages=messages, create_session_if_missing=True
        )
    )


async def _commit(
    stub: Stub, session: str, keep: int = 0, request_id: str = ""
) -> list[pb.CommitEvent]:
    """CreateCommit, then every event of the commit to its end (WatchCommit)."""
    _, events = await commit_flow.commit(stub, session, keep, request_id=request_id)
    return events


async def _first(stub: Stub, session: str, keep: int = 0) -> pb.Commit:
    """CreateCommit, then a watch that reads the first event and is cancelled."""
    started: pb.Commit = await stub.CreateCommit(
        commit_flow.create_request(session, keep), timeout=30
    )
    call = stub.WatchCommit(api.WatchCommitRequest(name=started.name), timeout=30)
    event = await call.read()
    call.cancel()
    assert isinstance(event, pb.CommitEvent) and event.commit == started.name
    return started


async def _wait_terminal(stub: Stub, session: str, commit: str) -> list[pb.CommitEvent]:
    call = stub.WatchCommit(api.WatchCommitRequest(name=names.commit(session, commit)), timeout=30)
    return [e async for e in call if e.stage != pb.COMMIT_STAGE_HEARTBEAT]


# --- Phase 1 ---------------------------------------------------------------------------------
async def test_keep_zero_archives_everything(stub: Stub) -> None:
    await _add(stub, "k0", *[b.sized(10) for _ in range(5)])
    events = await _commit(stub, "k0", keep=0)
    first = events[0]
    assert first.sequence == 1 and first.stage == pb.COMMIT_STAGE_ARCHIVED
    assert first.phase1.archived and first.phase1.archive == "sessions/k0/archives/archive_001"
    assert (first.phase1.archived_message_count, first.phase1.kept_message_count) == (5, 0)
    assert first.phase1.archived_tokens == 50
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED and events[-1].terminal
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    session = await stub.GetSession(api.GetSessionRequest(name="sessions/k0"))
    assert (session.message_count, session.pending_tokens, session.archive_count) == (0, 0, 1)


async def test_keep_two_keeps_the_newest_and_remembers_keep(stub: Stub) -> None:
    await _add(stub, "k2", *[b.sized(t, f"m{t}") for t in (100, 200, 300, 400, 500)])
    first = (await _commit(stub, "k2", keep=2))[0]
    assert (first.phase1.archived_message_count, first.phase1.kept_message_count) == (3, 2)
    assert first.phase1.archived_tokens == 600
    session = await stub.GetSession(api.GetSessionRequest(name="sessions/k2"))
    assert session.keep_recent_count == 2 and session.pending_tokens == 0
    reply = await _add(stub, "k2", b.sized(50))  # pushes the 400 out of the window of 2
    assert reply.pending_tokens == 400


async def test_keep_larger_than_count_is_skipped_not_an_error(stub: Stub) -> None:
    await _add(stub, "kx", b.sized(10), b.sized(10))
    events = await _commit(stub, "kx", keep=10)
    assert len(events) == 1
    assert events[0].stage == pb.COMMIT_STAGE_SKIPPED and events[0].terminal
    assert events[0].phase1.skip_reason == pb.SKIP_REASON_WITHIN_KEEP_WINDOW
    assert events[0].state == pb.COMMIT_STATE_SKIPPED
    await stub.CreateSession(api.CreateSessionRequest(session_id="empty"))
    events = await _commit(stub, "empty")
    assert events[0].phase1.skip_reason == pb.SKIP_REASON_NO_MESSAGES


async def test_pending_tokens_reference_examples(stub: Stub) -> None:
    reply = await _add(stub, "ex0", b.sized(100), b.sized(200), b.sized(300))
    assert reply.pending_tokens == 600  # keep 0 → all
    await stub.CreateSession(api.CreateSessionRequest(session_id="ex2"))
    await _commit(stub, "ex2", keep=2)  # remembers keep 2 on an empty session
    reply = await _add(stub, "ex2", *[b.sized(t) for t in (100, 200, 300, 400, 500)])
    assert reply.pending_tokens == 600  # first total − keep
    await stub.CreateSession(api.CreateSessionRequest(session_id="ex10"))
    await _commit(stub, "ex10", keep=10)
    reply = await _add(stub, "ex10", *[b.sized(100) for _ in range(3)])
    assert reply.pending_tokens == 0  # keep larger than count
    await stub.CreateSession(api.CreateSessionRequest(session_id="exe"))
    assert (await stub.GetSession(api.GetSessionRequest(name="sessions/exe"))).pending_tokens == 0


async def test_tool_pair_at_the_boundary_stays_together(stub: Stub) -> None:
    await _add(
        stub,
        "pair",
        b.user("read it", "u1"),
        b.tool_call("t1", "read_file", {"path": "a.py"}, "a1"),
        b.tool_result("t1", "print(1)", message_id="r1"),
        b.assistant("done", "a2"),
    )
    # keep 2 would split t1's call (a1) from its result (r1): the split moves earlier.
    first = (await _commit(stub, "pair", keep=2))[0]
    assert (first.phase1.archived_message_count, first.phase1.kept_message_count) == (1, 3)
    archive = await stub.ListMessages(
        api.ListMessagesRequest(parent="sessions/pair/archives/archive_001")
    )
    assert [m.id for m in archive.messages] == ["u1"]


async def test_concurrent_commits_make_contiguous_archives(stub: Stub) -> None:
    for i in range(8):
        await _add(stub, "conc", b.sized(5, f"c{i}"))
    firsts = await asyncio.gather(*[_first(stub, "conc", keep=0) for _ in range(6)])
    archived = sorted(c.archive for c in firsts if c.archive)
    assert archived == [
        "sessions/conc/archives/archive_001"
    ]  # one got the messages, the others found none
    for round_ in range(3):
        await _add(stub, "conc", *[b.sized(5, f"r{round_}-{i}") for i in range(4)])
        await asyncio.gather(_first(stub, "conc"), _first(stub, "conc"))
    listed = await stub.ListArchives(api.ListArchivesRequest(parent="sessions/conc"))
    assert [a.name for a in listed.archives] == [
        f"sessions/conc/archives/archive_00{i}" for i in range(1, 5)
    ]
    ids = []
    for archive in listed.archives:
        full = await stub.ListMessages(api.ListMessagesRequest(parent=archive.name))
        ids.extend(m.id for m in full.messages)
    assert len(ids) == len(set(ids)) == 20


async def test_same_request_id_is_the_same_commit(stub: Stub) -> None:
    await _add(stub, "idem", b.sized(10), b.sized(10))
    first = await _commit(stub, "idem", request_id="commit-1")
    await _add(stub, "idem", b.sized(10))
    again = await _commit(stub, "idem", request_id="commit-1")
    assert [e.SerializeToString() for e in again] == [e.SerializeToString() for e in first]
    session = await stub.GetSession(api.GetSessionRequest(name="sessions/idem"))
    assert session.archive_count == 1 and session.message_count == 1


async def test_message_added_during_phase2_stays_live(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    provider.gate = asyncio.Event()
    await _add(stub, "live", b.sized(10, "old"))
    first = await _first(stub, "live")
    await _add(stub, "live", b.user("new while running", "new"))
    provider.gate.set()
    await _wait_terminal(stub, "live", first.name)
    session = await stub.GetSession(api.GetSessionRequest(name="sessions/live"))
    assert session.message_count == 1 and session.archive_count == 1


# --- Phase 2 ---------------------------------------------------------------------------------
async def test_first_commit_creates_the_wm_and_second_updates_it_through_guards(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    provider.creates.append(
        Answer(
            creation(
                session_title="Fix the flaky payment tests",
                current_state="Investigating the retry logic.",
                files_context="- `app/payments.py`: retry loop",
                errors_corrections="- Timeout in test_charge: raised the limit",
            )
        )
    )
    provider.updates.append(
        Answer(
            ops(
                files_context={"op": "UPDATE", "content": "- `app/db.py`: connection pool"},
                errors_corrections={"op": "UPDATE", "content": "- nothing"},
            )
        )
    )
    await _add(stub, "wm", b.user("The payment tests are flaky"), b.assistant("Looking"))
    events = await _commit(stub, "wm")
    stages = [e.stage for e in events]
    assert stages[:2] == [pb.COMMIT_STAGE_ARCHIVED, pb.COMMIT_STAGE_PHASE2_STARTED]
    assert events[1].phase2_started.mode == pb.PHASE2_MODE_CREATE
    assert pb.COMMIT_STAGE_LLM_REQUEST_SENT in stages
    assert pb.COMMIT_STAGE_LLM_RESPONSE_RECEIVED in stages
    assert stages[-3:] == [
        pb.COMMIT_STAGE_WORKING_MEMORY_STORED,
        pb.COMMIT_STAGE_MEMORIES_EXTRACTED,
        pb.COMMIT_STAGE_COMPLETED,
    ]
    assert sum(1 for e in events if e.terminal) == 1
    wm = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name="sessions/wm/workingMemories/latest")
    )
    assert wm.version == 1 and "Fix the flaky payment tests" in wm.document
    assert events[-3].working_memory_stored.abstract.startswith("Fix the flaky payment tests")

    await _add(stub, "wm", b.user("Also check the pool"))
    events = await _commit(stub, "wm")
    assert events[1].phase2_started.mode == pb.PHASE2_MODE_UPDATE
    guards = {e.guard_decision.section for e in events if e.stage == pb.COMMIT_STAGE_GUARD_DECISION}
    assert {"Files & Context", "Errors & Corrections"} <= guards
    wm = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name="sessions/wm/workingMemories/latest")
    )
    assert wm.version == 2
    assert "app/payments.py" in wm.document and "app/db.py" in wm.document
    assert "Timeout in test_charge" in wm.document
    completed = events[-1].completed
    assert completed.state == pb.COMMIT_STATE_COMPLETED and completed.decisions
    assert completed.token_usage.llm_calls >= 1


async def test_keep_all_leaves_the_wm_unchanged(stub: Stub, provider: ProgrammableProvider) -> None:
    provider.creates.append(Answer(creation(session_title="Stable title", current_state="x")))
    await _add(stub, "keep", b.user("one"))
    await _commit(stub, "keep")
    before = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name="sessions/keep/workingMemories/latest")
    )
    provider.updates.append(Answer(keep_all()))
    await _add(stub, "keep", b.user("two"))
    await _commit(stub, "keep")
    after = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name="sessions/keep/workingMemories/latest")
    )
    assert after.version == 2 and after.document == before.document


async def test_cancelled_stream_does_not_stop_phase2(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    provider.default_create = Answer(creation(session_title="Slow"), delay=0.5)
    await _add(stub, "cancel", b.user("hello"))
    first = await _first(stub, "cancel")  # reads Phase 1, then cancels the stream
    events = await _wait_terminal(stub, "cancel", first.name)
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    commit = await stub.GetCommit(api.GetCommitRequest(name=first.name))
    assert commit.state == pb.COMMIT_STATE_COMPLETED and commit.working_memory_version == 1


async def test_watch_from_start_middle_and_after_completion(stub: Stub) -> None:
    await _add(stub, "watch", b.user("hello"))
    live = await _commit(stub, "watch")
    commit = live[0].commit
    replay = await _wait_terminal(stub, "watch", commit)
    assert [e.SerializeToString() for e in replay] == [e.SerializeToString() for e in live]
    middle = [
        e async for e in stub.WatchCommit(api.WatchCommitRequest(name=commit, after_sequence=2))
    ]
    assert [e.SerializeToString() for e in middle] == [e.SerializeToString() for e in live[2:]]
    after = [
        e
        async for e in stub.WatchCommit(
            api.WatchCommitRequest(name=commit, after_sequence=live[-1].sequence)
        )
    ]
    assert after == []


async def test_watch_sends_heartbeats_while_waiting(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    provider.gate = asyncio.Event()
    await _add(stub, "hb", b.user("x"))
    first = await _first(stub, "hb")
    call = stub.WatchCommit(api.WatchCommitRequest(name=first.name, after_sequence=1))
    seen = []
    async for event in call:
        seen.append(event)
        if event.stage == pb.COMMIT_STAGE_HEARTBEAT:
            provider.gate.set()
        if event.terminal:
            break
    beats = [e for e in seen if e.stage == pb.COMMIT_STAGE_HEARTBEAT]
    assert beats and beats[0].heartbeat.last_sequence >= 1
    assert seen[-1].stage == pb.COMMIT_STAGE_COMPLETED


async def test_watch_unknown_commit_is_not_found(stub: Stub) -> None:
    await stub.CreateSession(api.CreateSessionRequest(session_id="w404"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stub.WatchCommit(api.WatchCommitRequest(name=names.commit("w404", "nope"))):
            pass
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert details(caught.value)[0].reason == "COMMIT_NOT_FOUND"


async def test_keep_recent_count_out_of_range(stub: Stub) -> None:
    await stub.CreateSession(api.CreateSessionRequest(session_id="range"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _commit(stub, "range", keep=10_001)
    assert details(caught.value)[1] == ["keep_recent_count"]


# --- failures --------------------------------------------------------------------------------
async def test_permanent_failure_keeps_previous_wm_then_retry_succeeds(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    provider.creates.append(Answer(creation(session_title="Original title", current_state="ok")))
    await _add(stub, "fail", b.user("first"))
    await _commit(stub, "fail")
    before = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name="sessions/fail/workingMemories/latest")
    )

    provider.default_update = Answer(error=LlmError("model overloaded", retryable=True))
    await _add(stub, "fail", b.user("second: remember the port is 8443", "second"))
    events = await _commit(stub, "fail")
    assert events[-1].stage == pb.COMMIT_STAGE_FAILED and events[-1].terminal
    retries = [e for e in events if e.stage == pb.COMMIT_STAGE_RETRY_SCHEDULED]
    assert len(retries) == 2  # 3 attempts
    failed = events[-1].failed
    assert failed.state == pb.COMMIT_STATE_FAILED and "overloaded" in failed.error.message
    after = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name="sessions/fail/workingMemories/latest")
    )
    assert after.version == before.version and after.document == before.document

    provider.default_update = Answer(
        ops(key_facts_decisions={"op": "APPEND", "items": ["Port is 8443"]})
    )
    commit = events[0].commit
    retried = await stub.RetryCommit(api.RetryCommitRequest(name=commit))
    assert retried.state == pb.COMMIT_STATE_PENDING
    tail = await _wait_terminal(stub, "fail", commit)
    assert tail[-1].stage == pb.COMMIT_STAGE_COMPLETED
    wm = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name="sessions/fail/workingMemories/latest")
    )
    assert "Port is 8443" in wm.document and wm.version == before.version + 1
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.RetryCommit(api.RetryCommitRequest(name=commit))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_later_commit_covers_a_failed_archive(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    provider.default_create = Answer(error=LlmError("down", retryable=False))
    await _add(stub, "cover", b.user("the secret word is pelican", "p1"))
    failed = await _commit(stub, "cover")
    assert failed[-1].stage == pb.COMMIT_STAGE_FAILED
    provider.default_create = Answer(creation(session_title="Recovered"))
    await _add(stub, "cover", b.user("next", "p2"))
    done = await _commit(stub, "cover")
    assert done[-1].stage == pb.COMMIT_STAGE_COMPLETED
    assert list(done[1].phase2_started.covered_archives) == [
        "sessions/cover/archives/archive_001", "sessions/cover/archives/archive_002",
    ]  # fmt: skip
    create_request = provider.calls[-1][1]
    assert [m.id for m in create_request.messages] == ["p1", "p2"]
    first = await stub.GetCommit(api.GetCommitRequest(name=failed[0].commit))
    assert first.state == pb.COMMIT_STATE_FAILED
    assert first.covered_by_commit == done[0].commit
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.RetryCommit(api.RetryCommitRequest(name=failed[0].commit))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    covering = details(caught.value)[0].metadata["covered_by_commit_id"]  # an id, as before
    assert covering == names.last_segment(done[0].commit)


async def test_compact_streams_to_the_end(stub: Stub) -> None:
    await _add(stub, "compact", *[b.sized(10) for _ in range(4)])
    _, events = await commit_flow.compact(stub, "compact")
    assert events[0].phase1.kept_message_count == 0
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED


async def test_list_and_get_commits(stub: Stub) -> None:
    await _add(stub, "lc", b.sized(1))
    a = await _commit(stub, "lc")
    b_events = await _commit(stub, "lc")
    listed = await stub.ListCommits(api.ListCommitsRequest(parent="sessions/lc", page_size=1))
    assert [c.name for c in listed.commits] == [b_events[0].commit]
    rest = await stub.ListCommits(
        api.ListCommitsRequest(parent="sessions/lc", page_token=listed.next_page_token)
    )
    assert [c.name for c in rest.commits] == [a[0].commit] and not rest.next_page_token
