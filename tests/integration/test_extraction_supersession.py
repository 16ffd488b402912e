"""Extraction uses supersession (issue 35 point 3) through real commits on a real server
(SQLite file and PostgreSQL): a later conversation that changes a decision or a preference
stores the new fact as a new memory linked to the old one, which becomes SUPERSEDED with a
validity interval; search prefers the current one; the commit's diff names what it
superseded. A model provider's RETIRE-and-CREATE of one fact is stored the same way, and so
is the user's change of their name, home or taste told later in one session."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from integration.conftest import make_settings

from support import builders as b
from support import commit_flow
from support import wm_names as names
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from wm_core import MemoryOp, MemoryOpKind, MemoryType, memory_tool_arguments
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.llm.offline import OfflineProvider
from wm_server.llm.port import MemoryRequest, ModelReply, Usage

Stub = service_grpc.WorkingMemoryServiceStub
ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
USER = "users/dana"


class Answering(OfflineProvider):
    """The offline provider, whose memory answer a test can replace (a model's)."""

    def __init__(self) -> None:
        self.answer: ModelReply | None = None

    async def extract_memories(self, request: MemoryRequest) -> ModelReply:
        if self.answer is not None:
            return self.answer
        return await super().extract_memories(request)


@pytest.fixture(params=ENGINES)
def database_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return None


@pytest.fixture
def provider() -> Answering:
    return Answering()


@pytest.fixture
async def stub(
    tmp_path: Path, database_url: str | None, provider: Answering
) -> AsyncIterator[Stub]:
    settings = make_settings(tmp_path, database_url=database_url, heartbeat_seconds=0.5)
    app: Application = await start_application(settings, provider=provider)
    try:
        async with grpc.aio.insecure_channel(app.address) as channel:
            yield Stub(channel)
    finally:
        await app.stop(grace=0.5)


async def _conversation(stub: Stub, *turns: pb.Message) -> pb.MemoryDiff:
    """A new session of the user with these turns, committed; its memory diff."""
    session = f"s-{uuid.uuid4().hex[:10]}"
    await stub.CreateSession(
        api.CreateSessionRequest(session_id=session, session=pb.Session(user_id="dana"))
    )
    await stub.AddMessages(
        api.AddMessagesRequest(parent=names.session(session), messages=list(turns))
    )
    _, events = await commit_flow.commit(stub, session, 0, within=60)
    (diff,) = [
        e.memories_extracted for e in events if e.stage == pb.COMMIT_STAGE_MEMORIES_EXTRACTED
    ]
    return diff


async def _by_type(stub: Stub, state: int = pb.MEMORY_STATE_ACTIVE) -> dict[int, pb.Memory]:
    found = await stub.ListMemories(api.ListMemoriesRequest(owner=USER, state=state))
    return {m.type: m for m in found.memories}


async def test_a_changed_decision_and_preference_supersede_the_old_ones(stub: Stub) -> None:
    await _conversation(
        stub,
        b.user("We decided to use PostgreSQL for the ledger because of logical replication.", "a1"),
        b.assistant("Good, let's go with that.", "a2"),
        b.user("I prefer tabs over spaces.", "a3"),
    )
    before = await _by_type(stub)
    old_decision, old_preference = (
        before[pb.MEMORY_TYPE_DECISION],
        before[pb.MEMORY_TYPE_PREFERENCE],
    )

    diff = await _conversation(
        stub,
        b.user(
            "We switched the ledger from PostgreSQL to CockroachDB because it scales writes.", "b1"
        ),
        b.assistant("Understood.", "b2"),
        b.user("I now prefer spaces over tabs.", "b3"),
    )
    current = await _by_type(stub)
    decision, preference = current[pb.MEMORY_TYPE_DECISION], current[pb.MEMORY_TYPE_PREFERENCE]
    assert (
        "CockroachDB" in decision.text
        and preference.text == "The user now prefers spaces over tabs."
    )
    assert sorted(diff.superseded_memories) == sorted([old_decision.name, old_preference.name])
    assert {decision.name, preference.name} <= set(diff.created_memories)
    for new, old in ((decision, old_decision), (preference, old_preference)):
        assert list(new.supersedes) == [old.name]
        then = await stub.GetMemory(api.GetMemoryRequest(name=old.name))
        assert then.state == pb.MEMORY_STATE_SUPERSEDED
        assert then.superseded_by == new.name
        assert then.text == old.text and then.version == 1  # kept as it was, not rewritten
        assert then.HasField("valid_until") and then.valid_until.seconds >= then.valid_from.seconds
    superseded = await _by_type(stub, pb.MEMORY_STATE_SUPERSEDED)
    assert {m.name for m in superseded.values()} == {
        old_decision.name, old_preference.name,
    }  # fmt: skip

    hits = await stub.SearchMemories(
        api.SearchMemoriesRequest(owner=USER, query="which database does the ledger use")
    )
    assert [h.memory.name for h in hits.hits][:1] == [decision.name]
    assert old_decision.name not in [h.memory.name for h in hits.hits]
    history = await stub.SearchMemories(
        api.SearchMemoriesRequest(
            owner=USER, query="PostgreSQL ledger replication", include_superseded=True
        )
    )
    ranked = [h.memory.name for h in history.hits]
    assert ranked.index(decision.name) < ranked.index(old_decision.name)

    # Saying the current thing again changes nothing.
    again = await _conversation(stub, b.user("I now prefer spaces over tabs.", "c1"))
    assert list(again.superseded_memories) == [] and list(again.created_memories) == []


async def test_a_models_retire_and_create_of_one_fact_is_a_supersession(
    stub: Stub, provider: Answering
) -> None:
    await _conversation(stub, b.user("My name is Dana Whitfield.", "a1"))
    old = (await _by_type(stub))[pb.MEMORY_TYPE_PROFILE]
    provider.answer = ModelReply(
        memory_tool_arguments(
            [
                MemoryOp(
                    MemoryOpKind.RETIRE, target_ids=(names.last_segment(old.name),),
                    reason="the user said their name is now Dana Brooks",
                    source_message_ids=("b1",),
                ),
                MemoryOp(
                    MemoryOpKind.CREATE, type=MemoryType.PROFILE,
                    text="The user's name is Dana Brooks.", fields={"name": "Dana Brooks"},
                    source_message_ids=("b1",),
                ),
            ]
        ),
        "tool_use",
        Usage(llm_calls=1),
    )  # fmt: skip
    diff = await _conversation(stub, b.user("I married: my name is now Dana Brooks.", "b1"))
    assert list(diff.superseded_memories) == [old.name]
    assert list(diff.retired_memories) == []  # superseded, not retired
    new = (await _by_type(stub))[pb.MEMORY_TYPE_PROFILE]
    assert new.text == "The user's name is Dana Brooks."
    assert list(new.supersedes) == [old.name]
    then = await stub.GetMemory(api.GetMemoryRequest(name=old.name))
    assert then.state == pb.MEMORY_STATE_SUPERSEDED and then.superseded_by == new.name


async def _commit(stub: Stub, session: str, *turns: pb.Message) -> pb.MemoryDiff:
    """These turns added to ``session`` and committed; the commit's memory diff."""
    await stub.AddMessages(
        api.AddMessagesRequest(parent=names.session(session), messages=list(turns))
    )
    _, events = await commit_flow.commit(stub, session, 0, within=60)
    (diff,) = [
        e.memories_extracted for e in events if e.stage == pb.COMMIT_STAGE_MEMORIES_EXTRACTED
    ]
    return diff


async def test_the_user_changing_their_name_home_and_taste_supersedes_the_old_facts(
    stub: Stub,
) -> None:
    await stub.CreateSession(
        api.CreateSessionRequest(session_id="s-life", session=pb.Session(user_id="dana"))
    )
    await _commit(
        stub, "s-life",
        b.user("My name is Dana Whitfield. I live in Berlin.", "a1"),
        b.assistant("Nice to meet you, Dana.", "a2"),
        b.user("I prefer tabs over spaces.", "a3"),
    )  # fmt: skip
    before = {
        m.text: m for m in (await stub.ListMemories(api.ListMemoriesRequest(owner=USER))).memories
    }
    old_name = before["The user's name is Dana Whitfield."]
    old_home = before["The user lives in Berlin."]
    old_taste = before["The user prefers tabs over spaces."]

    diff = await _commit(
        stub, "s-life",
        b.user("Some news: I got married, so my name is now Dana Brooks.", "b1"),
        b.assistant("Congratulations, Dana!", "b2"),
        b.user("I've moved to Lisbon. And I don't prefer tabs any more, I now prefer 4-space indents.", "b3"),
    )  # fmt: skip
    assert sorted(diff.superseded_memories) == sorted(
        [old_name.name, old_home.name, old_taste.name]
    )
    assert list(diff.retired_memories) == []
    current = {
        m.text: m for m in (await stub.ListMemories(api.ListMemoriesRequest(owner=USER))).memories
    }
    replaced = {
        "The user's name is Dana Brooks.": old_name,
        "The user has moved to Lisbon.": old_home,
        "The user now prefers 4-space indents.": old_taste,
    }
    assert set(current) == set(replaced)  # only the current facts are active
    for text, old in replaced.items():
        new = current[text]
        assert new.name in diff.created_memories
        assert list(new.supersedes) == [old.name]
        then = await stub.GetMemory(api.GetMemoryRequest(name=old.name))
        assert then.state == pb.MEMORY_STATE_SUPERSEDED, text
        assert then.superseded_by == new.name
        assert then.text == old.text and then.version == old.version  # kept as it was
        assert then.HasField("valid_until") and then.valid_until.seconds >= then.valid_from.seconds
        assert then.valid_until.seconds <= new.valid_from.seconds + 1

    name = current["The user's name is Dana Brooks."]
    hits = await stub.SearchMemories(
        api.SearchMemoriesRequest(owner=USER, query="what is the user's name")
    )
    found = [h.memory.name for h in hits.hits]
    assert found[:1] == [name.name] and old_name.name not in found
    history = await stub.SearchMemories(
        api.SearchMemoriesRequest(
            owner=USER, query="what is the user's name", include_superseded=True
        )
    )
    ranked = [h.memory.name for h in history.hits]
    assert ranked.index(name.name) < ranked.index(old_name.name)


async def test_the_extraction_preview_shows_what_each_new_fact_would_supersede(
    stub: Stub,
) -> None:
    await _conversation(
        stub,
        b.user("My name is Dana Whitfield. I live in Berlin.", "a1"),
        b.user("I prefer tabs over spaces.", "a2"),
    )
    before = await stub.ListMemories(api.ListMemoriesRequest(owner=USER))
    old = {m.text: m for m in before.memories}
    await stub.CreateSession(
        api.CreateSessionRequest(session_id="s-next", session=pb.Session(user_id="dana"))
    )
    preview = await stub.PreviewMemoryExtraction(
        api.PreviewMemoryExtractionRequest(
            name="sessions/s-next",
            messages=[
                b.user("My name is now Dana Brooks.", "b1"),
                b.user("I've moved to Lisbon. My sister Laura lives in Toronto.", "b2"),
            ],
        )
    )
    shown = {
        op.text: [(m.memory, m.text) for m in op.supersedes]
        for op in preview.ops
        if op.kind == pb.MEMORY_OP_KIND_CREATE
    }
    name, home = old["The user's name is Dana Whitfield."], old["The user lives in Berlin."]
    assert shown["The user's name is Dana Brooks."] == [(name.name, name.text)]
    assert shown["The user has moved to Lisbon."] == [(home.name, home.text)]
    assert [t for t, found in shown.items() if not found] == [
        "The user's sister Laura lives in Toronto."
    ]  # a fact about someone else supersedes nothing
    retire = [op for op in preview.ops if op.kind == pb.MEMORY_OP_KIND_RETIRE]
    # The offline extractor retires each old fact too (a changed name): that RETIRE is not
    # applied on its own (the memory is superseded) and supersedes nothing itself.
    assert sorted(op.target_memories[0] for op in retire) == sorted([name.name, home.name])
    assert [list(op.supersedes) for op in retire] == [[], []]

    # A dry run: nothing superseded, nothing written.
    after = await stub.ListMemories(api.ListMemoriesRequest(owner=USER))
    assert [(m.name, m.state, m.version) for m in after.memories] == [
        (m.name, m.state, m.version) for m in before.memories
    ]
