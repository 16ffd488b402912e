"""Phase 2 input is bounded: an archive of any size commits (issue #19, point 1).

The local Messages API refuses every prompt over ``LIMIT`` estimated tokens with the API's
own answer (HTTP 400 invalid_request_error "prompt is too long: N tokens > LIMIT maximum"),
as a model with a small context window would. The server is not told the limit: its budget
comes from the provider's context window (200,000 tokens), so the first call is refused and
Phase 2 must split the input further, never fail the commit for it.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import grpc
import pytest
from llm_backends import ANTHROPIC, Backend
from reliability_support import FRESH, LlmServer, Stub, assert_well_formed

from support import builders as b
from support import commit_flow, wm_names
from support.fake_anthropic import FakeAnthropic, RecordedRequest, Reply, error, tool_use
from wm_core import SECTIONS, estimate_tokens
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc


@pytest.fixture
def backend() -> Backend:
    """Anthropic only: the fake model below writes that API's answers and errors."""
    return ANTHROPIC


LIMIT = 60_000
MESSAGE_TOKENS = 10_000  # each message: a marker and filler
MARKER = re.compile(r"marker-(\d+)-end")
CREATION = {name: f"{name} of the bounded input test" for name in SECTIONS}
SESSION = "bounded"


class SmallWindowModel:
    """Refuses prompts over LIMIT; otherwise appends one fact per marker it was shown."""

    def __init__(self) -> None:
        self.refused = 0
        self.accepted: list[int] = []
        self.broken = False  # answer 400 to everything (a model that cannot be used)
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply:
        tokens = estimate_tokens(request.system_text) + estimate_tokens(request.user_text)
        tokens += estimate_tokens(str(request.tools))
        with self._lock:
            if self.broken:
                return error(400, message_text="tools.0: unsupported field")
            if tokens > LIMIT:
                self.refused += 1
                return error(
                    400, message_text=f"prompt is too long: {tokens} tokens > {LIMIT} maximum"
                )
            self.accepted.append(tokens)
        name = str((request.tool_choice or {}).get("name", "update_working_memory"))
        if name == "create_working_memory":
            return tool_use(CREATION, name=name)
        marks = MARKER.findall(request.user_text.split("<new_messages>")[-1])
        sections: dict[str, Any] = {s: {"op": "KEEP"} for s in SECTIONS}
        sections["Files & Context"] = {
            "op": "APPEND",
            "items": [f"`docs/marker_{m}.md`: seen" for m in marks],
        }
        return tool_use({"sections": sections})


def _big(n: int) -> pb.Message:
    filler = "lorem ipsum " * (MESSAGE_TOKENS * 4 // 12)
    return b.user(f"marker-{n}-end {filler}", f"big-{n}")


async def _add(stub: Stub, *messages: pb.Message) -> None:
    for start in range(0, len(messages), 5):  # under the 1 MiB request limit
        await stub.AddMessages(
            api.AddMessagesRequest(
                parent=wm_names.session(SESSION),
                messages=messages[start : start + 5],
                create_session_if_missing=True,
            )
        )


async def _commit(stub: Stub) -> list[pb.CommitEvent]:
    return (await commit_flow.commit(stub, SESSION, within=120))[1]


async def _start(llm_server: LlmServer, fake: FakeAnthropic) -> tuple[Any, SmallWindowModel]:
    model = SmallWindowModel()
    fake.set_default(model)
    app = await llm_server(WM_PHASE2_MAX_ATTEMPTS="1", WM_MAX_MESSAGE_BYTES=str(4 * 1024 * 1024))
    return app, model


async def test_a_300k_token_archive_commits_in_chunks(
    llm_server: LlmServer, fake: FakeAnthropic
) -> None:
    app, model = await _start(llm_server, fake)
    async with grpc.aio.insecure_channel(app.address, options=FRESH) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        await _add(stub, b.user("Start the CSV importer", "u0"))
        assert assert_well_formed(await _commit(stub)).stage == pb.COMMIT_STAGE_COMPLETED

        count = 300_000 // MESSAGE_TOKENS
        await _add(stub, *(_big(n) for n in range(count)))
        events = await _commit(stub)
        terminal = assert_well_formed(events)
        assert terminal.stage == pb.COMMIT_STAGE_COMPLETED, terminal
        assert model.refused >= 1  # the first, unsplit prompt was refused, then split
        assert all(tokens <= LIMIT for tokens in model.accepted)
        updates = sum(1 for e in events if e.stage == pb.COMMIT_STAGE_OPS_PARSED)
        assert updates >= 300_000 // LIMIT
        wm = await stub.GetWorkingMemory(
            api.GetWorkingMemoryRequest(name=wm_names.working_memory(SESSION))
        )
        assert wm.version == 2
        for n in range(count):  # every chunk went through the model, in order
            assert f"docs/marker_{n}.md" in wm.document, n


async def test_three_failed_archives_then_a_good_model_completes_them_all(
    llm_server: LlmServer, fake: FakeAnthropic
) -> None:
    app, model = await _start(llm_server, fake)
    async with grpc.aio.insecure_channel(app.address, options=FRESH) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        await _add(stub, b.user("Start the CSV importer", "u0"))
        assert assert_well_formed(await _commit(stub)).stage == pb.COMMIT_STAGE_COMPLETED

        model.broken = True
        failed: list[str] = []
        for archive in range(3):  # together far over the model's window once folded
            await _add(stub, *(_big(archive * 10 + n) for n in range(5)))
            events = await _commit(stub)
            assert assert_well_formed(events).stage == pb.COMMIT_STAGE_FAILED
            failed.append(events[0].commit)

        model.broken = False
        await _add(stub, b.user("marker-99-end and now the good model is back", "u99"))
        events = await _commit(stub)
        terminal = assert_well_formed(events)
        assert terminal.stage == pb.COMMIT_STAGE_COMPLETED, terminal
        assert all(tokens <= LIMIT for tokens in model.accepted)
        wm = await stub.GetWorkingMemory(
            api.GetWorkingMemoryRequest(name=wm_names.working_memory(SESSION))
        )
        for n in [*range(5), *range(10, 15), *range(20, 25), 99]:
            assert f"docs/marker_{n}.md" in wm.document, n
        context = await stub.AssembleContext(
            api.AssembleContextRequest(name=wm_names.session(SESSION), token_budget=100_000)
        )
        assert not context.uncovered_archives  # the failed archives are covered now


def _bloating(request: RecordedRequest) -> Reply:
    """A model that answers a 2 MB section and 3,000 items per APPEND."""
    name = str((request.tool_choice or {}).get("name", "update_working_memory"))
    if name == "create_working_memory":
        return tool_use(CREATION, name=name)
    sections: dict[str, Any] = {s: {"op": "KEEP"} for s in SECTIONS}
    sections["Current State"] = {"op": "UPDATE", "content": "Still importing. " * 125_000}
    sections["Key Facts & Decisions"] = {
        "op": "APPEND",
        "items": [
            f"Fact {n}: port {10_000 + n} chosen on 2025-01-{n % 28 + 1:02d}" for n in range(3_000)
        ],
    }
    sections["Files & Context"] = {
        "op": "APPEND",
        "items": [f"`src/generated/module_{n}.py`: generated" for n in range(3_000)],
    }
    return tool_use({"sections": sections})


async def test_a_bloating_model_leaves_the_working_memory_within_its_budget(
    llm_server: LlmServer, fake: FakeAnthropic
) -> None:
    fake.set_default(_bloating)
    app = await llm_server(WM_PHASE2_MAX_ATTEMPTS="1")
    async with grpc.aio.insecure_channel(app.address, options=FRESH) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        decisions: list[pb.GuardDecision] = []
        pending: list[int] = []
        lost: list[int] = []
        for turn in range(3):
            await _add(stub, b.user(f"turn {turn}: keep importing", f"t{turn}"))
            events = await _commit(stub)
            assert assert_well_formed(events).stage == pb.COMMIT_STAGE_COMPLETED
            decisions += [
                e.guard_decision for e in events if e.stage == pb.COMMIT_STAGE_GUARD_DECISION
            ]
            stored = [e for e in events if e.stage == pb.COMMIT_STAGE_WORKING_MEMORY_STORED]
            pending += [e.working_memory_stored.pending_items for e in stored]
            lost += [e.working_memory_stored.pending_items_dropped for e in stored]
            wm = await stub.GetWorkingMemory(
                api.GetWorkingMemoryRequest(name=wm_names.working_memory(SESSION))
            )
            assert estimate_tokens(wm.document) <= 12_000, estimate_tokens(wm.document)
            assert wm.estimated_tokens <= 12_000
            assert CREATION["Files & Context"] in wm.document  # old lines kept first
        bound = {d.section for d in decisions if d.guard == "bound" and d.refused_items}
        assert {"Current State", "Key Facts & Decisions", "Files & Context"} <= bound
        # What was refused is kept as pending items, bounded, and shown in the next update.
        # This model answers the memory extraction with nothing readable, so what leaves the
        # list at its bound (30) has nowhere to go: it stays pending up to twice the bound,
        # and past that the oldest are lost, counted on the commit.
        assert pending[:2] == [0, 30] and all(count <= 60 for count in pending)
        assert pending[2] > 30 and lost[:2] == [0, 0] and lost[2] > 0
        updates = [r for r in fake.requests if "<current_working_memory>" in r.user_text]
        assert "<pending_items>" not in updates[0].user_text
        assert "<pending_items>" in updates[1].user_text
        assert "Not yet in the working memory" in updates[1].user_text
