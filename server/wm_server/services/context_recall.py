"""The long-term memories AssembleContext recalls into a context: the options a request may
set, the newest request they are ranked against, and the Markdown block they enter as.

The search itself is ``MemoryService.recall`` (ranked by ``services.recall``); this module
holds what turns its rows into the part of the context a budget reports on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wm_core import (
    RECALLED_MEMORIES,
    Message,
    PartUsage,
    Role,
    TextPart,
    estimate_tokens,
    is_request,
)
from wm_server import contract
from wm_server.errors import invalid
from wm_server.services.memory_content import epoch_to_iso
from wm_server.services.recall import Semantic
from wm_server.storage.records import MemoryRow

DEFAULT_RECALL_TOKENS = 1000
MAX_RECALL_TOKENS = contract.MAX_RECALL_TOKENS
MIN_RECALL_TOKENS = 50
DEFAULT_RECALLED = 8
MAX_RECALLED = contract.MAX_RECALLED
RECALL_HEADING = "## Relevant memories (long-term, from earlier sessions; newer messages win)"


@dataclass(frozen=True, slots=True)
class Recall:
    """AssembleContext's recall of memories (validated by ``recall_options``)."""

    token_budget: int = DEFAULT_RECALL_TOKENS
    max_memories: int = DEFAULT_RECALLED


def recall_options(enabled: bool, token_budget: int, max_memories: int) -> Recall | None:
    """The recall a request asked for (None: none), within the limits; zero means default."""
    if not enabled:
        return None
    tokens = token_budget or DEFAULT_RECALL_TOKENS
    if not MIN_RECALL_TOKENS <= tokens <= MAX_RECALL_TOKENS:
        raise invalid(
            "memory_recall.token_budget",
            f"must be {MIN_RECALL_TOKENS}-{MAX_RECALL_TOKENS:,}",
            "OUT_OF_RANGE",
        )
    if max_memories < 0:
        raise invalid("memory_recall.max_memories", "must not be negative", "OUT_OF_RANGE")
    return Recall(tokens, min(max_memories or DEFAULT_RECALLED, MAX_RECALLED))


@dataclass(frozen=True, slots=True)
class RecallBlock:
    """The recalled memories as they enter the context, and what the recall found."""

    text: str = ""
    ids: tuple[str, ...] = ()
    needed_tokens: int = 0  # the block of every memory found
    found: int = 0
    semantic: Semantic | None = None  # how the memories were ranked (None: no recall ran)

    def usage(self) -> PartUsage:
        kept = estimate_tokens(self.text) if self.text else 0
        return PartUsage(RECALLED_MEMORIES, self.needed_tokens, kept, self.found - len(self.ids))


def recall_block(
    rows: Sequence[MemoryRow], budget: int, semantic: Semantic | None = None
) -> RecallBlock:
    """The memories as a Markdown block within ``budget`` tokens, best first (none fit: an
    empty block; the first that does not fit ends the block, so it stays a best-first
    prefix), with the tokens the block of all of them would take."""
    lines = [RECALL_HEADING]
    ids: list[str] = []
    fitted = ""
    fitting = True
    for row in rows:
        dated = epoch_to_iso(row.event_time)
        when = f" ({dated[:10]})" if dated else ""
        lines.append(f"- [{row.type}] {row.text}{when} (memory {row.memory_id})")
        fitting = fitting and estimate_tokens("\n".join(lines)) <= budget
        if fitting:
            ids.append(row.memory_id)
            fitted = "\n".join(lines)
    needed = estimate_tokens("\n".join(lines)) if rows else 0
    return RecallBlock(fitted if ids else "", tuple(ids), needed, len(rows), semantic)


def newest_request(messages: Sequence[Message]) -> str:
    """The text of the newest user request (what recall ranks memories against)."""
    for message in reversed(messages):
        if message.role is Role.USER and is_request(message):
            return " ".join(p.text for p in message.parts if isinstance(p, TextPart))
    return ""
