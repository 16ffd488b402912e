"""The offline provider: a deterministic, extractive summarizer that needs no network.

Why it exists: a fresh checkout with no API key must still produce a working memory worth
reading, and tests need a provider whose output is known in advance. It answers the same
calls as a model and in the same shapes (per-section ops for an update, one body per section
for a creation), so its output goes through the same schema check, guards and merge.

The rules are wm_core's (pure, no I/O): the working memory from ``wm_core.summary_update_ops``
and ``wm_core.summary_bodies`` (the offline summarizer: title, state, goals, decisions, files,
errors and open issues read from the messages), long-term memories from
``wm_core.extract_memories`` (profile facts, preferences, decisions with their reason and who
agreed, dated events and plans, named people and things, with times resolved against each
message's date), sent as the memory tool's arguments so they are read and guarded like a
model's. This module only adapts them to the provider port: the answer shapes, the usage, and
a worker thread for the CPU they take.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import wm_core
from wm_core import (
    CREATE_TOOL,
    MemoryOp,
    memory_tool_arguments,
    summary_bodies,
    summary_update_ops,
)
from wm_server.llm.port import (
    CreateRequest,
    MemoryRequest,
    ModelReply,
    RepairRequest,
    UpdateRequest,
    Usage,
)


def creation_arguments(bodies: Mapping[str, str]) -> dict[str, str]:
    """The creation tool's arguments for the given bodies (one string per section)."""
    return {key: bodies.get(key, "") for key in CREATE_TOOL["input_schema"]["properties"]}


class OfflineProvider:
    """The extractive summarizer behind the provider interface."""

    @property
    def name(self) -> str:
        return "offline"

    @property
    def model(self) -> str:
        return "extractive-v1"

    # Each answer below is worked out in a worker thread: for a large archive it is hundreds
    # of milliseconds of CPU, which on the event loop would stall every RPC of the server (a
    # Phase 1 on PostgreSQL waited 0.4 s behind another session's Phase 2).
    async def update(self, request: UpdateRequest) -> ModelReply:
        arguments = await asyncio.to_thread(
            summary_update_ops, request.previous_document, request.messages
        )
        return ModelReply(arguments, "tool_use", Usage(llm_calls=1), model=self.model)

    async def repair(self, request: RepairRequest) -> ModelReply:
        # The extractor's output is always well-formed, so a repair is simply a fresh answer.
        return await self.update(request.update)

    async def create(self, request: CreateRequest) -> ModelReply:
        bodies = await asyncio.to_thread(summary_bodies, request.messages, request.context_document)
        return ModelReply(
            creation_arguments(bodies), "tool_use", Usage(llm_calls=1), model=self.model
        )

    async def extract_memories(self, request: MemoryRequest) -> ModelReply:
        ops = await asyncio.to_thread(_extracted, request)
        return ModelReply(
            memory_tool_arguments(ops), "tool_use", Usage(llm_calls=1), model=self.model
        )

    async def aclose(self) -> None:
        return None


def _extracted(request: MemoryRequest) -> list[MemoryOp]:
    """The extractor's ops, on the worker thread, where its first call also imports its rules
    (wm_core loads them on first use: 0.3 CPU s a process, not the event loop's)."""
    return wm_core.extract_memories(
        request.messages, request.existing, request.pending, message_dates=request.message_dates
    )
