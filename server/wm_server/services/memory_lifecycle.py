"""A memory's lifecycle (issue 35 point 3): which fact is current, when a memory is forgotten,
and near-duplicates folded into one.

- **Supersession**: a memory stored with ``supersedes_memory_ids`` replaces those (active
  memories of the same owner): each becomes SUPERSEDED, names its successor and keeps when it
  stopped holding (``valid_until``: the successor's ``valid_from``, i.e. its event_time, else
  the moment it was stored). Search and recall return current memories; a search that asks
  for superseded ones gets them ranked below every current one.
- **Expiry**: ``memory_expiry`` says when a memory expires (its ``expire_time``, else its
  type's retention in days, ``WM_MEMORY_RETENTION_DAYS``); every read leaves expired
  memories out at once, and ``MemoryUpkeep.expire`` (the maintenance loop) deletes them.
- **Consolidation**: ``MemoryUpkeep.consolidate`` compares the active memories of each owner
  written since its last round, per type, by a similarity (default: Jaccard similarity of
  the token sets of their analyzed text, the words the full-text index holds); a group at
  or above the threshold is merged into its oldest memory (the others retired "merged into",
  their sources moved), and the merge is a decision record in the kept memory's history
  (a version whose reason names what was merged, by which measure, at which score).
  ``Similarity`` is the hook for vector similarity (the "Recall by meaning" branch passes an
  embedding cosine, or a blend, to ``MemoryUpkeep``; pairs are then still proposed by shared
  words, so a vector branch that wants pairs with no word in common proposes its own, from
  its nearest-neighbour index, and scores them here).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wm_core import MemoryOp, MemoryOpKind, MemoryRecord, supersession_query, supersessions
from wm_server import contract
from wm_server.errors import StorageConflict, invalid
from wm_server.services.memory_content import MemoryOwner, memory_id, record_of, similar_memories
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database
from wm_server.storage.memory_expiry import Retention, expires_at, retention_of
from wm_server.storage.memory_lifecycle import Candidate, Lifecycle
from wm_server.storage.records import MemoryRow
from wm_server.storage.text_index import words_of
from wm_server.storage.unit_of_work import UnitOfWork

if TYPE_CHECKING:
    from wm_server.services.memory_consolidation import VectorConsolidation

MAX_SUPERSEDES = contract.MAX_SUPERSEDES
SIMILAR_PER_FACT = 5  # the owner's memories a new fact of a subject is compared with
THRESHOLD = 0.8  # token-set Jaccard at or above which two memories of a type are one
MAX_CANDIDATES = 2000  # newest active memories of an owner compared per round
MAX_OWNERS = 500  # owners consolidated per round (the rest wait for the next)
EXPIRE_CHUNK = 500
COMMON_WORD = 200  # a word in more memories than this does not propose pairs (only scores)

Similarity = Callable[[Candidate, Candidate], float]


def jaccard(left: frozenset[str], right: frozenset[str]) -> float:
    return len(left & right) / len(left | right) if left and right else 0.0


def token_set_similarity(a: Candidate, b: Candidate) -> float:
    """Jaccard similarity of the two memories' analyzed words (0..1): the default measure
    (``near_duplicates`` computes it itself when no other similarity is given)."""
    return jaccard(words_of(a.search_text), words_of(b.search_text))


def supersedes_in(values: Sequence[str], field: str = "memory.supersedes") -> list[str]:
    """The ids a new memory replaces, checked (format, at most 16), duplicates dropped."""
    if len(values) > MAX_SUPERSEDES:
        raise invalid(field, f"at most {MAX_SUPERSEDES} memory ids", "TOO_MANY")
    ids = [memory_id(v, field) for v in values]
    return list(dict.fromkeys(ids))


async def supersede(
    uow: UnitOfWork, tenant: str, owner: str, new: MemoryRow, ids: Sequence[str], now: float
) -> None:
    """Mark ``ids`` (active memories of ``owner``) superseded by ``new``, in the caller's unit
    of work; INVALID_ARGUMENT (nothing written: the caller does not commit) for another id."""
    targets = {r.memory_id: r for r in await uow.memories.of_owner(tenant, owner, ids)}
    wrong = [i for i in ids if i == new.memory_id or i not in targets or not targets[i].active]
    if wrong:
        raise invalid(
            "memory.supersedes",
            f"not another active memory of the owner: {', '.join(wrong)}",
            "NOT_SUPERSEDABLE",
        )
    until = new.event_time if new.event_time is not None else now
    for memory in ids:
        if not await uow.memory_lifecycle.supersede(targets[memory].mid, new.memory_id, until, now):
            # Another writer changed it after it was read (PostgreSQL, READ COMMITTED): run
            # the use case again, which then sees what that writer did.
            raise StorageConflict(f"memory {memory} changed while being superseded")
    await uow.memory_lifecycle.link(new.mid, ids)


async def lifecycle_of_new(
    uow: UnitOfWork,
    tenant: str,
    owner: str,
    row: MemoryRow,
    supersedes: Sequence[str],
    expire_time: float | None,
    now: float,
) -> None:
    """What CreateMemory adds to a stored memory: the ones it replaces, when to forget it."""
    if supersedes:
        await supersede(uow, tenant, owner, row, supersedes, now)
    if expire_time is not None:
        await uow.memory_lifecycle.set_expiry(row.mid, expire_time)


async def plan_supersessions(
    uow: UnitOfWork, tenant: str, owner: MemoryOwner, ops: Sequence[MemoryOp]
) -> tuple[Mapping[int, tuple[str, ...]], frozenset[int]]:
    """Which of the owner's active memories the new facts of an extraction plan supersede
    (``wm_core.supersessions``), judged against the plan's targets and, for each CREATE that
    names a subject, the owner's memories most similar to it (its subject, the value it
    replaces and its text: ``wm_core.supersession_query``)."""
    ids = list(dict.fromkeys(t for op in ops for t in op.target_ids))
    rows = await uow.memories.of_owner(tenant, owner.key, ids) if ids else []
    known: dict[str, MemoryRecord] = {r.memory_id: record_of(r) for r in rows if r.active}
    for op in ops:
        query = supersession_query(op) if op.kind is MemoryOpKind.CREATE else ""
        if query:
            for record in await similar_memories(
                uow, tenant=tenant, owner=owner, text=query, limit=SIMILAR_PER_FACT
            ):
                known.setdefault(record.id, record)
    found = supersessions(ops, list(known.values()))
    return found.replacing, found.absorbed


async def supersede_current(
    uow: UnitOfWork, tenant: str, owner: str, new: MemoryRow, ids: Sequence[str], now: float
) -> list[str]:
    """Supersede by ``new`` those of ``ids`` still active (another op of the plan may have
    retired one, or ``new`` turned out to be one of them); the ids superseded."""
    rows = await uow.memories.of_owner(tenant, owner, list(ids))
    current = [r.memory_id for r in rows if r.active and r.memory_id != new.memory_id]
    if current:
        await supersede(uow, tenant, owner, new, current, now)
    return current


def expired(row: MemoryRow, lifecycle: Lifecycle, at: float, retention: Retention) -> bool:
    """Whether a memory read is past its expiry (``memory_expiry``)."""
    when = expires_at(lifecycle.expire_time, row.create_time, row.type, retention)
    return when is not None and when <= at


@dataclass(frozen=True, slots=True)
class Merge:
    """One consolidation decision: ``kept`` absorbs ``absorbed`` (each with its score)."""

    kept: Candidate
    absorbed: tuple[tuple[Candidate, float], ...]
    measure: str
    threshold: float

    @property
    def reason(self) -> str:
        merged = ", ".join(f"{c.memory_id} ({score:.2f})" for c, score in self.absorbed)
        return (
            f"consolidated: merged near-duplicates {merged} by {self.measure} similarity"
            f" >= {self.threshold:.2f}; text kept"
        )


def near_duplicates(
    candidates: Sequence[Candidate],
    *,
    threshold: float = THRESHOLD,
    similarity: Similarity | None = None,
    measure: str = "token-set",
) -> list[Merge]:
    """Groups of memories of one type at or above ``threshold`` of similarity with the
    group's oldest memory, each a ``Merge`` into that oldest one. Pure: no I/O.

    The default measure is token-set (Jaccard) similarity, with prefix filtering: words
    ordered rarest first, two sets at Jaccard >= t share one of the first
    ``n - ceil(t * n) + 1`` words of each, so only those propose pairs (2,000 memories
    compare in milliseconds, not seconds). Another ``similarity`` (a vector's) is asked about
    every pair sharing a word held by at most COMMON_WORD memories of the type."""
    by_type: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in candidates:
        by_type[candidate.type].append(candidate)
    merges: list[Merge] = []
    for group in by_type.values():
        group.sort(key=lambda c: (c.create_time, c.mid))
        sets = [words_of(c.search_text) for c in group]
        counts = Counter(word for words in sets for word in words)
        proposing: list[list[str]] = []
        for words in sets:
            ordered = sorted(words, key=lambda w: (counts[w], w))
            if similarity is None:
                proposing.append(ordered[: len(ordered) - math.ceil(threshold * len(ordered)) + 1])
            else:
                proposing.append([w for w in ordered if counts[w] <= COMMON_WORD])
        holders: dict[str, list[int]] = defaultdict(list)
        for index, prefix in enumerate(proposing):
            for word in prefix:
                holders[word].append(index)
        taken: set[int] = set()
        for index, kept in enumerate(group):
            if index in taken or not sets[index]:
                continue
            proposed = {
                other
                for word in proposing[index]
                for other in holders[word]
                if other > index and other not in taken
            }
            absorbed = []
            for other in sorted(proposed):
                if similarity is None:
                    mine, theirs = sets[index], sets[other]
                    if min(len(mine), len(theirs)) < threshold * max(len(mine), len(theirs)):
                        continue  # sizes alone keep them apart
                    score = jaccard(mine, theirs)
                else:
                    score = similarity(kept, group[other])
                if score >= threshold:
                    absorbed.append((group[other], score))
                    taken.add(other)
            if absorbed:
                merges.append(Merge(kept, tuple(absorbed), measure, threshold))
    return merges


class MemoryUpkeep:
    """What the maintenance loop does for memories each round: forget the expired ones, fold
    the near-duplicates of the owners written since the last round."""

    def __init__(
        self,
        database: Database,
        *,
        retention_days: Mapping[str, float] | None = None,
        threshold: float = THRESHOLD,
        similarity: Similarity | None = None,
        measure: str = "token-set",
        vectors: VectorConsolidation | None = None,
    ) -> None:
        self._db = database
        # By meaning too (memory_consolidation), after the text measure; None or 0: off.
        self._vectors = vectors if vectors is not None and vectors.threshold > 0 else None
        self._unembedded: set[tuple[str, str]] = set()  # owners to look at again
        self.retention: Retention = retention_of(retention_days or {})
        self._threshold = threshold
        self._similarity = similarity
        self._measure = measure
        self._since = 0.0  # the first round looks at every owner once

    async def expire(self, now: float | None = None) -> int:
        """Delete every expired memory (as DeleteMemory); the number deleted."""
        at = time.time() if now is None else now
        deleted = 0
        while True:
            count = await self._expire_chunk(at)
            deleted += count
            if count < EXPIRE_CHUNK:
                return deleted

    @retry_conflicts
    async def _expire_chunk(self, at: float) -> int:
        async with self._db.unit_of_work() as uow:
            mids = await uow.memory_lifecycle.expired(at, self.retention, EXPIRE_CHUNK)
            for mid in mids:
                await uow.memories.delete(mid)
            await uow.commit()
        return len(mids)

    async def consolidate(self, now: float | None = None) -> list[Merge]:
        """Merge near-duplicates of the owners whose memories changed since the last round
        (none with a threshold of 0: consolidation off)."""
        if self._threshold <= 0 and self._vectors is None:
            return []
        at = time.time() if now is None else now
        merges: list[Merge] = []
        after = ("", "")
        waiting, self._unembedded = self._unembedded, set()
        while True:
            async with self._db.reader() as uow:
                owners = await uow.memory_lifecycle.owners_changed(self._since, after, MAX_OWNERS)
            for tenant, owner in owners:
                waiting.discard((tenant, owner))
                merges.extend(await self._consolidate_owner(tenant, owner, at))
                await asyncio.sleep(0)  # other work runs between owners
            if len(owners) < MAX_OWNERS:
                break
            after = owners[-1]
        for tenant, owner in sorted(waiting)[:MAX_OWNERS]:  # their vectors may be stored now
            merges.extend(await self._consolidate_owner(tenant, owner, at))
            await asyncio.sleep(0)
        self._since = at
        return merges

    async def _consolidate_owner(self, tenant: str, owner: str, at: float) -> list[Merge]:
        """Compare on a reader, then apply in a unit of work the merges whose memories are
        still as compared (an owner changed meanwhile is looked at again next round)."""
        stored: dict[int, bytes] = {}
        async with self._db.reader() as uow:
            candidates = await uow.memory_lifecycle.candidates(
                tenant, owner, at, self.retention, MAX_CANDIDATES
            )
            if self._vectors is not None and len(candidates) > 1:
                stored = await self._vectors.vectors(uow, candidates)
                if len(stored) < len(candidates):  # not all embedded yet: again next round
                    self._unembedded.add((tenant, owner))
        merges: list[Merge] = []
        if self._threshold > 0:
            merges = await asyncio.to_thread(  # CPU: off the event loop
                near_duplicates,
                candidates,
                threshold=self._threshold,
                similarity=self._similarity,
                measure=self._measure,
            )
        if self._vectors is not None and len(stored) > 1:
            merged = frozenset(c.mid for m in merges for c in (m.kept, *(o for o, _ in m.absorbed)))
            merges += await asyncio.to_thread(self._vectors.merges, candidates, stored, merged)
        return await self._merge(merges, at) if merges else []

    @retry_conflicts
    async def _merge(self, merges: Sequence[Merge], at: float) -> list[Merge]:
        async with self._db.unit_of_work() as uow:
            involved = [c for m in merges for c in (m.kept, *(o for o, _ in m.absorbed))]
            now = await uow.memory_lifecycle.states([c.mid for c in involved])
            if any(now.get(c.mid) != ("active", c.version) for c in involved):
                return []  # written since: the next round compares again
            for merge in merges:
                kept = merge.kept
                for other, _ in merge.absorbed:
                    await uow.memories.retire(other.mid, f"merged into {kept.memory_id}", at)
                    await uow.memories.move_sources(other.mid, kept.mid)
                await uow.memories.add_version(
                    kept.mid, kept.version, kept.type, kept.text, merge.reason, at
                )
                await uow.memory_lifecycle.next_version(kept.mid, kept.version + 1, at)
            await uow.commit()
        return list(merges)
