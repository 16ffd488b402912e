"""Tool outputs stored whole, out of the messages that carried them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from wm_core import (
    ExternalOutput,
)
from wm_server.storage.records import (
    ToolOutputRecord,
)
from wm_server.storage.repository import Repository, may_contain
from wm_server.storage.statements import Row, Write

if TYPE_CHECKING:
    pass


_OUTPUT = (
    "output_id, message_id, position, part_index, tool_use_id, kind, format, size_bytes,"
    " line_count, synopsis, create_time"
)


def _tool_output(row: Row) -> ToolOutputRecord:
    oid, mid, pos, part, tool, kind, fmt, size, lines, synopsis, created, *content = row
    return ToolOutputRecord(
        str(oid),
        str(mid),
        int(pos),
        int(part),
        str(tool),
        str(kind),
        str(fmt),
        int(size),
        int(lines),
        str(synopsis),
        float(created),
        str(content[0]) if content else "",
    )


class ToolOutputRepository(Repository):
    def inserting(
        self, sid: int, outputs: Sequence[tuple[int, str, ExternalOutput]], now: float
    ) -> Write:
        """The write that stores (position, message id, output) triples whole (for
        ``SessionRepository.grow``)."""
        return Write(
            "INSERT INTO tool_outputs (sid, output_id, position, part_index, message_id,"
            " tool_use_id, kind, format, content, size_bytes, line_count, synopsis, create_time)"
            " VALUES (:sid, :id, :position, :part, :message, :tool, :kind, :format, :content,"
            " :size, :lines, :synopsis, :now)",
            rows=[
                (
                    sid,
                    o.output_id,
                    pos,
                    o.part_index,
                    mid,
                    o.tool_use_id,
                    o.kind.value,
                    o.format.value,
                    o.content,
                    len(o.content.encode()),
                    o.line_count,
                    o.synopsis,
                    now,
                )
                for pos, mid, o in outputs
            ],
        )

    async def remove_from(self, sid: int, first: int) -> int:
        """Delete the outputs taken out of the messages at positions ``first`` and after."""
        return await self._conn.run(
            "DELETE FROM tool_outputs WHERE sid = :sid AND position >= :first",
            {"sid": sid, "first": first},
        )

    async def get(self, sid: int, output_id: str) -> ToolOutputRecord | None:
        """The output with its content."""
        row = await self._conn.one(
            f"SELECT {_OUTPUT}, content FROM tool_outputs WHERE sid = :sid AND output_id = :id",
            {"sid": sid, "id": output_id},
        )
        return _tool_output(row) if row else None

    async def matching(
        self,
        sid: int,
        needle: str | None,
        only: str | None,
        after: tuple[int, int],
        limit: int,
    ) -> list[ToolOutputRecord]:
        """Up to ``limit`` outputs with their content after (position, part) ``after``, in
        order; only those that may contain ``needle`` if given (``may_contain``), only the
        output ``only`` if given."""
        where = ""
        if needle:
            where = " AND " + may_contain(self._dialect, "content", "needle")
        rows = await self._conn.all(
            f"SELECT {_OUTPUT}, content FROM tool_outputs WHERE sid = :sid"
            " AND (position > :pos OR (position = :pos AND part_index > :part))"
            f" AND (CAST(:only AS TEXT) IS NULL OR output_id = :only){where}"
            " ORDER BY position, part_index LIMIT :limit",
            {
                "sid": sid,
                "pos": after[0],
                "part": after[1],
                "only": only,
                "needle": needle,
                "limit": limit,
            },
        )
        return [_tool_output(r) for r in rows]
