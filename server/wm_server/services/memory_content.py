"""A memory as the services hold it, for every module that reads or writes one: whose it is
(``owner_of``), its content and the rules of content (each written once: the RPCs' checks
and what extraction stores share them), the views and hits the RPCs answer with, the times
in the ISO form a model writes, the stored row as ``wm_core``'s record, and the owner's
memories most similar to a text (``similar_memories``: the one read that extraction, its
preview and supersession make before a plan is judged).

``similar_memories(uow, tenant=..., owner=..., text=..., limit=10)`` ranks by the same search
as SearchMemories (BM25 over the words of ``text``), best first, in any unit of work (a
reader, or the writer that then applies the plan); ``similar_reading`` is that read as one
statement to send with others (``UnitOfWork.read``) where the engine ranks in one query.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from wm_core import (
    MEMORY_ID_PATTERN,
    MEMORY_TYPES,
    MemoryRecord,
    MemoryType,
)
from wm_server import contract
from wm_server.errors import NotFound, invalid
from wm_server.services import validation
from wm_server.storage.memories import MemoryFilter
from wm_server.storage.memory_lifecycle import NO_LIFECYCLE, Lifecycle
from wm_server.storage.records import MemoryRow, MemorySourceRow, MemoryVersionRow
from wm_server.storage.sessions import SessionRow
from wm_server.storage.statements import Read
from wm_server.storage.unit_of_work import UnitOfWork

MAX_TEXT = contract.MAX_MEMORY_TEXT  # memory_store's schema states it too (wm_core)
MAX_FIELDS = contract.MAX_MEMORY_FIELDS
MAX_FIELD_VALUE = contract.MAX_MEMORY_FIELD_VALUE
MAX_REASON = contract.MAX_REASON
DEFAULT_LIMIT = 10
MAX_LIMIT = contract.MAX_MEMORY_HITS  # memory_search's schema states it too (wm_core)
SNIPPET = 300
MAX_SOURCE_MESSAGES = 50
FIELD_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MEMORY_ID = re.compile(MEMORY_ID_PATTERN)


@dataclass(frozen=True, slots=True)
class MemoryOwner:
    """Whose memories: ``key`` is "user:U", "agent:A" or "session:SID"; ``sid`` is the
    owning session's key for a session-owned memory (deleted with it), else None."""

    key: str
    sid: int | None = None


def owner_of(session: SessionRow) -> MemoryOwner:
    record = session.record
    if record.user_id:
        return MemoryOwner(f"user:{record.user_id}")
    if record.agent_id:
        return MemoryOwner(f"agent:{record.agent_id}")
    return MemoryOwner(f"session:{session.sid}", session.sid)


@dataclass(frozen=True, slots=True)
class MemoryView:
    """A memory with its newest sources and (GetMemory only) its superseded versions."""

    row: MemoryRow
    sources: tuple[MemorySourceRow, ...] = ()
    history: tuple[MemoryVersionRow, ...] = ()
    lifecycle: Lifecycle = NO_LIFECYCLE


@dataclass(frozen=True, slots=True)
class MemoryHit:
    view: MemoryView
    score: float
    snippet: str
    lexical: float = 0.0  # the fused score's parts (services.recall)
    dense: float = 0.0


@dataclass(frozen=True, slots=True)
class MemoryContent:
    """A memory's writable content, validated."""

    type: MemoryType
    text: str
    fields: Mapping[str, str] = field(default_factory=dict)
    event_time: float | None = None

    @property
    def search_text(self) -> str:
        """What the index holds: the text and the field values (names, dates, numbers)."""
        return " ".join([self.text, *self.fields.values()])


# --- rules of content, written once --------------------------------------------------------
def memory_text(value: str, field_name: str = "memory.text") -> str:
    text = value.strip()
    if not text:
        raise invalid(field_name, "required", "REQUIRED")
    if len(text) > MAX_TEXT:
        raise invalid(field_name, f"at most {MAX_TEXT:,} characters", "TOO_LARGE")
    return text


def memory_type(value: str, field_name: str = "memory.type") -> MemoryType:
    if value not in MEMORY_TYPES:
        raise invalid(field_name, f"one of {', '.join(MEMORY_TYPES)}", "REQUIRED")
    return MemoryType(value)


def memory_fields(values: Mapping[str, str], field_name: str = "memory.fields") -> dict[str, str]:
    if len(values) > MAX_FIELDS:
        raise invalid(field_name, f"at most {MAX_FIELDS} fields", "TOO_MANY")
    for key, value in values.items():
        if not FIELD_KEY.fullmatch(key):
            raise invalid(field_name, "keys are 1-64 characters of [A-Za-z0-9_.-]")
        if len(value) > MAX_FIELD_VALUE:
            raise invalid(f"{field_name}[{key}]", f"at most {MAX_FIELD_VALUE} characters")
    return dict(values)


def memory_id(value: str, field_name: str = "memory_id") -> str:
    if not value:
        raise invalid(field_name, "required", "REQUIRED")
    if not MEMORY_ID.fullmatch(value):
        raise invalid(field_name, "must look like mem_ and 20 hex digits", "INVALID_FORMAT")
    return value


def new_memory_id() -> str:
    return f"mem_{secrets.token_hex(10)}"


def memory_not_found(value: str) -> NotFound:
    return NotFound(
        f"memory {value!r} not found", reason="MEMORY_NOT_FOUND", metadata={"memory_id": value}
    )


def iso_to_epoch(value: str | None) -> float | None:
    """An ISO 8601 date or date-time (UTC when it names no zone) as epoch seconds; None for
    none or one that does not parse (a model's free-form date is kept in the text)."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def epoch_to_iso(value: float | None) -> str | None:
    """None for none, and for a stored time outside what a Timestamp carries (kept by an older
    server): such a memory reads as undated instead of failing every read of its owner."""
    if value is None or not validation.in_timestamp_range(value):
        return None
    return datetime.fromtimestamp(validation.clamped(value), UTC).isoformat()


def snippet(text: str, words: Sequence[str], size: int = SNIPPET) -> str:
    """At most ``size`` characters of ``text`` around the first query word it has."""
    if len(text) <= size:
        return text
    lowered = text.lower()
    found = [at for at in (lowered.find(w) for w in words) if at >= 0]
    at = min(found) if found else 0
    start = max(0, min(at - size // 3, len(text) - size))
    return text[start : start + size]


def record_of(row: MemoryRow) -> MemoryRecord:
    return MemoryRecord(
        row.memory_id,
        MemoryType(row.type),
        row.text,
        dict(row.fields),
        epoch_to_iso(row.event_time),
    )


# --- the owner's most similar memories -------------------------------------------------------
async def similar_memories(
    uow: UnitOfWork, *, tenant: str, owner: MemoryOwner, text: str, limit: int = 10
) -> list[MemoryRecord]:
    """The owner's active memories most similar to ``text``, best first."""
    found = await uow.memories.ranked(
        MemoryFilter(tenant, owner.key), uow.memories.terms(text), max(1, min(limit, MAX_LIMIT))
    )
    return [record_of(row) for row, _ in found]


def similar_reading(
    uow: UnitOfWork,
    *,
    tenant: str,
    owner: MemoryOwner,
    text: Callable[[], str],
    limit: int = 10,
) -> Read[list[MemoryRecord]] | None:
    """``similar_memories`` of the text ``text()`` makes, as one read, to send with others
    (``UnitOfWork.read``), where the engine asks it with one query; None where it may take
    more (then call it)."""
    if not uow.memories.ranks_in_one_query:  # before the text is made and analyzed for nothing
        return None
    read = uow.memories.ranking(
        MemoryFilter(tenant, owner.key), uow.memories.terms(text()), max(1, min(limit, MAX_LIMIT))
    )
    if read is None:
        return None
    return Read(read.sql, read.params, lambda rows: [record_of(r) for r, _ in read.answer(rows)])
