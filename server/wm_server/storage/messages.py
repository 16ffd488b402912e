"""Stored messages and the tool calls they made (where each tool_use id was last called)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wm_core import (
    Message,
)
from wm_server.storage.codec import message_from_row, parts_to_json
from wm_server.storage.records import (
    StoredMessage,
)
from wm_server.storage.repository import LAST, Repository, may_contain
from wm_server.storage.statements import Read, Row, Write

if TYPE_CHECKING:
    pass


MESSAGE_COLUMNS = "position, message_id, role, parts_json, tokens, create_time"


def stored_message(row: Row) -> StoredMessage:
    pos, mid, role, parts, tokens, created = row
    return StoredMessage(int(pos), message_from_row(mid, role, parts, int(tokens)), created)


class MessageRepository(Repository):
    async def existing_ids(self, sid: int, ids: Sequence[str]) -> set[str]:
        members, values = self._dialect.in_list("ids", ids)
        rows = await self._conn.all(
            f"SELECT message_id FROM messages WHERE sid = :sid AND message_id {members}",
            {"sid": sid, **values},
        )
        return {str(r[0]) for r in rows}

    def inserting(self, sid: int, fresh: Sequence[tuple[int, Message]], now: float) -> Write:
        """The write that stores a batch (for ``SessionRepository.grow``)."""
        return Write(
            "INSERT INTO messages (sid, position, message_id, role, parts_json, tokens,"
            " create_time, result_ids) VALUES (:sid, :position, :id, :role, :parts, :tokens,"
            " :now, :results)",
            rows=[
                (
                    sid,
                    pos,
                    m.id,
                    m.role.value,
                    parts_to_json(m.parts),
                    m.estimated_tokens,
                    now,
                    " ".join(m.tool_result_ids()),
                )
                for pos, m in fresh
            ],
        )

    async def remove_from(self, sid: int, first: int) -> int:
        """Delete the session's messages at positions ``first`` and after; how many went."""
        return await self._conn.run(
            "DELETE FROM messages WHERE sid = :sid AND position >= :first",
            {"sid": sid, "first": first},
        )

    async def tokens_from(self, sid: int, first: int) -> list[int]:
        rows = await self._conn.all(
            "SELECT tokens FROM messages WHERE sid = :sid AND position >= :first ORDER BY position",
            {"sid": sid, "first": first},
        )
        return [int(t) for (t,) in rows]

    async def between(
        self, sid: int, first: int, last: int | None, limit: int | None = None
    ) -> list[StoredMessage]:
        """Messages at positions first..last (None: to the end), the first ``limit`` if given."""
        return await self._read(self.reading_between(sid, first, last, limit))

    def reading_archives(
        self, sid: int, seqs: Sequence[int], limit: int
    ) -> Read[dict[int, list[StoredMessage]]]:
        """The messages of the archives ``seqs`` (``between`` each one's bounds) by seq, in
        order, the first ``limit``: with a read of those archives, in one go."""
        members, values = self._dialect.in_list("seqs", seqs)

        def answer(rows: list[Row]) -> dict[int, list[StoredMessage]]:
            found: dict[int, list[StoredMessage]] = {}
            for row in rows:
                found.setdefault(int(row[-1]), []).append(stored_message(row[:-1]))
            return found

        return Read(
            f"SELECT {MESSAGE_COLUMNS}, a.seq FROM messages JOIN (SELECT seq, first_position,"
            f" last_position FROM archives WHERE sid = :sid AND seq {members}) a"
            " ON position BETWEEN a.first_position AND a.last_position WHERE sid = :sid"
            " ORDER BY a.seq, position LIMIT :limit",
            {"sid": sid, "limit": limit, **values},
            answer,
        )

    def reading_between(
        self, sid: int, first: int, last: int | None, limit: int | None = None
    ) -> Read[list[StoredMessage]]:
        """``between`` as a read."""
        return Read(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE sid = :sid"
            " AND position BETWEEN :first AND :last ORDER BY position LIMIT :limit",
            {
                "sid": sid,
                "first": first,
                "last": LAST if last is None else last,
                "limit": LAST if limit is None else limit,
            },
            lambda rows: [stored_message(r) for r in rows],
        )

    async def at(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], StoredMessage]:
        """The messages at these (sid, position) keys, in one statement (a search's hits)."""
        if not keys:
            return {}
        params: dict[str, Any] = {}
        terms = []
        for i, (sid, position) in enumerate(keys):
            terms.append(f"(sid = :s{i} AND position = :p{i})")
            params.update({f"s{i}": sid, f"p{i}": position})
        rows = await self._conn.all(
            f"SELECT sid, {MESSAGE_COLUMNS} FROM messages WHERE {' OR '.join(terms)}", params
        )
        return {(int(r[0]), int(r[1])): stored_message(r[1:]) for r in rows}

    async def user_texts_before(
        self, sid: int, first: int, before: int, limit: int
    ) -> list[StoredMessage]:
        """Up to ``limit`` user messages with a text part at positions [first, before),
        newest first: the candidates for the requests that start turns."""
        text = self._dialect.contains.format(column="parts_json", param="text")
        rows = await self._conn.all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE sid = :sid AND position >= :first"
            f" AND position < :before AND role = :user AND {text}"
            " ORDER BY position DESC LIMIT :limit",
            {
                "sid": sid,
                "first": first,
                "before": before,
                "user": "user",
                "text": '{"t":',
                "limit": limit,
            },
        )
        return [stored_message(r) for r in rows]

    async def results_between(
        self, sid: int, first: int, stop: int
    ) -> list[tuple[int, tuple[str, ...]]]:
        """(position, answered tool_use ids) of the tool results at positions [first, stop)."""
        rows = await self._conn.all(
            "SELECT position, result_ids FROM messages WHERE sid = :sid AND position >= :first"
            " AND position < :stop AND result_ids <> ''",
            {"sid": sid, "first": first, "stop": stop},
        )
        return [(int(pos), tuple(str(ids).split(" "))) for pos, ids in rows]

    async def containing(
        self, sid: int, first: int, last: int, needle: str | None
    ) -> list[Message]:
        """Messages in [first, last]; with ``needle`` only rows that may contain it (see
        ``may_contain``)."""
        where = ""
        if needle:
            where = " AND " + may_contain(self._dialect, "parts_json", "needle")
        rows = await self._conn.all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE sid = :sid"
            f" AND position BETWEEN :first AND :last{where} ORDER BY position",
            {"sid": sid, "first": first, "last": last, "needle": needle},
        )
        return [stored_message(r).message for r in rows]


class ToolCallRepository(Repository):
    def upserting(self, sid: int, calls: dict[str, int]) -> Write:
        """The write that records a batch's tool calls: the latest call with an id wins."""
        return Write(
            "INSERT INTO tool_calls (sid, tool_use_id, position) VALUES (:sid, :id, :position)"
            " ON CONFLICT (sid, tool_use_id) DO UPDATE SET position = excluded.position",
            rows=[(sid, tid, pos) for tid, pos in calls.items()],
        )

    async def remove_from(self, sid: int, first: int) -> int:
        """Forget the calls made by the messages at positions ``first`` and after."""
        return await self._conn.run(
            "DELETE FROM tool_calls WHERE sid = :sid AND position >= :first",
            {"sid": sid, "first": first},
        )

    async def positions(self, sid: int, ids: Sequence[str]) -> dict[str, int]:
        """The position of the latest call of each id (ids never called are absent)."""
        members, values = self._dialect.in_list("ids", ids)
        rows = await self._conn.all(
            f"SELECT tool_use_id, position FROM tool_calls WHERE sid = :sid AND tool_use_id {members}",
            {"sid": sid, **values},
        )
        return {str(tid): int(pos) for tid, pos in rows}
