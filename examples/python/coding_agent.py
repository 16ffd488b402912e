"""A coding agent whose memory is the Working Memory Service: the loop a runtime runs.

What it shows, in the order a runtime does it:

* before each model call, ``ContextEngine.assemble``: the working memory summary, the archives
  not yet folded into it and the live messages, within the token budget; the runtime appends
  the turn it is in the middle of (its tool calls and results are stored when the turn ends);
* the recall tools (GetToolDefinitions) registered with the model, and when the model calls
  one, ``ToolExecutor.run`` answers it from the service (archive search and expand);
* after each turn, ``ContextEngine.after_turn`` with the whole turn in one batch: a commit
  starts in the background once the pending tokens reach the threshold;
* at the end, ``ContextEngine.compact``: everything is archived and summarised.

When the service is unreachable the agent carries on with its own history (the engine's
fallback) and the turns are stored once the service answers again.

The model is the real ``anthropic`` SDK: ``ANTHROPIC_API_KEY`` (and ``ANTHROPIC_BASE_URL`` for
a proxy or a local stand-in) as the SDK reads them. The workspace is a folder whose files the
model may read with a ``read_file`` tool. Run::

    WM_ADDRESS=127.0.0.1:50051 python examples/python/coding_agent.py \\
        --workspace . "Why does test_parse fail?" "Fix it"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic

from wm_client import (
    AfterTurnResult,
    AlreadyExistsError,
    CompactResult,
    ContextEngine,
    ToolExecutor,
    WmClient,
)
from wm_client.engine import UNREACHABLE
from wm_client.jsonl import message_from_dict
from wm_client.tools import ARCHIVE_EXPAND, ARCHIVE_SEARCH
from wm_proto.v1 import working_memory_service_pb2 as api

SYSTEM_PROMPT = "You are a careful coding agent. Read files before you change them."
DEFAULT_MODEL = "claude-sonnet-4-5"
MAX_STEPS = 12  # model calls in one turn before the agent gives up on it
READ_FILE_TOOL: dict[str, Any] = {
    "name": "read_file",
    "description": "Read a file of the workspace (a path relative to it).",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}

Block = dict[str, Any]
AnthropicMessage = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool the model called in the loop and what it got back."""

    name: str
    tool_input: Mapping[str, Any]
    content: str
    is_error: bool


@dataclass(slots=True)
class AgentReport:
    """What the loop did: for a person reading the output, and for the tests."""

    session_id: str
    answers: list[str] = field(default_factory=list)
    model_calls: int = 0
    fallback_calls: int = 0
    tool_calls: list[ToolCall] = field(default_factory=list)
    turns: list[AfterTurnResult] = field(default_factory=list)
    compact: CompactResult | None = None


class Workspace:
    """The files the model may read: a folder, never a path outside it."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def read(self, tool_input: Mapping[str, Any]) -> tuple[str, bool]:
        raw = tool_input.get("path")
        if not isinstance(raw, str) or not raw:
            return "read_file needs a path", True
        path = (self.root / raw).resolve()
        if not path.is_relative_to(self.root) or not path.is_file():
            return f"no file {raw!r} in the workspace", True
        return path.read_text(encoding="utf-8", errors="replace"), False


def _blocks(response: anthropic.types.Message) -> list[Block]:
    """The assistant's content as plain Messages API blocks (what is sent back and stored)."""
    blocks: list[Block] = []
    for block in response.content:
        if block.type == "text":
            blocks.append({"type": "text", "text": block.text})
        elif block.type == "tool_use":
            blocks.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
            )
    return blocks


class CodingAgent:
    """The loop. ``token_budget`` bounds every assembled context and sets the commit
    threshold (``commit_ratio`` of it)."""

    def __init__(
        self,
        wm: WmClient,
        model: anthropic.AsyncAnthropic,
        workspace: Workspace,
        session_id: str,
        *,
        model_name: str = DEFAULT_MODEL,
        token_budget: int = 8000,
        commit_ratio: float = 0.5,
        keep_recent_turns: int = 1,
        wait_for_commits: bool = False,
    ) -> None:
        self.engine = ContextEngine(wm)
        self.tools = ToolExecutor(wm, session_id, tools=(ARCHIVE_SEARCH, ARCHIVE_EXPAND))
        self.wm = wm
        self.model = model
        self.workspace = workspace
        self.session_id = session_id
        self.model_name = model_name
        self.token_budget = token_budget
        self.commit_ratio = commit_ratio
        self.keep_recent_turns = keep_recent_turns
        # A runtime goes on while a commit runs; a demo or a test that wants each turn to
        # see the previous commit's summary waits for it.
        self.wait_for_commits = wait_for_commits
        self.history: list[AnthropicMessage] = []  # the runtime's own record of the session
        self.report = AgentReport(session_id)
        self._tool_definitions: list[dict[str, Any]] | None = None

    async def tool_definitions(self) -> list[dict[str, Any]]:
        """The recall tools as the service defines them, plus the workspace's read_file
        (alone while the service cannot be reached: asked again on the next call)."""
        if self._tool_definitions is None:
            try:
                served = await self.wm.get_tool_definitions(api.TOOL_FORMAT_ANTHROPIC_MESSAGES)
            except UNREACHABLE:
                return [READ_FILE_TOOL]
            recall = [
                json.loads(t.rendered_json) for t in served.tools if t.name in self.tools.names
            ]
            self._tool_definitions = [*recall, READ_FILE_TOOL]
        return self._tool_definitions

    async def _context(
        self, turn: Sequence[AnthropicMessage]
    ) -> tuple[str, list[AnthropicMessage]]:
        """The system prompt and the messages of the next model call."""
        context = await self.engine.assemble(
            self.session_id,
            self.token_budget,
            system_prompt=SYSTEM_PROMPT,
            context_format=api.CONTEXT_FORMAT_ANTHROPIC_MESSAGES,
            registered_tools=self.tools.names,
        )
        if context.fallback:
            self.report.fallback_calls += 1
            return SYSTEM_PROMPT, [*self.history, *turn]
        earlier: list[AnthropicMessage] = json.loads(context.rendered_json or "[]")
        system = "\n\n".join(p for p in (SYSTEM_PROMPT, context.system_prompt_addition) if p)
        return system, [*earlier, *turn]

    async def _run_tool(self, block: Block) -> Block:
        name, tool_input = block["name"], block.get("input") or {}
        if name in self.tools.names:
            try:
                run = await self.tools.run(name, tool_input)
                content, is_error = run.content, run.is_error
            except UNREACHABLE:
                content, is_error = f"{name}: the memory service is unreachable now", True
        elif name == READ_FILE_TOOL["name"]:
            content, is_error = self.workspace.read(tool_input)
        else:
            content, is_error = f"unknown tool {name!r}", True
        self.report.tool_calls.append(ToolCall(name, tool_input, content, is_error))
        return {
            "type": "tool_result",
            "tool_use_id": block["id"],
            "content": content,
            "is_error": is_error,
        }

    async def turn(self, user_text: str) -> str:
        """One user request to its final answer: model calls and tool calls, then after_turn."""
        turn: list[AnthropicMessage] = [{"role": "user", "content": user_text}]
        answer = ""
        for _ in range(MAX_STEPS):
            system, messages = await self._context(turn)
            response = await self.model.messages.create(
                model=self.model_name,
                max_tokens=2048,
                system=system,
                messages=messages,  # type: ignore[arg-type]
                tools=await self.tool_definitions(),  # type: ignore[arg-type]
            )
            self.report.model_calls += 1
            blocks = _blocks(response)
            turn.append({"role": "assistant", "content": blocks})
            calls = [b for b in blocks if b["type"] == "tool_use"]
            if response.stop_reason != "tool_use" or not calls:
                answer = "\n".join(b["text"] for b in blocks if b["type"] == "text")
                break
            turn.append({"role": "user", "content": [await self._run_tool(b) for b in calls]})
        await self._store(turn)
        self.report.answers.append(answer)
        return answer

    async def _store(self, turn: list[AnthropicMessage]) -> None:
        self.history.extend(turn)
        result = await self.engine.after_turn(
            self.session_id,
            [message_from_dict(m) for m in turn],
            self.token_budget,
            commit_ratio=self.commit_ratio,
            keep_recent_turns=self.keep_recent_turns,
        )
        self.report.turns.append(result)
        if self.wait_for_commits and result.commit is not None:
            await result.commit.wait()

    async def open_session(self) -> None:
        """Create the session (or go on with it). A service that cannot be reached now is no
        reason to stop: after_turn creates the session once it answers."""
        with contextlib.suppress(AlreadyExistsError, *UNREACHABLE):
            await self.wm.create_session(self.session_id)

    async def run(self, requests: Sequence[str]) -> AgentReport:
        """Every request in turn, then a compaction of the whole session."""
        await self.open_session()
        for text in requests:
            await self.turn(text)
        await self.engine.wait_idle()
        self.report.compact = await self.engine.compact(self.session_id)
        await self.engine.aclose()
        return self.report


async def _main(args: argparse.Namespace) -> int:
    async with WmClient(args.address) as wm:
        agent = CodingAgent(
            wm,
            anthropic.AsyncAnthropic(),
            Workspace(Path(args.workspace)),
            args.session,
            model_name=args.model,
            token_budget=args.budget,
        )
        report = await agent.run(args.requests)
    for answer in report.answers:
        print(answer)
    compact = report.compact
    print(
        f"\n{report.model_calls} model call(s), {len(report.tool_calls)} tool call(s), "
        f"{report.fallback_calls} without the service; compact: "
        f"{compact.outcome.value if compact else 'not run'}",
        file=sys.stderr,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requests", nargs="+", help="the user's requests, one turn each")
    parser.add_argument("--address", default=None, help="the service (default: WM_ADDRESS)")
    parser.add_argument("--session", default="coding-agent", help="the session id")
    parser.add_argument("--workspace", default=".", help="the folder read_file reads")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--budget", type=int, default=8000, help="context token budget")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
