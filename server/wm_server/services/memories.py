"""Long-term memories: what a session learned, owned by its user (or agent, or the session
itself), searchable, correctable and forgettable, each use case in one unit of work.

For Phase 2 extraction (issue 20 point 2), which writes memories in its own transaction:

- ``owner_of(session) -> MemoryOwner``: whose memories a session makes and recalls (its
  user, else its agent, else the session itself; a session-owned memory goes with its
  session when that is deleted).
- ``await similar_memories(uow, tenant=..., owner=..., text=..., limit=10)``: the owner's
  active memories most similar to ``text``, as ``wm_core.MemoryRecord``s, by the same ranked
  search as SearchMemories (BM25 over the words of ``text``), best first. Works in any unit
  of work (a reader, or the writer that then applies the plan).
- ``await apply_plan(uow, tenant=..., owner=..., plan=..., sources=MemorySources(...))``:
  applies a ``wm_core.MemoryPlan`` inside the caller's open unit of work (the caller
  commits): CREATE stores a memory (or, when an active memory of the owner has the same
  ``wm_core.memory_key``, adds the source to it: ``deduplicated``); UPDATE keeps the old text
  as a version and writes the new one; MERGE keeps the first target with the new text (every
  old text a version) and retires the others into it, moving their sources; RETIRE retires
  with the op's reason. The full-text index follows in the same transaction. Ops whose
  targets are not active memories of the owner are skipped and listed in ``skipped`` (the
  plan's guards should have refused them). Returns a ``MemoryDiff`` of memory ids.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from wm_core import (
    MEMORY_ID_PATTERN,
    MEMORY_TYPES,
    MemoryOp,
    MemoryOpKind,
    MemoryPlan,
    MemoryRecord,
    MemoryType,
    memory_key,
)
from wm_server import contract
from wm_server.errors import AlreadyExists, FieldViolation, InvalidArgument, NotFound, invalid
from wm_server.security.tenancy import current_tenant
from wm_server.services import idempotency, paging, validation
from wm_server.services.literal_search import MAX_QUERY, checked_query
from wm_server.services.memory_lifecycle import (
    expired,
    lifecycle_of_new,
    plan_supersessions,
    supersede_current,
)
from wm_server.services.recall import HybridRecall, QueryVector, Semantic, no_vector
from wm_server.services.sessions import find_session
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database
from wm_server.storage.memories import MemoryFilter
from wm_server.storage.memory_expiry import Retention
from wm_server.storage.memory_lifecycle import NO_LIFECYCLE, Lifecycle
from wm_server.storage.records import MemoryRow, MemorySourceRow, MemoryVersionRow
from wm_server.storage.sessions import SessionRow
from wm_server.storage.statements import Read
from wm_server.storage.text_index import query_words
from wm_server.storage.unit_of_work import UnitOfWork

MAX_TEXT = contract.MAX_MEMORY_TEXT  # memory_store's schema states it too (wm_core)
MAX_FIELDS = contract.MAX_MEMORY_FIELDS
MAX_FIELD_VALUE = contract.MAX_MEMORY_FIELD_VALUE
MAX_REASON = contract.MAX_REASON
DEFAULT_LIMIT = 10
MAX_LIMIT = contract.MAX_MEMORY_HITS  # memory_search's schema states it too (wm_core)
SNIPPET = 300
SOURCES_SHOWN = 20
MAX_SOURCE_MESSAGES = 50
FIELD_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MEMORY_ID = re.compile(MEMORY_ID_PATTERN)
MASKABLE = ("text", "type", "fields", "event_time", "expire_time")
CORRECTION = "user correction"


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
class MemorySources:
    """Where the memories of one plan were learned (each op adds its source_message_ids)."""

    session_id: str
    archive_seq: int | None = None


@dataclass(frozen=True, slots=True)
class MemoryDiff:
    """What a plan changed, by memory id."""

    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    merged: tuple[str, ...] = ()  # the memory each MERGE kept
    retired: tuple[str, ...] = ()  # RETIRE targets and the memories a MERGE absorbed
    deduplicated: tuple[str, ...] = ()  # existing memories a CREATE turned out to repeat
    skipped: tuple[tuple[int, str], ...] = ()  # (op index, why) of ops not applied
    superseded: tuple[str, ...] = ()  # memories a new fact replaced (memory_lifecycle)


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


# --- what extraction calls -----------------------------------------------------------------
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


async def _store(
    uow: UnitOfWork,
    tenant: str,
    owner: MemoryOwner,
    content: MemoryContent,
    source: tuple[str, int | None, Sequence[str]] | None,
    now: float,
) -> tuple[MemoryRow, bool]:
    """Create a memory, or find the active one of the owner with the same key (adding the
    source to it); (the memory, whether it existed)."""
    key = memory_key(content.text)
    existing = await uow.memories.with_key(tenant, owner.key, key)
    if existing is not None:
        mid = existing.mid
    else:
        mid = await uow.memories.insert(
            memory_id=new_memory_id(), tenant=tenant, owner=owner.key, sid=owner.sid,
            type=content.type.value, text=content.text, search_text=content.search_text,
            key=key, fields=dict(content.fields), event_time=content.event_time, now=now,
        )  # fmt: skip
    if source is not None:
        name, seq, ids = source
        await uow.memories.add_source(mid, name, seq, list(ids)[:MAX_SOURCE_MESSAGES], now)
    if existing is not None:
        return existing, True
    row = await uow.memories.by_mid(mid)
    assert row is not None  # written just above, in this transaction
    return row, False


async def _supersede(
    uow: UnitOfWork, row: MemoryRow, content: MemoryContent, reason: str, now: float
) -> None:
    """Keep the current text as a version, then write ``content`` as the next one."""
    await uow.memories.add_version(row.mid, row.version, row.type, row.text, reason, now)
    await uow.memories.rewrite(
        row.mid, type=content.type.value, text=content.text, search_text=content.search_text,
        key=memory_key(content.text), fields=dict(content.fields),
        event_time=content.event_time, version=row.version + 1, now=now,
    )  # fmt: skip


def _content_of(op: MemoryOp, fallback: MemoryRow | None) -> MemoryContent:
    kind = op.type or (MemoryType(fallback.type) if fallback else MemoryType.ENTITY)
    text = " ".join(op.text.split())[:MAX_TEXT] or (fallback.text if fallback else "")
    fields = dict(list(op.fields.items())[:MAX_FIELDS]) if op.fields else {}
    if not fields and fallback is not None:
        fields = dict(fallback.fields)
    event = iso_to_epoch(op.event_time)
    if event is None and fallback is not None:
        event = fallback.event_time
    return MemoryContent(kind, text, fields, event)


async def apply_plan(
    uow: UnitOfWork,
    *,
    tenant: str,
    owner: MemoryOwner,
    plan: MemoryPlan,
    sources: MemorySources,
    now: float | None = None,
) -> MemoryDiff:
    """Apply ``plan`` in the caller's unit of work (see the module docstring)."""
    now = time.time() if now is None else now
    replacing, folded = await plan_supersessions(uow, tenant, owner, plan.ops)
    superseded: list[str] = []
    created: list[str] = []
    updated: list[str] = []
    merged: list[str] = []
    retired: list[str] = []
    deduplicated: list[str] = []
    skipped: list[tuple[int, str]] = []
    for index, op in enumerate(plan.ops):
        source = (sources.session_id, sources.archive_seq, op.source_message_ids)
        targets = {
            r.memory_id: r for r in await uow.memories.of_owner(tenant, owner.key, op.target_ids)
        }
        missing = [t for t in op.target_ids if t not in targets or not targets[t].active]
        if missing:
            skipped.append((index, f"not an active memory of the owner: {', '.join(missing)}"))
            continue
        if index in folded:
            continue  # its target is superseded by the CREATE that replaces it
        if index in replacing:  # a new fact: stored as a new memory superseding the old ones
            fallback = targets.get(op.target_ids[0]) if op.target_ids else None
            content = _content_of(op, None)
            if fallback is not None and op.type is None:
                content = replace(content, type=MemoryType(fallback.type))
            row, existed = await _store(uow, tenant, owner, content, source, now)
            (deduplicated if existed else created).append(row.memory_id)
            superseded.extend(
                await supersede_current(uow, tenant, owner.key, row, replacing[index], now)
            )
            continue
        if op.kind is MemoryOpKind.CREATE:
            if not op.text.strip():
                skipped.append((index, "no text"))
                continue
            row, existed = await _store(uow, tenant, owner, _content_of(op, None), source, now)
            (deduplicated if existed else created).append(row.memory_id)
            continue
        if not op.target_ids:
            skipped.append((index, "no target"))
            continue
        first = targets[op.target_ids[0]]
        if op.kind is MemoryOpKind.RETIRE:
            await uow.memories.retire(first.mid, op.reason[:MAX_REASON] or "retired", now)
            retired.append(first.memory_id)
            continue
        content = _content_of(op, first)
        twin = await uow.memories.with_key(tenant, owner.key, memory_key(content.text))
        absorbed = [targets[t] for t in op.target_ids[1:]] if op.kind is MemoryOpKind.MERGE else []
        if twin is not None and twin.mid != first.mid and twin not in absorbed:
            # The new text is another active memory's: that one stays, this one joins it.
            absorbed, first = [first, *absorbed], twin
        for other in absorbed:
            await uow.memories.retire(other.mid, f"merged into {first.memory_id}", now)
            await uow.memories.move_sources(other.mid, first.mid)
            retired.append(other.memory_id)
        reason = op.reason[:MAX_REASON] or ("merge" if absorbed else "update")
        if memory_key(content.text) != memory_key(first.text) or content.type.value != first.type:
            await _supersede(uow, first, content, reason, now)
        await uow.memories.add_source(
            first.mid, source[0], source[1], list(source[2])[:MAX_SOURCE_MESSAGES], now
        )
        (merged if absorbed else updated).append(first.memory_id)
    return MemoryDiff(
        tuple(created), tuple(updated), tuple(merged), tuple(retired), tuple(deduplicated),
        tuple(skipped), tuple(superseded),
    )  # fmt: skip


# --- the RPCs' use cases -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OwnerSpec:
    """Whose memories a call names: exactly one of the three (each id's shape is the proto's
    memory_owner rule, checked at the edge)."""

    user_id: str = ""
    agent_id: str = ""
    session_id: str = ""

    def check(self, field_name: str = "owner") -> None:
        given = [v for v in (self.user_id, self.agent_id, self.session_id) if v]
        if len(given) != 1:
            raise invalid(field_name, "exactly one of user_id, agent_id, session_id", "REQUIRED")


async def resolve(uow: UnitOfWork, spec: OwnerSpec) -> tuple[MemoryOwner, SessionRow | None]:
    """The owner a spec names, and the session when it names one (NOT_FOUND if absent)."""
    if spec.user_id:
        return MemoryOwner(f"user:{spec.user_id}"), None
    if spec.agent_id:
        return MemoryOwner(f"agent:{spec.agent_id}"), None
    row = await find_session(uow, spec.session_id)
    return owner_of(row), row


async def _views(uow: UnitOfWork, rows: Sequence[MemoryRow]) -> list[MemoryView]:
    sources = await uow.memories.sources([r.mid for r in rows], SOURCES_SHOWN)
    lives = await uow.memory_lifecycle.of([r.mid for r in rows])
    return [
        MemoryView(r, tuple(sources.get(r.mid, ())), lifecycle=lives.get(r.mid, NO_LIFECYCLE))
        for r in rows
    ]


def search_query(query: str) -> list[str]:
    return query_words(checked_query(query))


class MemoryService:
    def __init__(
        self,
        database: Database,
        *,
        tokens: paging.PageTokens,
        recall: HybridRecall,
        on_deleted: Callable[[], None] = lambda: None,
        retention: Retention = (),
        written: Callable[[], None] | None = None,
    ) -> None:
        self._db = database
        self._retention = retention  # per type (memory_expiry): expired memories are unread
        self._tokens = tokens
        self._on_deleted = on_deleted  # erase it from the files too (Maintenance.forgotten)
        self.hybrid = recall
        # Called after a memory write commits: the embedding loop embeds it (never inline).
        self._written = written or (lambda: None)

    async def search(
        self,
        spec: OwnerSpec,
        query: str,
        types: Sequence[str],
        start: float | None,
        end: float | None,
        limit: int,
        include_superseded: bool = False,
    ) -> list[MemoryHit]:
        found = await self.search_fused(spec, query, types, start, end, limit, include_superseded)
        return found[0]

    async def search_fused(
        self,
        spec: OwnerSpec,
        query: str,
        types: Sequence[str],
        start: float | None,
        end: float | None,
        limit: int,
        include_superseded: bool = False,
        min_score: float = 0.0,
    ) -> tuple[list[MemoryHit], Semantic, int]:
        """The owner's memories by the fused lexical and dense ranking (services.recall);
        how much of it was by meaning, and how many memories have no vector yet."""
        spec.check()
        words = search_query(query)
        kinds = tuple(memory_type(t, "types").value for t in types)
        if not 0 <= limit <= MAX_LIMIT:
            raise invalid("limit", f"must be 0-{MAX_LIMIT}", "OUT_OF_RANGE")
        if not 0.0 <= min_score <= 1.0:
            raise invalid("min_score", "must be 0-1", "OUT_OF_RANGE")
        vector = await self.hybrid.embed_query(query.strip())
        async with self._db.reader() as uow:
            owner, _ = await resolve(uow, spec)
            where = self._filter(owner.key, kinds, "active", start, end)
            terms = uow.memories.terms(query)
            found, status, unembedded = await self.hybrid.memories(
                uow, vector, where, terms, limit or DEFAULT_LIMIT, min_score
            )
            rows = [(f.row, f.fused.score, f.fused.lexical, f.fused.dense) for f in found]
            if include_superseded and len(rows) < (limit or DEFAULT_LIMIT):  # ranked below
                where = self._filter(owner.key, kinds, "superseded", start, end)
                older = await self.hybrid.ranked_memories(
                    uow, where, terms, (limit or DEFAULT_LIMIT) - len(rows)
                )
                rows += [(row, 0.0, 0.0, 0.0) for row, _ in older]
            views = await _views(uow, [r[0] for r in rows])
        hits = [
            MemoryHit(view, score, snippet(view.row.text, words), lexical, dense)
            for view, (_, score, lexical, dense) in zip(views, rows, strict=True)
        ]
        return hits, status, unembedded

    async def recall(
        self,
        uow: UnitOfWork,
        session: SessionRow,
        request: str,
        limit: int,
        vector: QueryVector | None = None,
    ) -> tuple[list[MemoryRow], Semantic]:
        """The session owner's memories ranked for a user request (AssembleContext), by the
        fused search when the caller embedded the request (``vector``), and how much of the
        ranking was by meaning."""
        terms = uow.memories.terms(request[: MAX_QUERY * 4])
        where = self._filter(owner_of(session).key)
        query = vector or no_vector()
        found, status, _ = await self.hybrid.memories(uow, query, where, terms, limit)
        return [f.row for f in found], status

    async def list(
        self, spec: OwnerSpec, types: Sequence[str], state: str, page_size: int, page_token: str
    ) -> tuple[list[MemoryView], str]:
        spec.check()
        kinds = tuple(sorted(memory_type(t, "types").value for t in types))
        size = paging.page_size(page_size)
        scope = "\x00".join([spec.user_id, spec.agent_id, spec.session_id, state, *kinds])
        before = self._tokens.decode("memories", page_token, scope)
        async with self._db.reader() as uow:
            owner, _ = await resolve(uow, spec)
            rows = await uow.memories.page(self._filter(owner.key, kinds, state), before, size + 1)
            more = len(rows) > size
            views = await _views(uow, rows[:size])
        token = self._tokens.encode("memories", views[-1].row.mid, scope) if more else ""
        return views, token

    def _filter(
        self,
        owner: str,
        kinds: tuple[str, ...] = (),
        state: str = "active",
        start: float | None = None,
        end: float | None = None,
    ) -> MemoryFilter:
        """The owner's memories in ``state``, leaving out the expired ones (memory_expiry)."""
        return MemoryFilter(
            current_tenant(), owner, kinds, state, start, end, time.time(), self._retention
        )

    async def get(self, value: str) -> MemoryView:
        mem = memory_id(value)
        async with self._db.reader() as uow:
            row = await uow.memories.get(current_tenant(), mem)
            view = (await _views(uow, [row]))[0] if row is not None else None
            if view is None or expired(view.row, view.lifecycle, time.time(), self._retention):
                raise memory_not_found(mem)
            history = await uow.memories.versions(view.row.mid)
        return replace(view, history=tuple(history))

    @retry_conflicts
    async def create(
        self,
        spec: OwnerSpec,
        content: MemoryContent,
        request_id: str,
        fingerprint: str,
        *,
        supersedes: Sequence[str] = (),
        expire_time: float | None = None,
    ) -> tuple[MemoryView, bool]:
        """Store a runtime's memory (the same key rule as extraction's CREATE)."""
        spec.check()
        tenant = current_tenant()
        async with self._db.unit_of_work() as uow:
            owner, session = await resolve(uow, spec)
            req = idempotency.request(
                "CreateMemory", owner.key, validation.request_id(request_id), fingerprint
            )
            prior = await idempotency.replay(uow, req)
            if prior is not None:
                row = await uow.memories.get(tenant, prior["memory_id"])
                if row is None:  # forgotten since: the outcome was a memory that is gone
                    raise memory_not_found(prior["memory_id"])
                return (await _views(uow, [row]))[0], bool(prior["deduplicated"])
            source = (session.record.session_id, None, ()) if session is not None else None
            now = time.time()
            row, existed = await _store(uow, tenant, owner, content, source, now)
            await lifecycle_of_new(uow, tenant, owner.key, row, supersedes, expire_time, now)
            await idempotency.remember(
                uow, req, owner.sid, {"memory_id": row.memory_id, "deduplicated": existed}
            )
            view = (await _views(uow, [row]))[0]
            await uow.commit()
        self._written()
        return view, existed

    @retry_conflicts
    async def update(
        self,
        value: str,
        given: Mapping[str, object],
        reason: str,
        request_id: str,
        fingerprint: str,
    ) -> MemoryView:
        """A user's correction: ``given`` holds the masked paths' new values (validated)."""
        mem = memory_id(value, "memory.memory_id")
        if len(reason) > MAX_REASON:
            raise invalid("reason", f"at most {MAX_REASON} characters", "TOO_LARGE")
        tenant = current_tenant()
        req = idempotency.request(
            "UpdateMemory", mem, validation.request_id(request_id), fingerprint
        )
        async with self._db.unit_of_work() as uow:
            if await idempotency.replay(uow, req) is None:
                row = await uow.memories.get(tenant, mem)
                if row is None:
                    raise memory_not_found(mem)
                if "expire_time" in given:  # when to forget it: no new version
                    expire = given["expire_time"]
                    await uow.memory_lifecycle.set_expiry(row.mid, expire)  # type: ignore[arg-type]
                content = MemoryContent(
                    given.get("type", MemoryType(row.type)),  # type: ignore[arg-type]
                    given.get("text", row.text),  # type: ignore[arg-type]
                    given.get("fields", row.fields),  # type: ignore[arg-type]
                    given.get("event_time", row.event_time),  # type: ignore[arg-type]
                )
                twin = await uow.memories.with_key(tenant, row.owner, memory_key(content.text))
                if row.active and twin is not None and twin.mid != row.mid:
                    raise AlreadyExists(
                        f"memory {twin.memory_id!r} of the same owner already says this",
                        reason="MEMORY_EXISTS",
                        metadata={"memory_id": twin.memory_id},
                    )
                if set(given) - {"expire_time"}:
                    await _supersede(uow, row, content, reason or CORRECTION, time.time())
                await idempotency.remember(uow, req, None, {})
            row = await uow.memories.get(tenant, mem)
            if row is None:
                raise memory_not_found(mem)
            view = (await _views(uow, [row]))[0]
            history = await uow.memories.versions(row.mid)
            await uow.commit()
        self._written()
        return replace(view, history=tuple(history))

    @retry_conflicts
    async def retire(
        self, value: str, reason: str, request_id: str, fingerprint: str
    ) -> MemoryView:
        """A person's (or runtime's) decision that a memory no longer holds: kept, with the
        reason, and no longer recalled. Retiring a retired memory leaves it as it is."""
        mem = memory_id(value)
        why = reason.strip()
        if not why:
            raise invalid("reason", "required: say why the memory no longer holds", "REQUIRED")
        if len(why) > MAX_REASON:
            raise invalid("reason", f"at most {MAX_REASON} characters", "TOO_LARGE")
        tenant = current_tenant()
        req = idempotency.request(
            "RetireMemory", mem, validation.request_id(request_id), fingerprint
        )
        async with self._db.unit_of_work() as uow:
            if await idempotency.replay(uow, req) is None:
                row = await uow.memories.get(tenant, mem)
                if row is None:
                    raise memory_not_found(mem)
                if row.active:
                    await uow.memories.retire(row.mid, why, time.time())
                await idempotency.remember(uow, req, None, {})
            row = await uow.memories.get(tenant, mem)
            if row is None:
                raise memory_not_found(mem)
            view = (await _views(uow, [row]))[0]
            history = await uow.memories.versions(row.mid)
            await uow.commit()
        return replace(view, history=tuple(history))

    @retry_conflicts
    async def delete(self, value: str, request_id: str, fingerprint: str) -> None:
        """Forget: the memory, its index entry, versions and sources, in one transaction."""
        mem = memory_id(value)
        req = idempotency.request(
            "DeleteMemory", mem, validation.request_id(request_id), fingerprint
        )
        async with self._db.unit_of_work() as uow:
            if await idempotency.replay(uow, req) is not None:
                return
            row = await uow.memories.get(current_tenant(), mem)
            if row is None:
                raise memory_not_found(mem)
            await uow.memories.delete(row.mid)
            await idempotency.remember(uow, req, None, {})
            await uow.commit()
        self._on_deleted()


def changes_in(
    paths: Sequence[str],
    type_value: str,
    text: str,
    fields: Mapping[str, str],
    event_time: float | None,
    expire_time: float | None,
) -> dict[str, object]:
    """The fields of a memory an update names (``paths``, of :data:`MASKABLE`), each checked
    by its own rule, every violation reported at once; a field not named is not looked at."""
    checks: dict[str, Callable[[], object]] = {
        "type": lambda: memory_type(type_value),
        "text": lambda: memory_text(text),
        "fields": lambda: memory_fields(fields),
        "event_time": lambda: event_time,
        "expire_time": lambda: expire_time,
    }
    violations: list[FieldViolation] = []
    given: dict[str, object] = {}
    for path in paths:
        try:
            given[path] = checks[path]()
        except InvalidArgument as error:
            violations.extend(error.violations)
    if violations:
        raise InvalidArgument(violations)
    return given


def content_in(
    type_value: str, text: str, fields: Mapping[str, str], event_time: float | None
) -> MemoryContent:
    """A runtime's memory, validated with every violation reported at once."""
    violations: list[FieldViolation] = []
    checked: list[object] = []
    for check in (
        lambda: memory_type(type_value),
        lambda: memory_text(text),
        lambda: memory_fields(fields),
    ):
        try:
            checked.append(check())
        except InvalidArgument as error:
            violations.extend(error.violations)
    if violations:
        raise InvalidArgument(violations)
    kind, clean, values = checked
    return MemoryContent(kind, clean, values, event_time)  # type: ignore[arg-type]
