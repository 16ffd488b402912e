"""Long-term memories, their versions and sources, and their ranked search."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wm_server.storage.memory_expiry import Retention, alive
from wm_server.storage.records import (
    MemoryRow,
    MemorySourceRow,
    MemoryVersionRow,
)
from wm_server.storage.repository import LAST, Repository
from wm_server.storage.statements import Read, Row
from wm_server.storage.text_index import CANDIDATES, ENOUGH

if TYPE_CHECKING:
    pass


_MEMORY = (
    "m.mid, m.memory_id, m.tenant, m.owner, COALESCE(s.session_id, ''), m.type, m.text,"
    " m.fields_json, m.event_time, m.record_time, m.create_time, m.update_time, m.state,"
    " m.version, m.retire_reason"
)


_MEMORY_FROM = " FROM memories m LEFT JOIN sessions s ON s.sid = m.sid"


def _memory(row: Row) -> MemoryRow:
    values = list(row[:15])
    values[7] = json.loads(values[7])
    return MemoryRow(*values)


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Which of an owner's memories a listing or a search considers."""

    tenant: str
    owner: str
    types: tuple[str, ...] = ()
    state: str = "active"
    start_time: float | None = None  # on COALESCE(event_time, record_time)
    end_time: float | None = None
    alive_at: float | None = None  # only the memories not expired then (memory_expiry)
    retention: Retention = ()


class MemoryRepository(Repository):
    """Memories, their versions and sources; their full-text index follows every write in
    the same transaction (the dialect's ``text_index``)."""

    async def _match_queries(self, index: str, words: list[str]) -> list[str]:
        """The match parameters of a ranked query, cheapest first: where the engine counts
        rows per word, the rarest words that select at most CANDIDATES rows (the common rest
        only scoring), then all words; else all words. A caller tries the next one when the
        cheaper one found fewer rows than it wants.

        None when the counts say no row has any of the words, which are all ASCII: FTS5's
        unicode61 tokenizer keeps such a word as the one token its count is looked up by
        (a word of another script it might split or fold otherwise). An owner's first
        commits rank an empty index: the ranked statement that finds nothing is not asked
        (0.38 of 0.59 ms of loop CPU per Phase 2 on the bench)."""
        text = self._dialect.text_index
        whole = text.query(words)
        counting = text.frequencies(index)
        if counting is None or len(words) < 2:
            return [whole]
        members, values = self._dialect.in_list("words", words)
        counts = dict.fromkeys(words, 0)
        counts.update(
            {
                str(w): int(n)
                for w, n in await self._conn.all(counting.format(members=members), values)
            }
        )
        if not any(counts.values()) and all(w.isascii() for w in words):
            return []
        ordered = sorted(words, key=lambda w: counts[w])
        chosen: list[str] = []
        rows = 0
        for word in ordered:
            if chosen and rows >= ENOUGH and rows + counts[word] > CANDIDATES:
                break
            chosen.append(word)
            rows += counts[word]
        rest = [w for w in words if w not in chosen]
        return [text.query(chosen, rest), whole] if rest else [whole]

    def _where(self, where: MemoryFilter) -> tuple[str, dict[str, Any]]:
        sql = " WHERE m.tenant = :tenant AND m.owner = :owner AND m.state = :state"
        params: dict[str, Any] = {
            "tenant": where.tenant,
            "owner": where.owner,
            "state": where.state,
        }
        if where.types:
            members, values = self._dialect.in_list("types", where.types)
            sql += f" AND m.type {members}"
            params.update(values)
        if where.start_time is not None:
            sql += " AND COALESCE(m.event_time, m.record_time) >= :start"
            params["start"] = where.start_time
        if where.end_time is not None:
            sql += " AND COALESCE(m.event_time, m.record_time) < :end"
            params["end"] = where.end_time
        if where.alive_at is not None:
            condition, values = alive(where.alive_at, where.retention)
            sql += f" AND {condition}"
            params.update(values)
        return sql, params

    async def insert(
        self,
        *,
        memory_id: str,
        tenant: str,
        owner: str,
        sid: int | None,
        type: str,
        text: str,
        search_text: str,
        key: str,
        fields: dict[str, str],
        event_time: float | None,
        now: float,
    ) -> int:
        """Store an active memory at version 1; its key."""
        search_text = self._dialect.text_index.indexed(search_text)
        value = self._dialect.text_index.value("memories", ":search_text")
        column, expression = (f", {value[0]}", f", {value[1]}") if value else ("", "")
        row = await self._conn.one(
            "INSERT INTO memories (memory_id, tenant, owner, sid, type, text, search_text,"
            " memory_key, fields_json, event_time, record_time, create_time, update_time,"
            f" state, version{column}) VALUES (:memory_id, :tenant, :owner, :sid, :type, :text,"
            " :search_text, :key, :fields, :event_time, :now, :now, :now, 'active',"
            f" 1{expression}) RETURNING mid",
            {
                "memory_id": memory_id,
                "tenant": tenant,
                "owner": owner,
                "sid": sid,
                "type": type,
                "text": text,
                "search_text": search_text,
                "key": key,
                "fields": json.dumps(fields, sort_keys=True),
                "event_time": event_time,
                "now": now,
            },
        )
        assert row is not None
        return int(row[0])

    async def get(self, tenant: str, memory_id: str) -> MemoryRow | None:
        row = await self._conn.one(
            f"SELECT {_MEMORY}{_MEMORY_FROM} WHERE m.tenant = :tenant AND m.memory_id = :id",
            {"tenant": tenant, "id": memory_id},
        )
        return _memory(row) if row else None

    async def by_mid(self, mid: int) -> MemoryRow | None:
        row = await self._conn.one(
            f"SELECT {_MEMORY}{_MEMORY_FROM} WHERE m.mid = :mid", {"mid": mid}
        )
        return _memory(row) if row else None

    async def of_owner(self, tenant: str, owner: str, ids: Sequence[str]) -> list[MemoryRow]:
        """The owner's memories among ``ids`` (any state)."""
        if not ids:
            return []
        members, values = self._dialect.in_list("ids", ids)
        rows = await self._conn.all(
            f"SELECT {_MEMORY}{_MEMORY_FROM} WHERE m.tenant = :tenant AND m.owner = :owner"
            f" AND m.memory_id {members}",
            {"tenant": tenant, "owner": owner, **values},
        )
        return [_memory(r) for r in rows]

    async def with_key(self, tenant: str, owner: str, key: str) -> MemoryRow | None:
        """The owner's active memory whose text has this identity key."""
        row = await self._conn.one(
            f"SELECT {_MEMORY}{_MEMORY_FROM} WHERE m.tenant = :tenant AND m.owner = :owner"
            " AND m.memory_key = :key AND m.state = 'active'",
            {"tenant": tenant, "owner": owner, "key": key},
        )
        return _memory(row) if row else None

    async def rewrite(
        self,
        mid: int,
        *,
        type: str,
        text: str,
        search_text: str,
        key: str,
        fields: dict[str, str],
        event_time: float | None,
        version: int,
        now: float,
    ) -> None:
        """Replace the content (the caller keeps the old one as a version first)."""
        search_text = self._dialect.text_index.indexed(search_text)
        value = self._dialect.text_index.value("memories", ":search_text")
        extra = f", {value[0]} = {value[1]}" if value else ""
        await self._conn.run(
            "UPDATE memories SET type = :type, text = :text, search_text = :search_text,"
            " memory_key = :key, fields_json = :fields, event_time = :event_time,"
            f" version = :version, update_time = :now{extra} WHERE mid = :mid",
            {
                "type": type,
                "text": text,
                "search_text": search_text,
                "key": key,
                "fields": json.dumps(fields, sort_keys=True),
                "event_time": event_time,
                "version": version,
                "now": now,
                "mid": mid,
            },
        )

    async def retire(self, mid: int, reason: str, now: float) -> None:
        await self._conn.run(
            "UPDATE memories SET state = 'retired', retire_reason = :reason, update_time = :now"
            " WHERE mid = :mid",
            {"reason": reason, "now": now, "mid": mid},
        )

    async def delete(self, mid: int) -> None:
        """Forget: the row, its index entry, versions and sources, in this transaction."""
        await self._conn.run("DELETE FROM memories WHERE mid = :mid", {"mid": mid})

    async def add_version(
        self, mid: int, version: int, type: str, text: str, reason: str, now: float
    ) -> None:
        await self._conn.run(
            "INSERT INTO memory_versions (mid, version, type, text, reason, supersede_time)"
            " VALUES (:mid, :version, :type, :text, :reason, :now)",
            {
                "mid": mid,
                "version": version,
                "type": type,
                "text": text,
                "reason": reason,
                "now": now,
            },
        )

    async def versions(self, mid: int) -> list[MemoryVersionRow]:
        """Superseded versions, newest first."""
        rows = await self._conn.all(
            "SELECT version, type, text, reason, supersede_time FROM memory_versions"
            " WHERE mid = :mid ORDER BY version DESC",
            {"mid": mid},
        )
        return [
            MemoryVersionRow(int(v), str(t), str(x), str(r), float(w)) for v, t, x, r, w in rows
        ]

    async def add_source(
        self,
        mid: int,
        session_id: str,
        archive_seq: int | None,
        message_ids: Sequence[str],
        now: float,
    ) -> None:
        await self._conn.run(
            "INSERT INTO memory_sources (mid, n, session_id, archive_seq, message_ids,"
            " create_time) VALUES (:mid, (SELECT COALESCE(MAX(n), 0) + 1 FROM memory_sources"
            " WHERE mid = :mid), :session_id, :seq, :ids, :now)",
            {
                "mid": mid,
                "session_id": session_id,
                "seq": archive_seq,
                "ids": " ".join(message_ids),
                "now": now,
            },
        )

    async def move_sources(self, from_mid: int, to_mid: int) -> None:
        """Give ``to_mid`` the sources of ``from_mid`` too (a merge keeps where all came from)."""
        await self._conn.run(
            "INSERT INTO memory_sources (mid, n, session_id, archive_seq, message_ids,"
            " create_time) SELECT :to, n + (SELECT COALESCE(MAX(n), 0) FROM memory_sources"
            " WHERE mid = :to), session_id, archive_seq, message_ids, create_time"
            " FROM memory_sources WHERE mid = :from",
            {"to": to_mid, "from": from_mid},
        )

    async def sources(self, mids: Sequence[int], per: int) -> dict[int, list[MemorySourceRow]]:
        """The newest ``per`` sources of each memory, newest first."""
        if not mids:
            return {}
        members, values = self._dialect.in_list("mids", mids)
        rows = await self._conn.all(
            "SELECT mid, session_id, archive_seq, message_ids, create_time FROM memory_sources"
            f" WHERE mid {members} ORDER BY mid, n DESC",
            values,
        )
        out: dict[int, list[MemorySourceRow]] = {}
        for mid, name, seq, ids, created in rows:
            found = out.setdefault(int(mid), [])
            if len(found) < per:
                found.append(
                    MemorySourceRow(
                        str(name),
                        None if seq is None else int(seq),
                        tuple(str(ids).split()),
                        float(created),
                    )
                )
        return out

    async def page(self, where: MemoryFilter, before: int | None, limit: int) -> list[MemoryRow]:
        """Newest first (by key), keys below ``before`` if given."""
        sql, params = self._where(where)
        rows = await self._conn.all(
            f"SELECT {_MEMORY}{_MEMORY_FROM}{sql} AND m.mid < :before ORDER BY m.mid DESC"
            " LIMIT :limit",
            {**params, "before": LAST if before is None else before, "limit": limit},
        )
        return [_memory(r) for r in rows]

    async def among(self, where: MemoryFilter, mids: Sequence[int]) -> list[MemoryRow]:
        """Those of the memories ``mids`` that ``where`` admits (the dense candidates of a
        hybrid search, filtered like the lexical ones)."""
        if not mids:
            return []
        sql, params = self._where(where)
        members, values = self._dialect.in_list("mids", mids)
        rows = await self._conn.all(
            f"SELECT {_MEMORY}{_MEMORY_FROM}{sql} AND m.mid {members}", {**params, **values}
        )
        return [_memory(r) for r in rows]

    async def ranked(
        self, where: MemoryFilter, words: list[str], limit: int
    ) -> list[tuple[MemoryRow, float]]:
        """The best ``limit`` memories that have any of ``words``, best first, newest first
        among equal scores."""
        if not words:
            return []
        rows: list[Row] = []
        for query in await self._match_queries("memories", words):
            rows = await self._conn.all(*self._ranked_query(where, query, limit))
            if len(rows) >= limit:
                break
        return _scored(rows)

    @property
    def ranks_in_one_query(self) -> bool:
        """``ranked`` asks one query whatever the words: the engine keeps no counts of rows
        per word to choose the cheaper words from (then ``ranking`` has a read)."""
        return self._dialect.text_index.frequencies("memories") is None

    def ranking(
        self, where: MemoryFilter, words: list[str], limit: int
    ) -> Read[list[tuple[MemoryRow, float]]] | None:
        """``ranked`` as one read, where the engine asks it with one query (no counts of
        rows per word to choose the cheaper words from); None where it may need more, or
        none (no words)."""
        if not words or (len(words) >= 2 and not self.ranks_in_one_query):
            return None
        index = self._dialect.text_index
        return Read(*self._ranked_query(where, index.query(words), limit), _scored)

    def _ranked_query(
        self, where: MemoryFilter, query: str, limit: int
    ) -> tuple[str, dict[str, Any]]:
        index = self._dialect.text_index
        sql, params = self._where(where)
        return (
            f"SELECT {_MEMORY}, {index.score('memories')} FROM memories m"
            f"{index.source('memories')} LEFT JOIN sessions s ON s.sid = m.sid"
            f"{sql} AND {index.match('memories')} ORDER BY 16 DESC, m.mid DESC"
            " LIMIT :limit",
            {**params, "query": query, "limit": limit},
        )


def _scored(rows: list[Row]) -> list[tuple[MemoryRow, float]]:
    return [(_memory(r), float(r[15])) for r in rows]
