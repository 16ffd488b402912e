"""Archives: list them and expand one (its raw messages), in any state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wm_core import Message, TextPart, ToolUsePart, archive_number
from wm_server.errors import NotFound, invalid
from wm_server.services import paging
from wm_server.services.sessions import find_session
from wm_server.storage.database import Database
from wm_server.storage.records import CommitRecord, StoredMessage, WorkingMemoryRecord
from wm_server.storage.unit_of_work import UnitOfWork


def archive_seq(archive_id: str, field: str = "archive_id") -> int:
    seq = archive_number(archive_id)
    if seq is None:
        raise invalid(field, "must look like archive_001", "INVALID_FORMAT")
    return seq


# The content of one page of messages: half of the 16 MiB response limit, leaving room for
# the protobuf framing, the working memory and the decisions that travel with the archive.
PAGE_BYTES = 8 * 1024 * 1024
_READ_CHUNK = 200  # rows read per query while a page fills


def message_bytes(message: Message) -> int:
    """What a message adds to a response, at most: its text, tool ids, names, inputs and
    outputs in UTF-8, plus a fixed allowance for the framing of each part."""
    size = len(message.id) + 64
    for part in message.parts:
        size += 16
        if isinstance(part, TextPart):
            size += len(part.text.encode())
        elif isinstance(part, ToolUsePart):
            size += len(part.id) + len(part.name.encode()) + len(part.input_json.encode())
        else:
            size += len(part.tool_use_id) + len(part.content.encode())
    return size


@dataclass(frozen=True, slots=True)
class ArchivePage:
    messages: tuple[StoredMessage, ...]
    next_page_token: str


async def _page(
    uow: UnitOfWork,
    sid: int,
    bounds: tuple[int, int],
    start: int,
    count: int | None,
    next_token: Callable[[int], str],
) -> ArchivePage:
    """Messages from ``start`` within ``bounds``: at most ``count`` and PAGE_BYTES (at least
    one), read in chunks so a huge archive is never loaded whole."""
    first, last = bounds
    if not first <= start <= last + 1:
        raise paging.not_a_token()
    taken: list[StoredMessage] = []
    size = 0
    position = start
    while position <= last and (count is None or len(taken) < count):
        want = _READ_CHUNK if count is None else min(_READ_CHUNK, count - len(taken))
        chunk = await uow.messages.between(sid, position, last, want)
        if not chunk:
            break
        for item in chunk:
            weight = message_bytes(item.message)
            if taken and size + weight > PAGE_BYTES:
                return ArchivePage(tuple(taken), next_token(item.position))
            taken.append(item)
            size += weight
        position = chunk[-1].position + 1
    more = position <= last
    token = next_token(position) if more and taken else ""
    return ArchivePage(tuple(taken), token)


class ArchiveService:
    def __init__(self, database: Database, *, tokens: paging.PageTokens) -> None:
        self._db = database
        self._tokens = tokens

    async def list(
        self, session_id: str, page_size: int, page_token: str
    ) -> tuple[list[CommitRecord], str]:
        sid = session_id
        size = paging.page_size(page_size)
        after = self._tokens.decode("archives", page_token, sid) or 0
        async with self._db.reader() as uow:
            row = await find_session(uow, sid)
            records = await uow.commits.archived_after(row.sid, after, size + 1)
        more = len(records) > size
        records = records[:size]
        token = self._tokens.encode("archives", records[-1].archive_seq or 0, sid) if more else ""
        return records, token

    async def get(
        self, session_id: str, archive_id: str
    ) -> tuple[CommitRecord, WorkingMemoryRecord | None]:
        """The archive and the working memory that covered it (its messages: :meth:`messages`)."""
        sid = session_id
        seq = archive_seq(archive_id)
        async with self._db.reader() as uow:
            row = await find_session(uow, sid)
            record, _ = await _archive(uow, row.sid, sid, seq, archive_id)
            wm = None
            if record.wm_version:
                wm = await uow.working_memories.get(row, record.wm_version)
        return record, wm

    async def messages(
        self, session_id: str, archive_id: str, page_size: int, page_token: str
    ) -> ArchivePage:
        """One page of an archive's raw messages, paged by count and by bytes."""
        sid = session_id
        seq = archive_seq(archive_id)
        if page_size < 0:
            raise invalid("page_size", "must not be negative")
        count = min(page_size, paging.MAX_PAGE_SIZE) if page_size else None
        cursor = self._tokens.decode(f"archive/{seq}", page_token, sid)
        async with self._db.scanner() as uow:
            row = await find_session(uow, sid)
            _, bounds = await _archive(uow, row.sid, sid, seq, archive_id)
            return await _page(
                uow, row.sid, bounds, cursor or bounds[0], count,
                lambda position: self._tokens.encode(f"archive/{seq}", position, sid),
            )  # fmt: skip

    async def live(self, session_id: str, page_size: int, page_token: str) -> ArchivePage:
        """One page of the session's live messages (paged like an archive: by count and by
        bytes); a cursor that archiving has passed continues from the first live message."""
        sid = session_id
        if page_size < 0:
            raise invalid("page_size", "must not be negative")
        count = min(page_size, paging.MAX_PAGE_SIZE) if page_size else None
        cursor = self._tokens.decode("messages", page_token, sid)
        async with self._db.scanner() as uow:
            row = await find_session(uow, sid)
            if row.next_position <= row.first_live:
                return ArchivePage((), "")
            bounds = (row.first_live, row.next_position - 1)
            start = min(max(cursor or row.first_live, row.first_live), bounds[1] + 1)
            if start > bounds[1]:
                return ArchivePage((), "")
            return await _page(
                uow, row.sid, bounds, start, count,
                lambda position: self._tokens.encode("messages", position, sid),
            )  # fmt: skip


async def _archive(
    uow: UnitOfWork, row_sid: int, sid: str, seq: int, archive_id: str
) -> tuple[CommitRecord, tuple[int, int]]:
    """The commit that made archive ``seq`` of the session and the archive's positions, or
    NOT_FOUND (ARCHIVE_NOT_FOUND)."""
    records = await uow.commits.archived_after(row_sid, seq - 1, 1)
    bounds = await uow.archives.bounds(row_sid, seq)
    if not records or records[0].archive_seq != seq or bounds is None:
        raise NotFound(
            f"archive {archive_id!r} not found in session {sid!r}",
            reason="ARCHIVE_NOT_FOUND",
            metadata={"session_id": sid, "archive_id": archive_id},
        )
    return records[0], bounds
