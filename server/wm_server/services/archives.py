"""Archives: list them and expand one (its raw messages), in any state."""

from __future__ import annotations

import re

from wm_core import Message
from wm_server.errors import NotFound, invalid
from wm_server.services import paging, validation
from wm_server.storage.port import Store
from wm_server.storage.records import CommitRecord, WorkingMemoryRecord
from wm_server.tenancy import current_tenant

# ASCII digits only (\d would accept other scripts' digits), and at most 18 of them so the
# number fits the store's 64-bit integers (longer ids once made int() or SQLite raise).
ARCHIVE_ID = re.compile(r"archive_([0-9]{3,18})")


def archive_seq(archive_id: str, field: str = "archive_id") -> int:
    match = ARCHIVE_ID.fullmatch(archive_id)
    if not match or int(match.group(1)) == 0:
        raise invalid(field, "must look like archive_001", "INVALID_FORMAT")
    return int(match.group(1))


class ArchiveService:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def list(
        self, session_id: str, page_size: int, page_token: str
    ) -> tuple[list[CommitRecord], str]:
        sid = validation.session_id(session_id)
        size = paging.page_size(page_size)
        after = paging.decode("archives", page_token) or 0
        records = await self._store.list_archives(current_tenant(), sid, size + 1, after)
        more = len(records) > size
        records = records[:size]
        token = paging.encode("archives", records[-1].archive_seq or 0) if more else ""
        return records, token

    async def get(
        self, session_id: str, archive_id: str
    ) -> tuple[CommitRecord, list[Message], WorkingMemoryRecord | None]:
        sid = validation.session_id(session_id)
        seq = archive_seq(archive_id)
        tenant = current_tenant()
        records = await self._store.list_archives(tenant, sid, 1, seq - 1)
        if not records or records[0].archive_seq != seq:
            raise NotFound(
                f"archive {archive_id!r} not found in session {sid!r}",
                reason="ARCHIVE_NOT_FOUND",
                metadata={"session_id": sid, "archive_id": archive_id},
            )
        record = records[0]
        messages = await self._store.archive_messages(tenant, sid, seq)
        wm = None
        if record.wm_version:
            wm = await self._store.get_working_memory(tenant, sid, record.wm_version)
        return record, messages, wm
