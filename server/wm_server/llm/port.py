"""The port Phase 2 uses to talk to a language model.

A provider makes one model call and hands back the raw tool arguments; deciding what they
mean (schema validation, salvage, repair, fallback to creation) is the recovery chain's job,
so that every provider, real or scripted, goes through the same checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from wm_core import MemoryRecord, Message, PendingItem


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one or more model calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    llm_calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.llm_calls + other.llm_calls,
        )


def usage_record(usage: Usage) -> dict[str, int]:
    """A Usage as the store keeps it (a commit's usage column, a memory diff's ``usage``): its
    field names as keys, so ``Usage(**record)`` reads it back. Written here, beside the
    dataclass, because the shape is the dataclass's; Phase 2 and the extraction write it,
    the API reads it."""
    return asdict(usage)


def usage_json(usage: Usage) -> str:
    """``usage_record`` as JSON text, as a commit's usage column holds it."""
    return json.dumps(usage_record(usage))


def usage_of(record: Mapping[str, int] | None) -> Usage:
    """The Usage a stored record holds (None or empty: none)."""
    return Usage(**record) if record else Usage()


class Purpose(StrEnum):
    """Which step of the recovery chain a call serves."""

    UPDATE = "update"
    REPAIR = "repair"
    CREATE = "create"
    MEMORY = "memory"  # long-term memory extraction, after the working memory is stored


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What one model call produced.

    ``tool_input`` is the forced tool call's input as the model sent it: a dict when the
    transport decoded it, a string when only raw text is available (a broken or truncated
    call), None when the model answered without a tool call. ``text`` is any plain text.
    """

    tool_input: dict[str, Any] | str | None
    stop_reason: str
    usage: Usage
    text: str = ""
    model: str = ""


@dataclass(frozen=True, slots=True)
class UpdateRequest:
    """Ask for per-section ops on an existing working memory."""

    previous_document: str
    messages: Sequence[Message]
    reminders: str = ""


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """Ask again after an unusable or cut-off update answer, showing the model what was wrong.

    ``sections`` names the sections the repair must supply (those a cut-off answer never
    reached or was cut off in); empty means the whole answer is asked for again.
    """

    update: UpdateRequest
    previous_reply: ModelReply
    errors: Sequence[str] = field(default_factory=tuple)
    sections: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class CreateRequest:
    """Ask for a whole working memory from messages (first one, legacy upgrade, fallback)."""

    messages: Sequence[Message]
    context_document: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryRequest:
    """Ask for memory ops on what an archive said: its messages, the owner's most similar
    existing memories (the only ones an op may name) and the items the working memory could
    not hold. ``archive_id`` names the archive in the prompt. ``message_dates`` (message id →
    ISO date the server stored it) is what "yesterday" in a message is resolved against."""

    messages: Sequence[Message]
    existing: Sequence[MemoryRecord] = field(default_factory=tuple)
    pending: Sequence[PendingItem] = field(default_factory=tuple)
    archive_id: str = ""
    message_dates: Mapping[str, str] = field(default_factory=dict)


class LlmError(Exception):
    """A model call failed. ``retryable`` tells Phase 2 whether trying again can help.

    ``transient`` marks an outage of the provider (no connection, a timeout, 429, 500-504,
    529): the request was fine and the same request will succeed once the provider is back,
    so Phase 2 waits it out (backoff, circuit breaker) instead of spending attempts. Only a
    provider that knows its error classes sets it; the default keeps counting attempts.
    """

    def __init__(self, message: str, *, retryable: bool = True, transient: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable or transient
        self.transient = transient


class PromptTooLong(LlmError):
    """The provider refused the request because its input exceeds the context window.

    Not retryable as it stands, but Phase 2 can split the input and try again; ``limit`` is
    the provider's input limit in tokens when the error says so.
    """

    def __init__(self, message: str, *, limit: int | None = None) -> None:
        super().__init__(message, retryable=False)
        self.limit = limit


class LlmProvider(Protocol):
    """One model behind the three calls of the recovery chain, and the extraction call."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    async def update(self, request: UpdateRequest) -> ModelReply: ...

    async def repair(self, request: RepairRequest) -> ModelReply: ...

    async def create(self, request: CreateRequest) -> ModelReply: ...

    async def extract_memories(self, request: MemoryRequest) -> ModelReply:
        """One forced ``update_memories`` call; the reply's ``tool_input`` is its raw arguments
        (read by ``wm_core.parse_memory_ops``)."""
        ...

    async def aclose(self) -> None: ...
