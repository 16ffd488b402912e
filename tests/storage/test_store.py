"""The storage port's contract, for every engine."""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wm_core import Message, Role, TextPart, ToolResultPart, ToolUsePart, message_tokens
from wm_server.errors import AlreadyExists, NotFound
from wm_server.storage.port import LeaseLost, Store
from wm_server.storage.records import CommitState, Phase2Completion

_ids = itertools.count()


def _text(tokens: int, mid: str = "") -> Message:
    parts = (TextPart("x" * (tokens * 4)),)
    return Message(mid, Role.USER, parts, message_tokens(parts))


def _make_id() -> str:
    return f"gen-{next(_ids)}"


def _noop_event(_: object) -> bytes:
    return b"first"


async def _add(store: Store, session: str, *messages: Message, tenant: str = "t") -> None:
    await store.add_messages(
        tenant, session, messages, create_if_missing=True, request_id=None, make_id=_make_id
    )


async def test_sessions_are_scoped_by_tenant(store: Store) -> None:
    await store.create_session("a", "same", None)
    await store.create_session("b", "same", None)
    await _add(store, "same", _text(10), tenant="a")
    a = await store.get_session("a", "same")
    b = await store.get_session("b", "same")
    assert (a.message_count, b.message_count) == (1, 0)
    await store.delete_session("a", "same")
    with pytest.raises(NotFound):
        await store.get_session("a", "same")
    assert (await store.get_session("b", "same")).session_id == "same"
    with pytest.raises(AlreadyExists):
        await store.create_session("b", "same", None)


async def test_list_sessions_pages(store: Store) -> None:
    for i in range(5):
        await store.create_session("t", f"s{i}", None)
    page, key = await store.list_sessions("t", 3, None)
    assert [s.session_id for s in page] == ["s4", "s3", "s2"] and key is not None
    rest, end = await store.list_sessions("t", 3, key)
    assert [s.session_id for s in rest] == ["s1", "s0"] and end is None


async def test_batch_is_atomic_and_duplicates_are_skipped(store: Store) -> None:
    await _add(store, "s", _text(1, "a"), _text(1, "b"))
    result = await store.add_messages(
        "t", "s", [_text(1, "b"), _text(2, "c"), _text(2, "c")],
        create_if_missing=False, request_id="r", make_id=_make_id,
    )  # fmt: skip
    assert result.added_ids == ("c",) and result.duplicate_ids == ("b", "c")
    again = await store.add_messages(
        "t", "s", [_text(5)], create_if_missing=False, request_id="r", make_id=_make_id
    )
    assert again.added_ids == ("c",)  # the remembered outcome of request "r"
    assert (await store.get_session("t", "s")).message_count == 3


async def test_phase1_keeps_tool_pairs_together_and_numbers_archives(store: Store) -> None:
    use = (ToolUsePart("t1", "bash", "{}"),)
    result = (ToolResultPart("t1", "ok"),)
    await _add(
        store, "s", _text(1, "u"), Message("a", Role.ASSISTANT, use, 3),
        Message("r", Role.USER, result, 2), _text(1, "z"),
    )  # fmt: skip
    first = await store.commit_phase1("t", "s", 2, None, "c1", _noop_event)
    assert first.commit.archive_id == "archive_001"
    assert (first.commit.archived_message_count, first.commit.kept_message_count) == (1, 3)
    assert [m.id for m in await store.archive_messages("t", "s", 1)] == ["u"]
    second = await store.commit_phase1("t", "s", 0, None, "c2", _noop_event)
    assert second.commit.archive_id == "archive_002" and second.commit.archived_message_count == 3
    skipped = await store.commit_phase1("t", "s", 0, None, "c3", _noop_event)
    assert skipped.commit.state is CommitState.SKIPPED
    again = await store.commit_phase1("t", "s", 0, None, "c9", _noop_event)
    assert again.commit.commit_id == "c9"  # no request id: a new (skipped) commit
    events = await store.events_after("c1", 0)
    assert [(e.sequence, e.payload) for e in events] == [(1, b"first")]


async def test_jobs_run_in_archive_order_per_session(store: Store) -> None:
    for name in ("c1", "c2"):
        await _add(store, "s", _text(1))
        await store.commit_phase1("t", "s", 0, None, name, _noop_event)
    job = await store.claim_job(60)
    assert job is not None and job.commit_id == "c1"
    assert await store.claim_job(60) is None  # c2 waits for c1
    await store.release_job(job)
    again = await store.claim_job(60)
    assert again is not None and again.commit_id == "c1"
    data = await store.phase2_input(again)
    assert data.previous is None and data.covered_seqs == (1,)
    done = await store.complete_phase2(
        again, 0,
        Phase2Completion("# Working Memory\n", 3, "abstract", "[]", "{}", (1,)),
        lambda record, wm: [(record.last_sequence + 1, b"done", True)],
    )  # fmt: skip
    assert done is not None and done[1].version == 1
    with pytest.raises(LeaseLost):
        await store.append_events(again, [(9, b"late", False)], False)
    nxt = await store.claim_job(60)
    assert nxt is not None and nxt.commit_id == "c2"


async def test_expired_lease_is_claimed_again(store: Store) -> None:
    await _add(store, "s", _text(1))
    await store.commit_phase1("t", "s", 0, None, "c1", _noop_event)
    first = await store.claim_job(0.01)
    assert first is not None
    import asyncio

    await asyncio.sleep(0.05)
    second = await store.claim_job(60)
    assert second is not None and second.commit_id == "c1" and second.attempts == 2
    assert not await store.renew_lease(first, 60)


async def test_wm_conflict_is_detected(store: Store) -> None:
    await _add(store, "s", _text(1))
    await store.commit_phase1("t", "s", 0, None, "c1", _noop_event)
    job = await store.claim_job(60)
    assert job is not None
    applied = await store.store_working_memory("t", "s", 0, "# Working Memory\n", 3)
    assert applied is not None and applied.version == 1
    stale = await store.complete_phase2(
        job, 0, Phase2Completion("doc", 1, "a", "[]", "{}", (1,)), lambda r, w: []
    )
    assert stale is None
    assert await store.store_working_memory("t", "s", 0, "x", 1) is None


async def test_search_is_literal_and_newest_archive_first(store: Store) -> None:
    await _add(store, "s", Message("m1", Role.USER, (TextPart("cost is $5.00 (approx)"),), 5))
    await store.commit_phase1("t", "s", 0, None, "c1", _noop_event)
    await _add(store, "s", Message("m2", Role.USER, (TextPart("COST IS $5.00 (APPROX) again"),), 5))
    await store.commit_phase1("t", "s", 0, None, "c2", _noop_event)
    needle = "$5.00 (approx)"
    found, total = await store.search_archives(
        "t", "s", None, lambda m: needle in m.text().lower(), needle, 10
    )
    assert total == 2 and [(m.archive_seq, m.message.id) for m in found] == [(2, "m2"), (1, "m1")]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.lists(st.integers(0, 50), min_size=1, max_size=8)),
            st.tuples(st.just("commit"), st.integers(0, 6)),
        ),
        max_size=12,
    )
)
async def test_pending_counter_always_equals_the_rebuild(
    store: Store, steps: list[tuple[str, object]]
) -> None:
    session = f"p-{uuid.uuid4().hex[:8]}"
    await store.create_session("t", session, None)
    expected_archives = 0
    for kind, value in steps:
        if kind == "add":
            await _add(store, session, *[_text(n) for n in value])  # type: ignore[union-attr]
        else:
            result = await store.commit_phase1(
                "t",
                session,
                int(value),
                None,
                uuid.uuid4().hex,
                _noop_event,  # type: ignore[arg-type]
            )
            if result.commit.state is not CommitState.SKIPPED:
                expected_archives += 1
                assert result.commit.archive_seq == expected_archives
        counted = await store.get_session("t", session)
        pending, live = await store.rebuild_pending_tokens("t", session)
        assert (counted.pending_tokens, counted.live_tokens) == (pending, live)
        live_messages = await store.live_messages("t", session)
        assert counted.message_count == len(live_messages)
        assert live == sum(m.message.estimated_tokens for m in live_messages)
