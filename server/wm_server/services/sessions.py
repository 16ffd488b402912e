"""Sessions and their messages: create, read, list, delete, add a batch."""

from __future__ import annotations

from collections.abc import Sequence

from wm_core import Message
from wm_server.services import paging, validation
from wm_server.storage.port import Store
from wm_server.storage.records import AddResult, SessionRecord
from wm_server.tenancy import current_tenant


class SessionService:
    """Use cases on sessions. Validation of ids and pages happens here, before the store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def create(self, session_id: str, request_id: str) -> tuple[SessionRecord, bool]:
        sid = validation.session_id(session_id) if session_id else validation.new_session_id()
        rid = validation.request_id(request_id)
        return await self._store.create_session(current_tenant(), sid, rid)

    async def get(self, session_id: str) -> SessionRecord:
        return await self._store.get_session(current_tenant(), validation.session_id(session_id))

    async def list(self, page_size: int, page_token: str) -> tuple[list[SessionRecord], str]:
        size = paging.page_size(page_size)
        cursor = paging.decode("sessions", page_token)
        records, next_key = await self._store.list_sessions(current_tenant(), size, cursor)
        return records, paging.encode("sessions", next_key) if next_key is not None else ""

    async def delete(self, session_id: str, request_id: str) -> None:
        sid = validation.session_id(session_id)
        rid = validation.request_id(request_id)
        tenant = current_tenant()
        if rid and await self._store.remembered(tenant, f"DeleteSession/{sid}", rid) is not None:
            return
        await self._store.delete_session(tenant, sid)
        if rid:
            await self._store.remember(tenant, f"DeleteSession/{sid}", rid, "{}")

    async def add_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        create_if_missing: bool,
        request_id: str,
    ) -> AddResult:
        sid = validation.session_id(session_id)
        rid = validation.request_id(request_id)
        return await self._store.add_messages(
            current_tenant(),
            sid,
            messages,
            create_if_missing=create_if_missing,
            request_id=rid,
            make_id=validation.new_message_id,
        )
