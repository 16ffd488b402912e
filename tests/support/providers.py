"""An in-process provider whose answers a test prepares, for driving Phase 2 step by step."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from wm_server.llm.port import (
    CreateRequest,
    LlmError,
    MemoryRequest,
    ModelReply,
    RepairRequest,
    UpdateRequest,
    Usage,
)

SECTION_NAMES = (
    "Session Title",
    "Current State",
    "Task & Goals",
    "Key Facts & Decisions",
    "Files & Context",
    "Errors & Corrections",
    "Open Issues",
)


def keep_all() -> dict[str, Any]:
    return {"sections": {name: {"op": "KEEP"} for name in SECTION_NAMES}}


def ops(**by_section: dict[str, Any]) -> dict[str, Any]:
    """Update tool input: KEEP everywhere except the sections given (keys use underscores)."""
    sections = {name: {"op": "KEEP"} for name in SECTION_NAMES}
    for key, op in by_section.items():
        sections[_name(key)] = op
    return {"sections": sections}


def creation(**bodies: str) -> dict[str, Any]:
    """Creation tool input: one string per section."""
    return {name: bodies.get(_key(name), "") for name in SECTION_NAMES}


def _key(name: str) -> str:
    return name.lower().replace(" & ", "_").replace(" ", "_")


def _name(key: str) -> str:
    for name in SECTION_NAMES:
        if _key(name) == key:
            return name
    raise KeyError(key)


@dataclass
class Answer:
    """One prepared reply: a tool input, a raw string, no tool call, or an error."""

    tool_input: dict[str, Any] | str | None = None
    stop_reason: str = "tool_use"
    error: LlmError | None = None
    delay: float = 0.0
    text: str = ""


@dataclass
class ProgrammableProvider:
    """Answers calls from per-purpose queues; when a queue is empty, ``default_*`` is used."""

    updates: deque[Answer] = field(default_factory=deque)
    creates: deque[Answer] = field(default_factory=deque)
    repairs: deque[Answer] = field(default_factory=deque)
    default_update: Answer = field(default_factory=lambda: Answer(keep_all()))
    default_create: Answer = field(
        default_factory=lambda: Answer(creation(session_title="Test session"))
    )
    default_repair: Answer | None = None
    memories: deque[Answer] = field(default_factory=deque)
    default_memories: Answer = field(default_factory=lambda: Answer({"ops": []}))
    calls: list[tuple[str, Any]] = field(default_factory=list)
    gate: asyncio.Event | None = None  # when set, every call waits for it

    @property
    def name(self) -> str:
        return "programmable"

    @property
    def model(self) -> str:
        return "test-model"

    async def _answer(self, answer: Answer) -> ModelReply:
        if self.gate is not None:
            await self.gate.wait()
        if answer.delay:
            await asyncio.sleep(answer.delay)
        if answer.error is not None:
            raise answer.error
        return ModelReply(
            tool_input=answer.tool_input,
            stop_reason=answer.stop_reason,
            usage=Usage(input_tokens=100, output_tokens=20, llm_calls=1),
            text=answer.text,
            model=self.model,
        )

    async def update(self, request: UpdateRequest) -> ModelReply:
        self.calls.append(("update", request))
        return await self._answer(self.updates.popleft() if self.updates else self.default_update)

    async def repair(self, request: RepairRequest) -> ModelReply:
        self.calls.append(("repair", request))
        answer = self.repairs.popleft() if self.repairs else self.default_repair
        return await self._answer(answer or Answer(None, stop_reason="end_turn"))

    async def create(self, request: CreateRequest) -> ModelReply:
        self.calls.append(("create", request))
        return await self._answer(self.creates.popleft() if self.creates else self.default_create)

    async def extract_memories(self, request: MemoryRequest) -> ModelReply:
        self.calls.append(("memory", request))
        return await self._answer(
            self.memories.popleft() if self.memories else self.default_memories
        )

    async def aclose(self) -> None:
        pass
