"""Pending items readable by clients (issue 19): what a guard refused is returned by
GetWorkingMemory, through the Python client, until the working memory holds it, on a real
server over SQLite and over PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support import builders as b
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for
from support.providers import Answer, ProgrammableProvider, creation, ops
from wm_client import WmClient
from wm_proto.v1 import resources_pb2 as pb
from wm_server.app import Application, start_application

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
KEY_FACTS = "Key Facts & Decisions"
# Key Facts is above its ceiling (90 % of its 1,000 tokens) after the first commit, with
# room left for the consolidation sentinel.
FULL = "\n".join(f"- Replica {n} of shard {n * 7} runs on host db-{n:02d}" for n in range(82))
REFUSED = ("Port 8443 chosen on 2025-03-01 under OPS-77", "Priya owns the runbook RB-12")


@pytest.fixture(params=ENGINES)
async def app(
    request: pytest.FixtureRequest, tmp_path: Path, provider: ProgrammableProvider
) -> AsyncIterator[Application]:
    settings: dict[str, object] = {
        "working_memory_key_facts_max_tokens": 1_000,
        "phase2_max_pending_items": 5,
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
    return ProgrammableProvider()


async def _commit(wm: WmClient, session: str, text: str) -> pb.Commit:
    await wm.add_messages(session, [b.user(text)], create_session_if_missing=True)
    async for event in wm.commit(session):
        if event.HasField("completed"):
            return event.completed
        assert not event.HasField("failed"), event
    raise AssertionError("the commit stream ended before a terminal event")


async def test_a_refused_item_is_shown_until_the_working_memory_holds_it(
    app: Application, provider: ProgrammableProvider
) -> None:
    provider.creates.append(Answer(creation(session_title="Shards", key_facts_decisions=FULL)))
    provider.updates.append(Answer(ops(key_facts_decisions={"op": "APPEND", "items": REFUSED})))
    async with WmClient(app.address) as wm:
        await _commit(wm, "p", "first")
        assert not (await wm.get_working_memory("p")).pending_items
        refusing = await _commit(wm, "p", "second")
        memory = await wm.get_working_memory("p")
        assert not any(text in memory.document for text in REFUSED)
        assert [(i.section, i.text, i.source) for i in memory.pending_items] == [
            (KEY_FACTS, text, "bound") for text in REFUSED
        ]
        assert {i.commit for i in memory.pending_items} == {refusing.name}
        assert {i.archive for i in memory.pending_items} == {"sessions/p/archives/archive_002"}
        assert memory.pending_item_limit == 5
        # An older version is not the session's present: it carries no pending items.
        older = await wm.get_working_memory("p", version=memory.version - 1)
        assert not older.pending_items and older.pending_item_limit == 0

        # Client ops that bring the first item into the document take it off the list.
        state = pb.SectionOp(
            section="Current State",
            kind=pb.SECTION_OP_KIND_UPDATE,
            content=f"Decided: {REFUSED[0]}.",
        )
        await wm.apply_working_memory_ops("p", [state])
        memory = await wm.get_working_memory("p")
        assert [i.text for i in memory.pending_items] == [REFUSED[1]]

        # So does a Phase 2 whose working memory holds the second (here in Open Issues).
        issue = {"op": "APPEND", "items": [f"Confirm: {REFUSED[1]}"]}
        provider.updates.append(Answer(ops(open_issues=issue)))
        await _commit(wm, "p", "third")
        memory = await wm.get_working_memory("p")
        assert REFUSED[1] in memory.document and not memory.pending_items
