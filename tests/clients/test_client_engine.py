"""ContextEngine against a real server: the commit threshold, background commits, compact."""

from __future__ import annotations

import asyncio

import pytest

from support import builders as b
from support.providers import Answer, ProgrammableProvider, creation
from wm_client import CompactOutcome, ContextEngine, NotFoundError, WmClient
from wm_proto.v1 import resources_pb2 as pb
from wm_server.llm.port import LlmError


@pytest.fixture
async def engine(client: WmClient) -> ContextEngine:
    return ContextEngine(client)


async def _commits(client: WmClient, session: str) -> list[pb.Commit]:
    return list((await client.list_commits(session)).commits)


# --- the threshold: pending_tokens ≥ floor(token_budget × commit_ratio) ----------------------------
async def test_below_the_threshold_no_commit(engine: ContextEngine, client: WmClient) -> None:
    result = await engine.after_turn("below", [b.sized(100)], token_budget=202)
    assert result.pending_tokens == 100 and result.threshold == 101
    assert result.commit is None and not result.commit_started
    assert await _commits(client, "below") == []
    assert (await client.get_session("below")).message_count == 1


async def test_at_the_threshold_a_commit_starts(engine: ContextEngine, client: WmClient) -> None:
    # 201 × 0.5 = 100.5, floored to 100: exactly the pending tokens.
    result = await engine.after_turn(
        "at", [b.sized(60), b.sized(40)], token_budget=201, keep_recent=0
    )
    assert result.pending_tokens == 100 and result.threshold == 100
    assert result.commit is not None
    terminal = await result.commit.wait()
    assert terminal.stage == pb.COMMIT_STAGE_COMPLETED
    assert len(await _commits(client, "at")) == 1


async def test_above_the_threshold_a_commit_keeps_the_recent_messages(
    engine: ContextEngine, client: WmClient
) -> None:
    turn = [b.sized(30, f"m{i}") for i in range(5)]
    result = await engine.after_turn(
        "above", turn, token_budget=100, commit_ratio=0.5, keep_recent=2
    )
    assert result.pending_tokens == 150 and result.threshold == 50
    assert result.added_message_ids == tuple(f"m{i}" for i in range(5))
    assert result.commit is not None
    phase1 = await result.commit.phase1()
    assert phase1.phase1.archived_message_count == 3 and phase1.phase1.kept_message_count == 2
    await result.commit.wait()
    session = await client.get_session("above")
    assert session.message_count == 2 and session.keep_recent_count == 2
    assert session.working_memory_version == 1


async def test_the_threshold_is_read_from_the_whole_turn_added_in_one_batch(
    engine: ContextEngine, client: WmClient
) -> None:
    first = await engine.after_turn("turns", [b.sized(40)], token_budget=200, keep_recent=1)
    assert first.commit is None
    second = await engine.after_turn(
        "turns", [b.sized(30), b.sized(30)], token_budget=200, keep_recent=1
    )
    assert second.pending_tokens == 100 and second.commit is not None
    await second.commit.wait()
    again = await engine.after_turn("turns", [b.sized(30), b.sized(30)], token_budget=200)
    assert again.duplicate_message_ids == () and len(again.added_message_ids) == 2


async def test_ratio_zero_commits_every_turn_and_bad_arguments_are_refused(
    engine: ContextEngine,
) -> None:
    result = await engine.after_turn("zero", [b.user("hi")], token_budget=1000, commit_ratio=0)
    assert result.threshold == 0 and result.commit is not None
    await result.commit.wait()
    empty = await engine.after_turn("zero", [], token_budget=1000)
    assert empty.pending_tokens is None and empty.commit is None
    with pytest.raises(ValueError):
        await engine.after_turn("zero", [b.user("x")], token_budget=0)
    with pytest.raises(ValueError):
        await engine.after_turn("zero", [b.user("x")], token_budget=10, commit_ratio=1.5)
    with pytest.raises(ValueError):
        await engine.after_turn("zero", [b.user("x")], token_budget=10, keep_recent=-1)


# --- background commits -------------------------------------------------------------------------------
async def test_a_background_commit_does_not_block_the_turn(
    engine: ContextEngine, client: WmClient, provider: ProgrammableProvider
) -> None:
    provider.gate = asyncio.Event()  # Phase 2 cannot finish until the test allows it
    result = await asyncio.wait_for(
        engine.after_turn("bg", [b.sized(80), b.sized(80)], token_budget=100, keep_recent=0),
        timeout=5,
    )
    commit = result.commit
    assert commit is not None and not commit.done
    phase1 = await asyncio.wait_for(commit.phase1(), timeout=5)
    assert phase1.stage == pb.COMMIT_STAGE_ARCHIVED
    # the next turn goes on while Phase 2 is still waiting
    await asyncio.wait_for(engine.after_turn("bg", [b.user("next")], 100_000), timeout=5)
    assert not commit.done
    state = await client.get_commit(phase1.commit)
    assert state.state in (pb.COMMIT_STATE_PENDING, pb.COMMIT_STATE_RUNNING)
    assert engine.running_commits() == (commit,)
    provider.gate.set()
    terminal = await asyncio.wait_for(commit.wait(), timeout=10)
    assert terminal.stage == pb.COMMIT_STAGE_COMPLETED and terminal.commit == commit.commit
    await asyncio.sleep(0)
    assert engine.running_commits() == ()


async def test_back_to_back_commits_of_a_session_do_not_race(
    engine: ContextEngine, client: WmClient
) -> None:
    """Two turns over the threshold in a row: the second commit starts only after the first
    answered Phase 1, so both turns end archived, in order, whatever the timing."""
    first = await engine.after_turn("twice", [b.sized(100, "a")], token_budget=100, keep_recent=0)
    second = await engine.after_turn("twice", [b.sized(100, "b")], token_budget=100, keep_recent=0)
    assert first.commit is not None and second.commit is not None
    outcomes = await engine.wait_idle()
    assert all(isinstance(o, pb.CommitEvent) and o.terminal for o in outcomes)
    one, two = await first.commit.phase1(), await second.commit.phase1()
    assert one.phase1.archive == "sessions/twice/archives/archive_001"
    assert one.phase1.archived_message_count + two.phase1.archived_message_count == 2
    session = await client.get_session("twice")
    assert session.message_count == 0 and session.total_message_count == 2


async def test_wait_idle_and_close(engine: ContextEngine, provider: ProgrammableProvider) -> None:
    provider.gate = asyncio.Event()
    result = await engine.after_turn("close", [b.sized(200)], token_budget=100, keep_recent=0)
    assert result.commit is not None
    await result.commit.phase1()
    await engine.aclose()  # stops following; Phase 2 goes on on the server
    assert result.commit.task.cancelled()
    provider.gate.set()
    assert result.commit.commit is not None
    events = await engine.client.watch_commit(result.commit.commit).collect()
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED


# --- compact ------------------------------------------------------------------------------------------
async def test_compact_waits_for_the_working_memory(
    engine: ContextEngine, client: WmClient, provider: ProgrammableProvider
) -> None:
    provider.default_create = Answer(creation(session_title="Fix the importer"))
    turn = [b.user("fix samples/dkb.csv import", "u1"), b.assistant("x" * 2000, "a1")]
    await engine.after_turn("cp", turn, token_budget=1_000_000)
    provider.gate = asyncio.Event()
    task = asyncio.create_task(engine.compact("cp"))
    await asyncio.sleep(0.5)
    assert not task.done()  # waiting for Phase 2
    provider.gate.set()
    result = await asyncio.wait_for(task, timeout=10)
    assert result.outcome is CompactOutcome.COMPLETED and result.compacted
    assert "Fix the importer" in result.summary
    assert (
        result.archived_message_count == 2 and result.archive == "sessions/cp/archives/archive_001"
    )
    assert result.commit.startswith("sessions/cp/commits/")
    assert result.working_memory_version == 1
    assert result.tokens_before > result.tokens_after > 0
    session = await client.get_session("cp")
    assert session.message_count == 0 and session.working_memory_version == 1
    context = await engine.assemble("cp", 50_000)
    assert context.working_memory_version == 1
    assert "[Session History Summary]" in context.messages[0].parts[0].text


async def test_compact_reports_skipped_and_failed(
    engine: ContextEngine, client: WmClient, provider: ProgrammableProvider
) -> None:
    await client.create_session("nothing")
    skipped = await engine.compact("nothing")
    assert skipped.outcome is CompactOutcome.SKIPPED and not skipped.compacted
    assert skipped.summary == "" and "no live messages" in skipped.error

    provider.default_create = Answer(error=LlmError("model refused the request", retryable=False))
    await engine.after_turn("broken", [b.user("hello")], token_budget=1_000_000)
    failed = await engine.compact("broken")
    assert failed.outcome is CompactOutcome.FAILED and not failed.compacted
    assert "model refused" in failed.error
    assert failed.tokens_after == failed.tokens_before  # the messages stay in context


async def test_compact_of_a_missing_session_raises(engine: ContextEngine) -> None:
    with pytest.raises(NotFoundError):
        await engine.compact("nobody")


# --- sessions the server commits itself -----------------------------------------------------
async def test_a_session_with_a_server_policy_is_never_committed_twice(
    engine: ContextEngine, client: WmClient
) -> None:
    policy = pb.SessionConfig(
        auto_commit=pb.AutoCommitPolicy(pending_token_threshold=150, keep_recent_count=1)
    )
    created = await client.create_session("managed", config=policy)
    assert created.config.auto_commit.pending_token_threshold == 150
    quiet = await engine.after_turn("managed", [b.sized(100)], token_budget=100)
    assert quiet.commit is None and quiet.server_commit == ""  # over the engine's threshold
    crossing = await engine.after_turn("managed", [b.sized(100), b.sized(100)], token_budget=100)
    assert crossing.commit is None and crossing.server_commit
    commits = await _commits(client, "managed")
    assert [c.name for c in commits] == [crossing.server_commit]
    assert commits[0].trigger == pb.COMMIT_TRIGGER_PENDING_TOKENS

    # Policy off (UpdateSession): after ``forget`` the engine commits the session again.
    off = pb.SessionConfig(auto_commit=pb.AutoCommitPolicy(pending_token_threshold=0))
    updated = await client.update_session(
        "managed", off, ["config.auto_commit.pending_token_threshold"]
    )
    assert updated.config.auto_commit.pending_token_threshold == 0
    engine.forget("managed")
    own = await engine.after_turn("managed", [b.sized(100), b.sized(100)], token_budget=100)
    assert own.commit is not None and own.server_commit == ""
    await own.commit.wait()
    assert len(await _commits(client, "managed")) == 2
