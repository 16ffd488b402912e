"""Nothing refused is lost when the pending items are full (issue 36): a key fact refused
under pressure is later found in GetWorkingMemory's pending items or, once it leaves them at
their token bound, by SearchMemories for the session's owner, as a memory whose fields and
sources say where it came from. On a real server over SQLite and over PostgreSQL, with a
model that never consolidates and proposes no memory of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support import builders as b
from support import wm_names
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for
from support.providers import Answer, ProgrammableProvider, creation, ops
from wm_client import WmClient
from wm_proto.v1 import resources_pb2 as pb
from wm_server.app import Application, start_application

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
KEY_FACTS = "Key Facts & Decisions"
# Key Facts is above its ceiling (90 % of its 1,000 tokens) from the first commit on, so every
# later fact is refused and waits as a pending item.
FULL = "\n".join(f"- Replica {n} of shard {n * 7} runs on host db-{n:02d}" for n in range(82))
COMMITS = 8


def fact(i: int) -> str:
    return f"Port {8400 + i} opened for the ledger replica under OPS-{700 + i}"


@pytest.fixture(params=ENGINES)
async def app(
    request: pytest.FixtureRequest, tmp_path: Path, provider: ProgrammableProvider
) -> AsyncIterator[Application]:
    settings: dict[str, object] = {
        "working_memory_key_facts_max_tokens": 1_000,
        "phase2_max_pending_tokens": 60,  # about three facts: the rest must go elsewhere
    }
    if request.param == "postgresql":
        settings["database_url"] = request.getfixturevalue("postgres_url")
    application = await start_application(settings_for(tmp_path, **settings), provider=provider)
    try:
        yield application
    finally:
        await application.stop(grace=0.5)


@pytest.fixture
def provider() -> ProgrammableProvider:
    scripted = ProgrammableProvider()
    scripted.creates.append(Answer(creation(session_title="Shards", key_facts_decisions=FULL)))
    for i in range(2, COMMITS + 1):
        appended = {"op": "APPEND", "items": [fact(i)]}
        scripted.updates.append(Answer(ops(key_facts_decisions=appended)))
    return scripted


async def _commit(wm: WmClient, session: str, text: str) -> list[pb.CommitEvent]:
    await wm.add_messages(session, [b.user(text)], create_session_if_missing=True)
    events = []
    async for event in wm.commit(session):
        assert not event.HasField("failed"), event
        events.append(event)
    return events


async def test_a_refused_fact_is_pending_or_found_by_search_memories(
    app: Application, provider: ProgrammableProvider
) -> None:
    owner = wm_names.session("s")
    async with WmClient(app.address) as wm:
        for i in range(1, COMMITS + 1):
            events = await _commit(wm, "s", f"turn {i}")
            stored = [
                e.working_memory_stored for e in events if e.HasField("working_memory_stored")
            ]
            assert stored and stored[-1].pending_items_dropped == 0  # none lost
        memory = await wm.get_working_memory("s")
        pending = "\n".join(item.text for item in memory.pending_items)
        assert all(fact(i) not in memory.document for i in range(2, COMMITS + 1))  # refused
        kept = [i for i in range(2, COMMITS + 1) if fact(i) in pending]
        assert 0 < len(kept) < COMMITS - 1  # the bound held: some left the list
        for i in range(2, COMMITS + 1):
            if i in kept:
                continue
            hits = (await wm.search_memories(f"OPS-{700 + i}", owner=owner)).hits
            found = [hit.memory for hit in hits if hit.memory.text == fact(i)]
            assert found, (i, [hit.memory.text for hit in hits])
            written = found[0]
            assert written.fields["kept_from"] == "pending_items"
            assert written.fields["section"] == KEY_FACTS
            assert written.state == pb.MEMORY_STATE_ACTIVE  # no later item superseded it
            assert written.fields["refused_in_archive"] == str(i)
            assert written.type == pb.MEMORY_TYPE_DECISION
            assert [source.session for source in written.sources] == ["sessions/s"]
        # Each was written once, though later extractions were shown it no more.
        listed = await wm.list_memories(owner=owner, page_size=100)
        texts = [m.text for m in listed.memories]
        assert sorted(texts) == sorted(fact(i) for i in range(2, COMMITS + 1) if i not in kept)


async def test_a_failed_extraction_keeps_the_items_pending(
    app: Application, provider: ProgrammableProvider
) -> None:
    """With no working extraction to take them, the items stay on the list, over its bound,
    and the next extraction that works writes them."""
    provider.default_memories = Answer(None, stop_reason="end_turn", text="no tool call")
    async with WmClient(app.address) as wm:
        for i in range(1, COMMITS):
            await _commit(wm, "s", f"turn {i}")
        memory = await wm.get_working_memory("s")
        pending = "\n".join(item.text for item in memory.pending_items)
        assert [i for i in range(2, COMMITS) if fact(i) not in pending] == []
        owner = wm_names.session("s")
        assert not (await wm.list_memories(owner=owner)).memories

        provider.default_memories = Answer({"ops": []})
        await _commit(wm, "s", "the last turn")
        memory = await wm.get_working_memory("s")
        pending = "\n".join(item.text for item in memory.pending_items)
        listed = "\n".join(m.text for m in (await wm.list_memories(owner=owner)).memories)
        assert [i for i in range(2, COMMITS + 1) if fact(i) not in pending + listed] == []
        assert listed  # the list is back within its bound
