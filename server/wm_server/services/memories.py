"""Long-term memories' use cases: what a session learned, owned by its user (or agent, or
the session itself), searchable, correctable and forgettable, each use case in one unit of
work. A memory's content and its rules are ``services.memory_content``'s; what writes one
(and Phase 2's plans) is ``services.memory_writes``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from wm_core import (
    MemoryType,
    memory_key,
)
from wm_server.errors import AlreadyExists, FieldViolation, InvalidArgument, invalid
from wm_server.security.tenancy import current_tenant
from wm_server.services import idempotency, paging, validation
from wm_server.services.literal_search import MAX_QUERY, checked_query
from wm_server.services.memory_content import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_REASON,
    MemoryContent,
    MemoryHit,
    MemoryOwner,
    MemoryView,
    memory_fields,
    memory_id,
    memory_not_found,
    memory_text,
    memory_type,
    owner_of,
    snippet,
)
from wm_server.services.memory_lifecycle import (
    expired,
    lifecycle_of_new,
)
from wm_server.services.memory_writes import store_memory, supersede_text
from wm_server.services.recall import HybridRecall, QueryVector, Semantic, no_vector
from wm_server.services.sessions import find_session
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database
from wm_server.storage.memories import MemoryFilter
from wm_server.storage.memory_expiry import Retention
from wm_server.storage.memory_lifecycle import NO_LIFECYCLE
from wm_server.storage.records import MemoryRow
from wm_server.storage.sessions import SessionRow
from wm_server.storage.text_index import query_words
from wm_server.storage.unit_of_work import UnitOfWork

SOURCES_SHOWN = 20
MASKABLE = ("text", "type", "fields", "event_time", "expire_time")
CORRECTION = "user correction"


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
            row, existed = await store_memory(uow, tenant, owner, content, source, now)
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
                    await supersede_text(uow, row, content, reason or CORRECTION, time.time())
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
