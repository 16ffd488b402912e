"""The gRPC servicer: a thin adapter from wm.v1 messages to the application services.

Each method converts the request, calls one service method and converts the answer back;
validation and behaviour live in the services and in ``convert``. A ``ServiceError`` raised
here reaches the caller as its rich status through the interceptor, the one wrapper of every
RPC (``api.interceptors``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import empty_pb2

from wm_core import SessionSettings, anthropic_json
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server import wire
from wm_server.api import convert, session_config
from wm_server.errors import invalid
from wm_server.services import validation
from wm_server.services.archives import ArchiveService
from wm_server.services.commits import CommitService
from wm_server.services.context import (
    CACHED_FROM,
    ContextService,
    as_json,
    openai_shape,
    tool_definitions,
)
from wm_server.services.sessions import SessionService
from wm_server.services.tool_outputs import ToolOutputService
from wm_server.services.working_memory import WorkingMemoryService
from wm_server.storage.records import UNCONFIGURED

Context = grpc.aio.ServicerContext[Any, Any]


class WorkingMemoryServicer(service_grpc.WorkingMemoryServiceServicer):
    """wm.v1.WorkingMemoryService."""

    def __init__(
        self,
        *,
        sessions: SessionService,
        commits: CommitService,
        memory: WorkingMemoryService,
        archives: ArchiveService,
        context: ContextService,
        tool_outputs: ToolOutputService,
        max_message_bytes: int,
        default_config: SessionSettings = UNCONFIGURED,
        check_model: session_config.ModelCheck = lambda provider, model: None,
    ) -> None:
        self._default_config = default_config
        self._check_model = check_model
        self._tool_outputs = tool_outputs
        self._archives = archives
        self._context = context
        self._sessions = sessions
        self._commits = commits
        self._memory = memory
        self._max_message_bytes = max_message_bytes
        self._messages_out = wire.MessagesOut(CACHED_FROM)

    # --- sessions --------------------------------------------------------------------------
    async def CreateSession(
        self, request: api.CreateSessionRequest, context: Context
    ) -> pb.Session:
        config = None
        if request.HasField("config"):
            given = session_config.partial_settings(request.config, "config", self._check_model)
            config = session_config.overlay(self._default_config, given)
        record, _ = await self._sessions.create(
            request.session_id, request.request_id, convert.fingerprint(request), config
        )
        return wire.session_out(record)

    async def UpdateSession(
        self, request: api.UpdateSessionRequest, context: Context
    ) -> pb.Session:
        if not request.HasField("session"):
            raise invalid("session", "required", "REQUIRED")
        paths = list(request.update_mask.paths)
        update = session_config.partial_settings(
            request.session.config, "session.config", self._check_model
        )
        default = self._default_config

        def change(current: SessionSettings) -> SessionSettings:
            return session_config.masked(current, update, default, paths)

        session_config.masked(default, update, default, paths)  # a bad path fails before I/O
        record = await self._sessions.update_config(
            request.session.session_id, change, request.request_id, convert.fingerprint(request)
        )
        return wire.session_out(record)

    async def GetSession(self, request: api.GetSessionRequest, context: Context) -> pb.Session:
        return wire.session_out(await self._sessions.get(request.session_id))

    async def ListSessions(
        self, request: api.ListSessionsRequest, context: Context
    ) -> api.ListSessionsResponse:
        records, token = await self._sessions.list(request.page_size, request.page_token)
        return api.ListSessionsResponse(
            sessions=[wire.session_out(r) for r in records], next_page_token=token
        )

    async def DeleteSession(
        self, request: api.DeleteSessionRequest, context: Context
    ) -> empty_pb2.Empty:
        await self._sessions.delete(
            request.session_id, request.request_id, convert.fingerprint(request)
        )
        return empty_pb2.Empty()

    async def AddMessages(
        self, request: api.AddMessagesRequest, context: Context
    ) -> api.AddMessagesResponse:
        validation.session_id(request.session_id)
        messages = convert.messages_in(list(request.messages), self._max_message_bytes)
        result = await self._sessions.add_messages(
            request.session_id,
            messages,
            create_if_missing=request.create_session_if_missing,
            request_id=request.request_id,
            fingerprint=convert.fingerprint(request),
        )
        return api.AddMessagesResponse(
            session_id=result.session.session_id,
            message_count=result.session.message_count,
            pending_tokens=result.session.pending_tokens,
            added_message_ids=result.added_ids,
            duplicate_message_ids=result.duplicate_ids,
            session_created=result.created,
            auto_commit_id=result.auto_commit_id,
        )

    async def ListMessages(
        self, request: api.ListMessagesRequest, context: Context
    ) -> api.ListMessagesResponse:
        page = await self._archives.live(request.session_id, request.page_size, request.page_token)
        return api.ListMessagesResponse(
            messages=[
                wire.message_out(m.message, m.position, m.create_time) for m in page.messages
            ],
            next_page_token=page.next_page_token,
        )

    # --- commits ---------------------------------------------------------------------------
    async def Commit(
        self, request: api.CommitRequest, context: Context
    ) -> AsyncIterator[pb.CommitEvent]:
        _, stream = await self._commits.commit(
            request.session_id,
            request.keep_recent_count,
            request.request_id,
            convert.fingerprint(request),
            request.keep_recent_turns,
        )
        async for payload in stream:
            yield pb.CommitEvent.FromString(payload)

    async def Compact(
        self, request: api.CompactRequest, context: Context
    ) -> AsyncIterator[pb.CommitEvent]:
        _, stream = await self._commits.commit(
            request.session_id, 0, request.request_id, convert.fingerprint(request)
        )
        async for payload in stream:
            yield pb.CommitEvent.FromString(payload)

    async def WatchCommit(
        self, request: api.WatchCommitRequest, context: Context
    ) -> AsyncIterator[pb.CommitEvent]:
        validation.session_id(request.session_id)
        async for payload in self._commits.watch(
            request.session_id, request.commit_id, request.after_sequence
        ):
            yield pb.CommitEvent.FromString(payload)

    async def GetCommit(self, request: api.GetCommitRequest, context: Context) -> pb.Commit:
        return wire.commit_out(await self._commits.get(request.session_id, request.commit_id))

    async def ListCommits(
        self, request: api.ListCommitsRequest, context: Context
    ) -> api.ListCommitsResponse:
        records, token = await self._commits.list(
            request.session_id, request.page_size, request.page_token
        )
        return api.ListCommitsResponse(
            commits=[wire.commit_out(r) for r in records], next_page_token=token
        )

    async def RetryCommit(self, request: api.RetryCommitRequest, context: Context) -> pb.Commit:
        record = await self._commits.retry(
            request.session_id, request.commit_id, request.request_id, convert.fingerprint(request)
        )
        return wire.commit_out(record)

    # --- working memory --------------------------------------------------------------------
    async def GetWorkingMemory(
        self, request: api.GetWorkingMemoryRequest, context: Context
    ) -> pb.WorkingMemory:
        view = await self._memory.get(request.session_id, request.version)
        return wire.working_memory_view_out(view)

    async def ApplyWorkingMemoryOps(
        self, request: api.ApplyWorkingMemoryOpsRequest, context: Context
    ) -> api.ApplyWorkingMemoryOpsResponse:
        validation.session_id(request.session_id)
        ops = convert.ops_in(list(request.ops))
        record, decisions = await self._memory.apply(
            request.session_id,
            ops,
            request.expected_version,
            request.request_id,
            convert.fingerprint(request),
        )
        return api.ApplyWorkingMemoryOpsResponse(
            working_memory=wire.working_memory_out(record),
            decisions=[wire.decision_out(d.to_dict()) for d in decisions],
        )

    # --- archives --------------------------------------------------------------------------
    async def ListArchives(
        self, request: api.ListArchivesRequest, context: Context
    ) -> api.ListArchivesResponse:
        records, token = await self._archives.list(
            request.session_id, request.page_size, request.page_token
        )
        return api.ListArchivesResponse(
            archives=[wire.archive_out(r) for r in records], next_page_token=token
        )

    async def GetArchive(self, request: api.GetArchiveRequest, context: Context) -> pb.Archive:
        record, page, wm = await self._archives.get(
            request.session_id, request.archive_id, request.page_size, request.page_token
        )
        archive = wire.archive_out(record)
        archive.messages.extend(
            wire.message_out(m.message, m.position, m.create_time) for m in page.messages
        )
        archive.next_messages_page_token = page.next_page_token
        archive.messages_start_position = page.messages[0].position if page.messages else 0
        if wm is not None:
            archive.working_memory.CopyFrom(wire.working_memory_out(wm))
        return archive

    async def SearchArchives(
        self, request: api.SearchArchivesRequest, context: Context
    ) -> api.SearchArchivesResponse:
        hits, total = await self._context.search(
            request.session_id,
            request.query,
            request.archive_id,
            request.max_hits,
            request.all_sessions,
        )
        return api.SearchArchivesResponse(
            hits=[
                api.SearchHit(
                    session_id=match.session_id,
                    archive_id=wire.archive_id(match.archive_seq),
                    message_id=match.message.id,
                    role=wire.role_out(match.message.role),
                    snippet=text,
                )
                for match, text in hits
            ],
            total_matches=total,
        )

    # --- context ---------------------------------------------------------------------------
    async def AssembleContext(
        self, request: api.AssembleContextRequest, context: Context
    ) -> api.AssembleContextResponse:
        result, wm, uncovered, budget = await self._context.assemble(
            request.session_id,
            request.token_budget,
            request.system_prompt,
            request.include_anthropic_json,
            list(request.registered_tools.names) if request.HasField("registered_tools") else None,
        )
        return api.AssembleContextResponse(
            system_prompt_addition=result.system_prompt_addition,
            messages=self._messages_out.all(result.messages),
            anthropic_messages_json=(
                anthropic_json(result.messages) if request.include_anthropic_json else ""
            ),
            estimated_tokens=result.estimated_tokens,
            reply_reserve_tokens=result.reply_reserve,
            working_memory_version=wm.version if wm else 0,
            working_memory_tokens=result.working_memory_tokens,
            trimmed_items=result.trimmed_items,
            uncovered_archive_ids=[wire.archive_id(s) for s in uncovered],
            included_message_count=result.included_source_messages,
            dropped_message_count=result.dropped_source_messages,
            cut_parts=result.cut_parts,
            effective_token_budget=budget,
        )

    async def GetToolDefinitions(
        self, request: api.GetToolDefinitionsRequest, context: Context
    ) -> api.GetToolDefinitionsResponse:
        tools = []
        for tool in tool_definitions():
            definition = api.ToolDefinition(
                name=tool["name"],
                description=tool["description"],
                input_schema_json=as_json(tool["input_schema"]),
            )
            if request.format in (api.TOOL_FORMAT_UNSPECIFIED, api.TOOL_FORMAT_ANTHROPIC):
                definition.anthropic_json = as_json(tool)
            if request.format in (api.TOOL_FORMAT_UNSPECIFIED, api.TOOL_FORMAT_OPENAI):
                definition.openai_json = as_json(openai_shape(tool))
            tools.append(definition)
        return api.GetToolDefinitionsResponse(tools=tools)

    # --- tool outputs ----------------------------------------------------------------------
    async def GetToolOutput(
        self, request: api.GetToolOutputRequest, context: Context
    ) -> api.GetToolOutputResponse:
        which = request.WhichOneof("range") or "lines"
        if which == "bytes":
            start, count = request.bytes.offset, request.bytes.length
        else:
            start, count = request.lines.start, request.lines.count
        page = await self._tool_outputs.read(
            request.session_id, request.output_id, which, start, count, request.page_token
        )
        return api.GetToolOutputResponse(
            output=wire.tool_output_out(page.output),
            content=page.content,
            start_line=page.start_line,
            line_count=page.line_count,
            start_byte=page.start_byte,
            byte_count=page.byte_count,
            next_page_token=page.next_page_token,
        )

    async def SearchToolOutputs(
        self, request: api.SearchToolOutputsRequest, context: Context
    ) -> api.SearchToolOutputsResponse:
        hits, total = await self._tool_outputs.search(
            request.session_id, request.query, request.output_id, request.max_hits
        )
        return api.SearchToolOutputsResponse(
            hits=[
                api.ToolOutputHit(
                    output_id=h.output_id, message_id=h.message_id, line=h.line, snippet=h.snippet
                )
                for h in hits
            ],
            total_matches=total,
        )
