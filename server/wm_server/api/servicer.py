"""The gRPC servicer: a thin adapter from wm.v1 messages to the application services.

Each method converts the request, calls one service method and converts the answer back;
validation and behaviour live in the services and in ``convert``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import empty_pb2

from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.api import convert
from wm_server.api.handlers import server_stream, unary
from wm_server.services.sessions import SessionService

Context = grpc.aio.ServicerContext[Any, Any]


class WorkingMemoryServicer(service_grpc.WorkingMemoryServiceServicer):
    """wm.v1.WorkingMemoryService."""

    def __init__(self, *, sessions: SessionService, max_message_bytes: int) -> None:
        self._sessions = sessions
        self._max_message_bytes = max_message_bytes

    # --- sessions --------------------------------------------------------------------------
    @unary
    async def CreateSession(self, request: api.CreateSessionRequest, context: Context) -> pb.Session:
        record, _ = await self._sessions.create(request.session_id, request.request_id)
        return convert.session_out(record)

    @unary
    async def GetSession(self, request: api.GetSessionRequest, context: Context) -> pb.Session:
        return convert.session_out(await self._sessions.get(request.session_id))

    @unary
    async def ListSessions(
        self, request: api.ListSessionsRequest, context: Context
    ) -> api.ListSessionsResponse:
        records, token = await self._sessions.list(request.page_size, request.page_token)
        return api.ListSessionsResponse(
            sessions=[convert.session_out(r) for r in records], next_page_token=token
        )

    @unary
    async def DeleteSession(
        self, request: api.DeleteSessionRequest, context: Context
    ) -> empty_pb2.Empty:
        await self._sessions.delete(request.session_id, request.request_id)
        return empty_pb2.Empty()

    @unary
    async def AddMessages(
        self, request: api.AddMessagesRequest, context: Context
    ) -> api.AddMessagesResponse:
        from wm_server.services import validation

        validation.session_id(request.session_id)
        messages = convert.messages_in(list(request.messages), self._max_message_bytes)
        result = await self._sessions.add_messages(
            request.session_id,
            messages,
            create_if_missing=request.create_session_if_missing,
            request_id=request.request_id,
        )
        return api.AddMessagesResponse(
            session_id=result.session.session_id,
            message_count=result.session.message_count,
            pending_tokens=result.session.pending_tokens,
            added_message_ids=result.added_ids,
            duplicate_message_ids=result.duplicate_ids,
            session_created=result.created,
        )


__all__ = ["AsyncIterator", "WorkingMemoryServicer", "server_stream"]
