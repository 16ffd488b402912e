"""The three strategies every behavior is run under, each producing a per-commit trace.

- ``guarded``: the product. A real server in-process (SQLite in a temp dir) with the behavior
  as its model provider, driven over gRPC: AddMessages, Commit (stream read to the terminal
  event), GetWorkingMemory, once per turn. The recovery chain, the guards and the merge are
  the ones in production.
- ``naive``: the same behavior's answers, read with the same tolerant argument parser, then
  applied without any guard (UPDATE replaces, APPEND adds bullets, KEEP keeps) and with no
  repair or fallback call: an answer in which no section can be read leaves the document as it
  was, and that turn's news is gone.
- ``rewrite``: the model rewrites the whole document each commit (a creation-style answer
  from its own view, with the behavior's distortions and breakage) and it is stored as is,
  as the reference does with creation output.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import grpc

from bench.fidelity.behaviors import Behavior, apply_naively
from bench.fidelity.scenario import SCENARIO, Scenario, Turn, core_messages
from wm_core import (
    Message,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    estimate_tokens,
    parse_document,
    parse_tool_arguments,
    render_document,
)
from wm_core import section_reminders as reminders_for
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import start_application
from wm_server.config import LlmProviderName, Settings
from wm_server.llm.port import CreateRequest, UpdateRequest

GUARDED: Final = "guarded"
NAIVE: Final = "naive"
REWRITE: Final = "rewrite"
STRATEGIES: Final = (GUARDED, NAIVE, REWRITE)
STRATEGY_LABELS: Final = {
    GUARDED: "this service (guards on)",
    NAIVE: "ops without guards",
    REWRITE: "full rewrite each commit",
}
COMMIT_TIMEOUT: Final = 60.0


@dataclass(frozen=True, slots=True)
class GuardNote:
    """One guard decision, as the commit reported it."""

    commit: int
    section: str
    guard: str
    reason: str
    refused: int = 0


@dataclass(slots=True)
class CommitRecord:
    """The working memory after one commit, and what it took to get there."""

    index: int
    document: str
    tokens: int
    state: str = "completed"
    interventions: int = 0
    llm_calls: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # what the recovery chain reported (guarded only)
    # The session's pending items after the commit, as GetWorkingMemory returns them
    # (guarded only: refused items the server keeps for the next update).
    pending: tuple[str, ...] = ()
    # The texts of the session owner's active long-term memories after the commit, as
    # ListMemories returns them (guarded only): where refused items go when they leave the
    # pending items' bound, written by the commit's memory extraction.
    memories: tuple[str, ...] = ()


@dataclass(slots=True)
class Trace:
    """One behavior under one strategy, commit by commit."""

    behavior: str
    strategy: str
    scenario: Scenario
    commits: list[CommitRecord] = field(default_factory=list)
    notes: list[GuardNote] = field(default_factory=list)

    @property
    def final(self) -> CommitRecord:
        return self.commits[-1]

    def guard_counts(self) -> Counter[str]:
        return Counter(note.guard for note in self.notes)

    def call_counts(self) -> Counter[str]:
        return Counter(call for c in self.commits for call in c.llm_calls)


# -- guarded: the real service -------------------------------------------------------------


def _part(part: TextPart | ToolUsePart | ToolResultPart) -> pb.Part:
    if isinstance(part, TextPart):
        return pb.Part(text=part.text)
    if isinstance(part, ToolUsePart):
        return pb.Part(tool_use=pb.ToolUse(id=part.id, name=part.name, input_json=part.input_json))
    return pb.Part(
        tool_result=pb.ToolResult(
            tool_use_id=part.tool_use_id, content=part.content, is_error=part.is_error
        )
    )


_ROLES: Final = {
    Role.USER: pb.ROLE_USER,
    Role.ASSISTANT: pb.ROLE_ASSISTANT,
    Role.SYSTEM: pb.ROLE_SYSTEM,
    Role.TOOL: pb.ROLE_TOOL,
}


def to_proto(message: Message) -> pb.Message:
    return pb.Message(
        id=message.id, role=_ROLES[message.role], parts=[_part(p) for p in message.parts]
    )


def _settings(data_dir: Path) -> Settings:
    return Settings(
        address="127.0.0.1:0",
        data_dir=data_dir,
        llm_provider=LlmProviderName.OFFLINE,  # never used: the behavior is the provider
        phase2_retry_base_delay=0.01,
        heartbeat_seconds=5.0,
        shutdown_grace_seconds=0.5,
        reflection=False,
    )


async def _commit(
    stub: service_grpc.WorkingMemoryServiceStub, session: str, index: int
) -> list[pb.CommitEvent]:
    started = await stub.CreateCommit(
        api.CreateCommitRequest(
            parent=f"sessions/{session}", keep_recent_count=0, request_id=f"commit-{index}"
        ),
        timeout=COMMIT_TIMEOUT,
    )
    call = stub.WatchCommit(api.WatchCommitRequest(name=started.name), timeout=COMMIT_TIMEOUT)
    events: list[pb.CommitEvent] = []
    async for event in call:
        if event.stage == pb.COMMIT_STAGE_HEARTBEAT:
            continue
        events.append(event)
        if event.terminal:
            break
    return events


async def run_guarded(behavior: Behavior, scenario: Scenario) -> Trace:
    """Drive a real server whose model is ``behavior``, one commit per turn."""
    trace = Trace(behavior.key, GUARDED, scenario)
    session = f"fidelity-{behavior.key}"
    with tempfile.TemporaryDirectory(prefix="wm-fidelity-") as tmp:
        app = await start_application(_settings(Path(tmp)), provider=behavior)
        try:
            async with grpc.aio.insecure_channel(app.address) as channel:
                stub = service_grpc.WorkingMemoryServiceStub(channel)
                for turn in scenario.turns:
                    trace.commits.append(await _guarded_turn(stub, session, turn, scenario, trace))
        finally:
            await app.stop(grace=0.5)
    return trace


async def _guarded_turn(
    stub: service_grpc.WorkingMemoryServiceStub,
    session: str,
    turn: Turn,
    scenario: Scenario,
    trace: Trace,
) -> CommitRecord:
    messages = [to_proto(m) for m in core_messages(turn, scenario)]
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=f"sessions/{session}",
            messages=messages,
            create_session_if_missing=True,
            request_id=f"add-{turn.index}",
        )
    )
    events = await _commit(stub, session, turn.index)
    terminal = events[-1]
    commit = terminal.completed if terminal.HasField("completed") else terminal.failed
    for decision in commit.decisions:
        trace.notes.append(
            GuardNote(
                turn.index,
                decision.section,
                decision.guard,
                decision.reason,
                len(decision.refused_items),
            )
        )
    calls = tuple(
        e.llm_request_sent.purpose for e in events if e.stage == pb.COMMIT_STAGE_LLM_REQUEST_SENT
    )
    problems = tuple(
        problem
        for e in events
        if e.stage == pb.COMMIT_STAGE_OPS_PARSED
        for problem in e.ops_parsed.problems
    )
    wm = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name=f"sessions/{session}/workingMemories/latest")
    )
    memories = await _memories(stub, session)
    state = "completed" if terminal.HasField("completed") else "failed"
    return CommitRecord(
        turn.index,
        wm.document,
        estimate_tokens(wm.document),
        state,
        len(commit.decisions),
        calls,
        problems,
        tuple(item.text for item in wm.pending_items),
        memories,
    )


async def _memories(stub: service_grpc.WorkingMemoryServiceStub, session: str) -> tuple[str, ...]:
    """The texts of every active memory of the session's owner, page by page."""
    texts: list[str] = []
    token = ""
    while True:
        page = await stub.ListMemories(
            api.ListMemoriesRequest(owner=f"sessions/{session}", page_size=1000, page_token=token)
        )
        texts.extend(memory.text for memory in page.memories)
        token = page.next_page_token
        if not token:
            return tuple(texts)


# -- naive: the same ops, no guards --------------------------------------------------------


async def run_naive(behavior: Behavior, scenario: Scenario) -> Trace:
    """The behavior's answers applied as written (see the module docstring)."""
    trace = Trace(behavior.key, NAIVE, scenario)
    document = ""
    for turn in scenario.turns:
        messages = core_messages(turn, scenario)
        state = "completed"
        if not document:
            reply = await behavior.create(CreateRequest(messages=tuple(messages)))
            bodies = reply.tool_input if isinstance(reply.tool_input, dict) else {}
            document = render_document({k: str(v) for k, v in bodies.items()})
            calls: tuple[str, ...] = ("create",)
        else:
            request = UpdateRequest(document, tuple(messages), reminders_for(document))
            reply = await behavior.update(request)
            source: object = reply.tool_input if reply.tool_input is not None else reply.text
            parsed = parse_tool_arguments(source)
            if parsed.found:
                document = render_document(apply_naively(parse_document(document), parsed.ops))
            else:
                state = "unusable answer, document unchanged"
            calls = ("update",)
        trace.commits.append(
            CommitRecord(turn.index, document, estimate_tokens(document), state, 0, calls)
        )
    return trace


# -- rewrite: the whole document, stored as is ---------------------------------------------


async def run_rewrite(behavior: Behavior, scenario: Scenario) -> Trace:
    """A creation-style rewrite each commit, stored verbatim."""
    trace = Trace(behavior.key, REWRITE, scenario)
    document = ""
    for turn in scenario.turns:
        document = behavior.rewrite_text(document, core_messages(turn, scenario))
        trace.commits.append(
            CommitRecord(turn.index, document, estimate_tokens(document), llm_calls=("create",))
        )
    return trace


RUNNERS: Final = {GUARDED: run_guarded, NAIVE: run_naive, REWRITE: run_rewrite}


def session_of(cls: type[Behavior], scenario: Scenario) -> Scenario:
    """The session ``cls`` is replayed on when the run asks for ``scenario``."""
    if cls.session is SCENARIO or len(scenario.turns) < len(SCENARIO.turns):
        return cls.session.upto(len(scenario.turns))
    return cls.session


async def run_all(
    behaviors: list[type[Behavior]], scenario: Scenario, strategies: tuple[str, ...] = STRATEGIES
) -> list[Trace]:
    """Every behavior under every strategy; a fresh behavior object for each run, on
    ``scenario`` or, for a behavior with a longer session of its own, on as many commits of
    that one (all of them when ``scenario`` is the whole week).

    The guarded runs each start their own server, so they run concurrently; the baselines are
    plain computation.
    """
    jobs = [
        RUNNERS[strategy](cls(played), played)
        for cls in behaviors
        for played in (session_of(cls, scenario),)
        for strategy in strategies
    ]
    return list(await asyncio.gather(*jobs))


def dump(traces: list[Trace], path: Path) -> None:
    """The raw traces as JSON, for digging into a result (not committed)."""
    data = [
        {
            "behavior": t.behavior,
            "strategy": t.strategy,
            "commits": [
                {
                    "index": c.index,
                    "state": c.state,
                    "tokens": c.tokens,
                    "interventions": c.interventions,
                    "llm_calls": list(c.llm_calls),
                    "problems": list(c.problems),
                    "pending": list(c.pending),
                    "memories": list(c.memories),
                    "document": c.document,
                }
                for c in t.commits
            ],
            "guard_decisions": [
                {
                    "commit": n.commit,
                    "section": n.section,
                    "guard": n.guard,
                    "reason": n.reason,
                    "refused": n.refused,
                }
                for n in t.notes
            ],
        }
        for t in traces
    ]
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
