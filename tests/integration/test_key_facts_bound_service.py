"""Key Facts stays bounded over 200 commits of a model that never consolidates, on a real
server, and what it refuses stays reachable (issue 36, defect 3).

Every commit goes through Phase 2 with a scripted model that APPENDs one decision to Key
Facts and ignores the consolidation sentinel. The section must stop one APPEND past its
emergency size, and every decision it refused must be readable: a pending item that
GetWorkingMemory returns (shown to the model in every update prompt) and that the long-term
memory extraction of the last commit is given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support import builders as b
from support.production import settings_for
from support.providers import Answer, ProgrammableProvider, creation, ops
from wm_client import WmClient
from wm_core import bullet_items, parse_document
from wm_core._tokens.limits import EMERGENCY_BULLETS, OVERSIZED_APPEND_CAP
from wm_server.app import Application, start_application
from wm_server.llm.port import MemoryRequest

KEY_FACTS = "Key Facts & Decisions"
COMMITS = 200


def decision(i: int) -> str:
    return f"Decision {i}: keep module_{i}.py because contract {i} is stable."


@pytest.fixture
def provider() -> ProgrammableProvider:
    scripted = ProgrammableProvider()
    scripted.creates.append(Answer(creation(session_title="Ledger", key_facts_decisions="- Decision 0: keep the current WM shape.")))  # fmt: skip
    for i in range(2, COMMITS + 1):
        scripted.updates.append(
            Answer(ops(key_facts_decisions={"op": "APPEND", "items": [decision(i)]}))
        )
    return scripted


@pytest.fixture
async def app(tmp_path: Path, provider: ProgrammableProvider) -> AsyncIterator[Application]:
    application = await start_application(settings_for(tmp_path), provider=provider)
    try:
        yield application
    finally:
        await application.stop(grace=0.5)


async def test_200_commits_keep_key_facts_bounded_and_every_refused_fact_reachable(
    app: Application, provider: ProgrammableProvider
) -> None:
    async with WmClient(app.address) as wm:
        for i in range(1, COMMITS + 1):
            await wm.add_messages("kf", [b.user(f"turn {i}")], create_session_if_missing=True)
            async for event in wm.commit("kf"):
                assert not event.HasField("failed"), event
        memory = await wm.get_working_memory("kf")
    assert memory.version == COMMITS
    facts = bullet_items(parse_document(memory.document)[KEY_FACTS])
    assert len(facts) <= EMERGENCY_BULLETS + OVERSIZED_APPEND_CAP + 1
    assert sum("CONSOLIDATION REQUIRED" in fact for fact in facts) == 1
    waiting = "\n".join(item.text for item in memory.pending_items)
    held = "\n".join(facts)
    lost = [
        i for i in range(2, COMMITS + 1) if decision(i) not in held and decision(i) not in waiting
    ]
    assert lost == []
    refused_here = [i for i in range(2, COMMITS + 1) if decision(i) not in held]
    assert len(refused_here) > 100  # most were refused: the bound held
    # The long-term memory extraction of the last commit is given every pending item.
    requests = [r for kind, r in provider.calls if isinstance(r, MemoryRequest)]
    assert requests, [kind for kind, _ in provider.calls][-5:]
    given = "\n".join(item.text for item in requests[-1].pending)  # one by one already
    assert [i for i in refused_here[:-1] if decision(i) not in given] == []
