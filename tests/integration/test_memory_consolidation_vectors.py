"""Consolidation by meaning over the real API on both engines (issue 35 point 3), with the real
default embedder (wordllama, in the wheel): paraphrases the token-set measure misses are merged
by the maintenance loop, each merge a decision record naming the measure and the score;
distinct facts, facts that differ in a name, and other types stay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from support import wm_names
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for as make_settings
from support.providers import ProgrammableProvider
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.services.memory_lifecycle import token_set_similarity
from wm_server.storage.memory_lifecycle import Candidate

Stub = service_grpc.WorkingMemoryServiceStub
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
USER = wm_names.user("u1")
PARAPHRASES = [
    ("The user is allergic to peanuts.", "The user has a peanut allergy."),
    ("The user commutes by bicycle.", "The user rides a bike to work."),
]
DISTINCT = ["The user is vegetarian.", "The user lives in Lisbon.", "The user lives in Porto."]


@pytest.fixture(params=ENGINES)
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Application]:
    extra: dict[str, object] = {}
    if request.param == "postgresql":
        extra["database_url"] = request.getfixturevalue("postgres_url")
    settings = make_settings(tmp_path, heartbeat_seconds=0.5, **extra)
    assert settings.embedder == "wordllama"  # the real default embedder
    application = await start_application(settings, provider=ProgrammableProvider())
    yield application
    await application.stop(grace=0.5)


async def _create(stub: Stub, text: str, kind: int = pb.MEMORY_TYPE_PROFILE) -> pb.Memory:
    reply = await stub.CreateMemory(
        api.CreateMemoryRequest(owner=USER, memory=pb.Memory(type=kind, text=text))
    )
    return reply.memory


async def _embedded(stub: Stub) -> None:
    """Until every memory of the owner has its vector (the indexer embeds after a write)."""
    for _ in range(200):
        found = await stub.SearchMemories(api.SearchMemoriesRequest(owner=USER, query="user"))
        if found.unembedded_rows == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("memories not embedded")


def _jaccard(a: str, b: str) -> float:
    def candidate(text: str) -> Candidate:
        return Candidate(0, "", "profile", text, text, 1, 0.0)

    return token_set_similarity(candidate(a), candidate(b))


async def test_paraphrases_are_merged_by_their_vectors(app: Application) -> None:
    for first, second in PARAPHRASES:  # what the text measure alone cannot see
        assert _jaccard(first, second) < 0.8
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        kept = [await _create(stub, first) for first, _ in PARAPHRASES]
        distinct = [await _create(stub, text) for text in DISTINCT]
        twins = [await _create(stub, second) for _, second in PARAPHRASES]
        other_type = await _create(
            stub, "The user has an allergy to peanuts.", pb.MEMORY_TYPE_ENTITY
        )
        await _embedded(stub)

        assert app.maintenance is not None
        await app.maintenance.round()
        for original, twin in zip(kept, twins, strict=True):
            merged = await stub.GetMemory(api.GetMemoryRequest(name=original.name))
            assert merged.state == pb.MEMORY_STATE_ACTIVE and merged.version == 2
            assert merged.text == original.text  # the oldest text kept
            (decision,) = merged.history
            assert (
                wm_names.last_segment(twin.name) in decision.reason
                and "embedding cosine" in decision.reason
            )
            absorbed = await stub.GetMemory(api.GetMemoryRequest(name=twin.name))
            assert absorbed.state == pb.MEMORY_STATE_RETIRED
            assert absorbed.retire_reason == f"merged into {wm_names.last_segment(original.name)}"
        for memory in [*distinct, other_type]:  # Lisbon / Porto: a name differs
            found = await stub.GetMemory(api.GetMemoryRequest(name=memory.name))
            assert found.state == pb.MEMORY_STATE_ACTIVE and found.version == 1, found.text

        await app.maintenance.round()  # nothing new: no second decision
        again = await stub.GetMemory(api.GetMemoryRequest(name=kept[0].name))
        assert again.version == 2
