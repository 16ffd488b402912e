"""A provider that replays prepared answers, for tests and benchmarks.

Why: the recovery chain, the guards and Phase 2 must be exercised with exactly the answers a
real model gives on a bad day (truncated JSON, text instead of a tool call, wrong types, a
rate limit) and with a controllable latency, without a network.

The file is JSON Lines (one answer per line) or JSON (a list of answers, or an object
``{"loop": true, "responses": [...]}`` to start over when the list is used up). An answer::

    {"purpose": "update",            # optional: the call must be of this purpose
     "tool_input": {...} | "raw text" | null,
     "text": "...", "stop_reason": "tool_use",
     "usage": {"input_tokens": 10, "output_tokens": 5},
     "delay": 0.2,                   # optional, seconds, on top of the provider's delay
     "error": {"message": "overloaded", "retryable": true}}   # raise LlmError instead

Answers are used in order, one per call. When they run out (and ``loop`` is off), a call fails
with a non-retryable :class:`LlmError`, so a test that scripted too few answers fails loudly.

Memory extraction calls are answered from the answers marked ``"purpose": "memory"``, in
their own order, apart from the working-memory calls: a script written before extraction
existed still lines up with its calls. With no memory answer left, a memory call gets an
empty list of ops (nothing to remember), never a failure.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wm_server.llm.port import (
    CreateRequest,
    LlmError,
    MemoryRequest,
    ModelReply,
    Purpose,
    RepairRequest,
    UpdateRequest,
    Usage,
)

ScriptedRequest = UpdateRequest | RepairRequest | CreateRequest | MemoryRequest
ScriptedCall = tuple[Purpose, ScriptedRequest]
# The answer to a memory call when none was scripted: nothing to remember.
NO_MEMORIES: dict[str, Any] = {"ops": []}


@dataclass(frozen=True, slots=True)
class ScriptedResponse:
    """One prepared answer (or failure)."""

    tool_input: dict[str, Any] | str | None = None
    text: str = ""
    stop_reason: str | None = None
    usage: Usage = field(default_factory=lambda: Usage(llm_calls=1))
    purpose: Purpose | None = None
    delay: float = 0.0
    error: str | None = None
    retryable: bool = True

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ScriptedResponse:
        """Read one answer of a script file; unknown keys are an error (typos must not pass)."""
        known = {"tool_input", "text", "stop_reason", "usage", "purpose", "delay", "error"}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown keys in scripted response: {sorted(unknown)}")
        tool_input = raw.get("tool_input")
        if tool_input is not None and not isinstance(tool_input, (dict, str)):
            raise ValueError("tool_input must be an object, a string or null")
        usage_raw = raw.get("usage") or {}
        usage = Usage(
            input_tokens=int(usage_raw.get("input_tokens", 0)),
            output_tokens=int(usage_raw.get("output_tokens", 0)),
            cache_read_input_tokens=int(usage_raw.get("cache_read_input_tokens", 0)),
            cache_creation_input_tokens=int(usage_raw.get("cache_creation_input_tokens", 0)),
            llm_calls=1,
        )
        error = raw.get("error")
        message: str | None = None
        retryable = True
        if isinstance(error, str):
            message = error
        elif isinstance(error, Mapping):
            message = str(error.get("message", "scripted failure"))
            retryable = bool(error.get("retryable", True))
        elif error is not None:
            raise ValueError("error must be a string or an object")
        purpose = raw.get("purpose")
        return cls(
            tool_input=tool_input,
            text=str(raw.get("text", "")),
            stop_reason=raw.get("stop_reason"),
            usage=usage,
            purpose=Purpose(purpose) if purpose else None,
            delay=float(raw.get("delay", 0.0)),
            error=message,
            retryable=retryable,
        )

    def reply(self, model: str) -> ModelReply:
        default_stop = "tool_use" if self.tool_input is not None else "end_turn"
        return ModelReply(
            tool_input=self.tool_input,
            stop_reason=self.stop_reason or default_stop,
            usage=self.usage,
            text=self.text,
            model=model,
        )


def load_script(path: Path) -> tuple[list[ScriptedResponse], bool]:
    """The answers of a script file and whether to loop over them."""
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    loop = False
    raw: list[Any]
    if path.suffix == ".jsonl" or not stripped.startswith(("[", "{")):
        raw = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        try:
            document = json.loads(text)
        except ValueError:  # a .json file written one answer per line
            document = [json.loads(line) for line in text.splitlines() if line.strip()]
        if isinstance(document, Mapping) and "responses" in document:
            raw = list(document["responses"])
            loop = bool(document.get("loop", False))
        elif isinstance(document, list):
            raw = document
        else:
            raw = [document]
    return [ScriptedResponse.from_dict(item) for item in raw], loop


class ScriptedProvider:
    """Replays :class:`ScriptedResponse` objects in order; records every call it receives."""

    def __init__(
        self,
        responses: Sequence[ScriptedResponse],
        *,
        delay: float = 0.0,
        loop: bool = False,
        model: str = "scripted",
    ) -> None:
        self._responses = [r for r in responses if r.purpose is not Purpose.MEMORY]
        self._memory_responses = [r for r in responses if r.purpose is Purpose.MEMORY]
        self._next_memory = 0
        self._delay = delay
        self._loop = loop
        self._model = model
        self._next = 0
        self.calls: list[ScriptedCall] = []

    @classmethod
    def from_file(cls, path: Path, *, delay: float = 0.0) -> ScriptedProvider:
        responses, loop = load_script(path)
        return cls(responses, delay=delay, loop=loop, model=f"scripted:{path.name}")

    @property
    def name(self) -> str:
        return "scripted"

    @property
    def model(self) -> str:
        return self._model

    @property
    def remaining(self) -> int:
        """Answers not used yet (without looping)."""
        return max(0, len(self._responses) - self._next)

    async def update(self, request: UpdateRequest) -> ModelReply:
        return await self._answer(Purpose.UPDATE, request)

    async def repair(self, request: RepairRequest) -> ModelReply:
        return await self._answer(Purpose.REPAIR, request)

    async def create(self, request: CreateRequest) -> ModelReply:
        return await self._answer(Purpose.CREATE, request)

    async def extract_memories(self, request: MemoryRequest) -> ModelReply:
        self.calls.append((Purpose.MEMORY, request))
        if self._next_memory >= len(self._memory_responses):
            if not self._loop or not self._memory_responses:
                unscripted = ScriptedResponse(dict(NO_MEMORIES), usage=Usage())
                return unscripted.reply(self._model)
            self._next_memory = 0
        response = self._memory_responses[self._next_memory]
        self._next_memory += 1
        return await self._deliver(response)

    async def aclose(self) -> None:
        return None

    async def _answer(self, purpose: Purpose, request: ScriptedRequest) -> ModelReply:
        self.calls.append((purpose, request))
        if self._next >= len(self._responses):
            if not self._loop or not self._responses:
                raise LlmError(
                    f"scripted provider: no response left for a {purpose.value} call",
                    retryable=False,
                )
            self._next = 0
        response = self._responses[self._next]
        self._next += 1
        if response.purpose is not None and response.purpose != purpose:
            await self._pause(response)
            raise LlmError(
                f"scripted provider: response #{self._next} is for a {response.purpose.value} "
                f"call, got a {purpose.value} call",
                retryable=False,
            )
        return await self._deliver(response)

    async def _pause(self, response: ScriptedResponse) -> None:
        wait = self._delay + response.delay
        if wait > 0:
            await asyncio.sleep(wait)

    async def _deliver(self, response: ScriptedResponse) -> ModelReply:
        await self._pause(response)
        if response.error is not None:
            raise LlmError(response.error, retryable=response.retryable)
        return response.reply(self._model)
