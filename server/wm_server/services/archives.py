"""Archives: list them and expand one (its raw messages), in any state."""

from __future__ import annotations

import re
from collections.abc import Sequence

from wm_core import Message
from wm_server.errors import NotFound, invalid
from wm_server.services import paging, validation
from wm_server.services.sessions import find_session
from wm_server.storage.database import Database
from wm_server.storage.records import CommitRecord, WorkingMemoryRecord

# ASCII digits only (\d would accept other scripts' digits), and at most 18 of them so the
# number fits the store's 64-bit integers (longer ids once made int() or SQLite raise).
ARCHIVE_ID = re.compile(r"archive_([0-9]{3,18})")


def archive_seq(archive_id: str, field: str = "archive_id") -> int:
    match = ARCHIVE_ID.fullmatch(archive_id)
    if not match or int(match.group(1)) == 0:
        raise invalid(field, "must look like archive_001", "INVALID_FORMAT")
    return int(match.group(1))


class ArchiveService:
    def __init__(self, database: Database, *, tokens: paging.PageTokens | None = None) -> None:
        self._db = database
        self._tokens = tokens or paging.PageTokens.random()

    async def list(
        self, session_id: str, page_size: int, page_token: str
    ) -> tuple[list[CommitRecord], str]:
        sid = validation.session_id(session_id)
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
    ) -> tuple[CommitRecord, Sequence[Message], WorkingMemoryRecord | None]:
        """The archive, its raw messages and the working memory that covered it."""
        sid = validation.session_id(session_id)
        seq = archive_seq(archive_id)
        async with self._db.scanner() as uow:
            row = await find_session(uow, sid)
            records = await uow.commits.archived_after(row.sid, seq - 1, 1)
            bounds = await uow.archives.bounds(row.sid, seq)
            if not records or records[0].archive_seq != seq or bounds is None:
                raise NotFound(
                    f"archive {archive_id!r} not found in session {sid!r}",
                    reason="ARCHIVE_NOT_FOUND",
                    metadata={"session_id": sid, "archive_id": archive_id},
                )
            record = records[0]
            messages = [m.message for m in await uow.messages.between(row.sid, *bounds)]
            wm = None
            if record.wm_version:
                wm = await uow.working_memories.get(row, record.wm_version)
        return record, messages, wm
