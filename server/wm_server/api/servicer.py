"""The gRPC servicer: a thin adapter from wm.v1 messages to the application services.

Each method converts the request, calls one service method and converts the answer back;
validation and behaviour live in the services and in ``convert``. A ``ServiceError`` raised
here reaches the caller as its rich status through the interceptor, the one wrapper of every
RPC (``api.interceptors``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import empty_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from wm_core import (
    CURRENT_TURN,
    LIVE_MESSAGES,
    RECALLED_MEMORIES,
    UNCOVERED_ARCHIVES,
    WORKING_MEMORY,
    SessionSettings,
    agent_tools,
    openai_tool,
)
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.api import commit_wire, convert, session_config, stored_wire
from wm_server.api.preview_wire import preview_out
from wm_server.errors import invalid
from wm_server.services import validation
from wm_server.services.archive_search import ArchiveSearchService, HybridAnswer
from wm_server.services.archives import ArchiveService
from wm_server.services.commits import CommitService
from wm_server.services.context_assembly import ContextService
from wm_server.services.context_formats import context_format
from wm_server.services.context_recall import recall_options
from wm_server.services.extraction_preview import ExtractionPreviewService
from wm_server.services.memories import MASKABLE, MemoryService, OwnerSpec, content_in
from wm_server.services.memory_lifecycle import supersedes_in
from wm_server.services.message_cache import CACHED_FROM
from wm_server.services.sessions import SessionService
from wm_server.services.tool_outputs import ToolOutputService
from wm_server.services.user_data import UserDataService
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
        archive_search: ArchiveSearchService,
        tool_outputs: ToolOutputService,
        memories: MemoryService,
        max_message_bytes: int,
        default_config: SessionSettings = UNCONFIGURED,
        check_model: session_config.ModelCheck = lambda provider, model: None,
        preview: ExtractionPreviewService,
        user_data: UserDataService,
    ) -> None:
        self._preview = preview
        self._user_data = user_data
        self._default_config = default_config
        self._check_model = check_model
        self._tool_outputs = tool_outputs
        self._memories = memories
        self._archives = archives
        self._context = context
        self._archive_search = archive_search
        self._sessions = sessions
        self._commits = commits
        self._memory = memory
        self._max_message_bytes = max_message_bytes
        self._messages_out = stored_wire.MessagesOut(CACHED_FROM)

    # --- sessions --------------------------------------------------------------------------
    async def CreateSession(
        self, request: api.CreateSessionRequest, context: Context
    ) -> pb.Session:
        config = None
        if request.HasField("config"):
            given = session_config.partial_settings(request.config, "config", self._check_model)
            config = session_config.overlay(self._default_config, given)
        record, _ = await self._sessions.create(
            request.session_id, request.request_id, convert.fingerprint(request), config,
            request.user_id, request.agent_id,
        )  # fmt: skip
        return stored_wire.session_out(record)

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
        return stored_wire.session_out(record)

    async def GetSession(self, request: api.GetSessionRequest, context: Context) -> pb.Session:
        return stored_wire.session_out(await self._sessions.get(request.session_id))

    async def ListSessions(
        self, request: api.ListSessionsRequest, context: Context
    ) -> api.ListSessionsResponse:
        records, token = await self._sessions.list(request.page_size, request.page_token)
        return api.ListSessionsResponse(
            sessions=[stored_wire.session_out(r) for r in records], next_page_token=token
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
                stored_wire.message_out(m.message, m.position, m.create_time) for m in page.messages
            ],
            next_page_token=page.next_page_token,
        )

    async def RemoveRecentMessages(
        self, request: api.RemoveRecentMessagesRequest, context: Context
    ) -> api.RemoveRecentMessagesResponse:
        removed = await self._sessions.remove_recent(
            request.session_id, request.count, request_id=request.request_id,
            fingerprint=convert.fingerprint(request),
        )  # fmt: skip
        return api.RemoveRecentMessagesResponse(
            session_id=removed.session.session_id,
            messages=[stored_wire.message_out(m.message, m.position, m.create_time)
                      for m in removed.messages],
            message_count=removed.session.message_count,
            pending_tokens=removed.session.pending_tokens,
            live_tokens=removed.session.live_tokens,
        )  # fmt: skip

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
        return commit_wire.commit_out(
            await self._commits.get(request.session_id, request.commit_id)
        )

    async def ListCommits(
        self, request: api.ListCommitsRequest, context: Context
    ) -> api.ListCommitsResponse:
        records, token = await self._commits.list(
            request.session_id, request.page_size, request.page_token
        )
        return api.ListCommitsResponse(
            commits=[commit_wire.commit_out(r) for r in records], next_page_token=token
        )

    async def RetryCommit(self, request: api.RetryCommitRequest, context: Context) -> pb.Commit:
        record = await self._commits.retry(
            request.session_id, request.commit_id, request.request_id, convert.fingerprint(request)
        )
        return commit_wire.commit_out(record)

    # --- working memory --------------------------------------------------------------------
    async def GetWorkingMemory(
        self, request: api.GetWorkingMemoryRequest, context: Context
    ) -> pb.WorkingMemory:
        view = await self._memory.get(request.session_id, request.version)
        return commit_wire.working_memory_view_out(view)

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
            working_memory=commit_wire.working_memory_out(record),
            decisions=[commit_wire.decision_out(d.to_dict()) for d in decisions],
        )

    # --- archives --------------------------------------------------------------------------
    async def ListArchives(
        self, request: api.ListArchivesRequest, context: Context
    ) -> api.ListArchivesResponse:
        records, token = await self._archives.list(
            request.session_id, request.page_size, request.page_token
        )
        return api.ListArchivesResponse(
            archives=[commit_wire.archive_out(r) for r in records], next_page_token=token
        )

    async def GetArchive(self, request: api.GetArchiveRequest, context: Context) -> pb.Archive:
        record, page, wm = await self._archives.get(
            request.session_id, request.archive_id, request.page_size, request.page_token
        )
        archive = commit_wire.archive_out(record)
        archive.messages.extend(
            stored_wire.message_out(m.message, m.position, m.create_time) for m in page.messages
        )
        archive.next_messages_page_token = page.next_page_token
        archive.messages_start_position = page.messages[0].position if page.messages else 0
        if wm is not None:
            archive.working_memory.CopyFrom(commit_wire.working_memory_out(wm))
        return archive

    async def SearchArchives(
        self, request: api.SearchArchivesRequest, context: Context
    ) -> api.SearchArchivesResponse:
        if request.mode not in _SEARCH_MODES:
            raise invalid("mode", f"unknown search mode {request.mode}", "UNKNOWN_VALUE")
        if request.mode == api.SEARCH_MODE_HYBRID:
            return _hybrid_out(
                await self._archive_search.hybrid(
                    request.session_id,
                    request.query,
                    request.archive_id,
                    request.max_hits,
                    request.all_sessions,
                    request.user_id,
                    request.agent_id,
                    request.min_score,
                )
            )
        searches = self._archive_search
        search = searches.ranked if request.mode == api.SEARCH_MODE_RANKED else searches.search
        hits, total = await search(
            request.session_id,
            request.query,
            request.archive_id,
            request.max_hits,
            request.all_sessions,
            request.user_id,
            request.agent_id,
        )
        return api.SearchArchivesResponse(
            hits=[
                api.SearchHit(
                    session_id=match.session_id,
                    archive_id=stored_wire.archive_id(match.archive_seq),
                    message_id=match.message.id,
                    role=stored_wire.role_out(match.message.role),
                    snippet=text,
                    score=match.score,
                )
                for match, text in hits
            ],
            total_matches=total,
        )

    # --- context ---------------------------------------------------------------------------
    async def AssembleContext(
        self, request: api.AssembleContextRequest, context: Context
    ) -> api.AssembleContextResponse:
        recall = recall_options(
            request.memory_recall.enabled,
            request.memory_recall.token_budget,
            request.memory_recall.max_memories,
        )
        built = await self._context.assemble(
            request.session_id,
            request.token_budget,
            request.system_prompt,
            list(request.registered_tools.names) if request.HasField("registered_tools") else None,
            recall,
            with_anthropic_json=request.include_anthropic_json,
            fmt=context_format(request.format),
        )
        result, wm, semantic = built.context, built.working_memory, built.recall.semantic
        return api.AssembleContextResponse(
            system_prompt_addition=result.system_prompt_addition,
            messages=self._messages_out.all(result.messages),
            anthropic_messages_json=built.anthropic_json,
            estimated_tokens=result.estimated_tokens,
            reply_reserve_tokens=result.reply_reserve,
            working_memory_version=wm.version if wm else 0,
            working_memory_tokens=result.working_memory_tokens,
            trimmed_items=result.trimmed_items,
            uncovered_archive_ids=[stored_wire.archive_id(s) for s in built.uncovered],
            included_message_count=result.included_source_messages,
            dropped_message_count=result.dropped_source_messages,
            cut_parts=result.cut_parts,
            effective_token_budget=built.budget,
            recalled_memory_ids=built.recall.ids,
            memory_tokens=built.memory_tokens,
            parts=[
                api.ContextPartUsage(
                    part=_CONTEXT_PARTS[p.part],
                    needed_tokens=p.needed_tokens,
                    kept_tokens=p.kept_tokens,
                    dropped_items=p.dropped_items,
                )
                for p in result.parts
            ],
            usable_tokens=result.usable_tokens,
            rendered_json=built.rendered_json,
            semantic_recall=0 if semantic is None else int(semantic),  # type: ignore[arg-type]
        )

    async def GetToolDefinitions(
        self, request: api.GetToolDefinitionsRequest, context: Context
    ) -> api.GetToolDefinitionsResponse:
        tools = []
        for tool in agent_tools():
            definition = api.ToolDefinition(
                name=tool["name"],
                description=tool["description"],
                input_schema_json=_json(tool["input_schema"]),
            )
            if request.format in (api.TOOL_FORMAT_UNSPECIFIED, api.TOOL_FORMAT_ANTHROPIC):
                definition.anthropic_json = _json(tool)
            if request.format in (api.TOOL_FORMAT_UNSPECIFIED, api.TOOL_FORMAT_OPENAI):
                definition.openai_json = _json(openai_tool(tool))
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
            output=stored_wire.tool_output_out(page.output),
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

    # --- long-term memories ----------------------------------------------------------------
    async def SearchMemories(
        self, request: api.SearchMemoriesRequest, context: Context
    ) -> api.SearchMemoriesResponse:
        hits, status, unembedded = await self._memories.search_fused(
            _owner(request.owner),
            request.query,
            _types(request.types),
            _seconds(request, "start_time"),
            _seconds(request, "end_time"),
            request.limit,
            request.include_superseded,
            request.min_score,
        )
        return api.SearchMemoriesResponse(
            hits=[
                api.MemoryHit(
                    memory=stored_wire.memory_out(h.view),
                    score=h.score,
                    snippet=h.snippet,
                    lexical_score=h.lexical,
                    dense_score=h.dense,
                )
                for h in hits
            ],
            semantic_recall=int(status),  # type: ignore[arg-type]
            unembedded_rows=unembedded,
        )

    async def ListMemories(
        self, request: api.ListMemoriesRequest, context: Context
    ) -> api.ListMemoriesResponse:
        if request.state not in (pb.MEMORY_STATE_UNSPECIFIED, *stored_wire.MEMORY_STATES_IN):
            raise invalid("state", "unknown state")
        views, token = await self._memories.list(
            _owner(request.owner),
            _types(request.types),
            stored_wire.MEMORY_STATES_IN.get(request.state, "active"),
            request.page_size,
            request.page_token,
        )
        return api.ListMemoriesResponse(
            memories=[stored_wire.memory_out(v) for v in views], next_page_token=token
        )

    async def GetMemory(self, request: api.GetMemoryRequest, context: Context) -> pb.Memory:
        return stored_wire.memory_out(await self._memories.get(request.memory_id))

    async def CreateMemory(
        self, request: api.CreateMemoryRequest, context: Context
    ) -> api.CreateMemoryResponse:
        memory = request.memory
        content = content_in(
            stored_wire.MEMORY_TYPES_IN.get(memory.type, ""),
            memory.text,
            dict(memory.fields),
            _seconds(memory, "event_time", "memory.event_time"),
        )
        view, existed = await self._memories.create(
            _owner(request.owner), content, request.request_id, convert.fingerprint(request),
            supersedes=supersedes_in(memory.supersedes_memory_ids),
            expire_time=_seconds(memory, "expire_time", "memory.expire_time"),
        )  # fmt: skip
        return api.CreateMemoryResponse(memory=stored_wire.memory_out(view), deduplicated=existed)

    async def UpdateMemory(self, request: api.UpdateMemoryRequest, context: Context) -> pb.Memory:
        if not request.HasField("memory"):
            raise invalid("memory", "required", "REQUIRED")
        memory = request.memory
        paths = list(request.update_mask.paths) or [
            p for p in MASKABLE if p != "type" or memory.type
        ]
        unknown = sorted(set(paths) - set(MASKABLE))
        if unknown:
            raise invalid("update_mask", f"only {', '.join(MASKABLE)}; not {', '.join(unknown)}")
        checked = content_in(
            stored_wire.MEMORY_TYPES_IN.get(memory.type, "entity" if "type" not in paths else ""),
            memory.text if "text" in paths else "placeholder",
            dict(memory.fields) if "fields" in paths else {},
            _seconds(memory, "event_time", "memory.event_time"),
        )
        given: dict[str, object] = {}
        for path in paths:
            if path == "text":
                given["text"] = checked.text
            elif path == "type":
                given["type"] = checked.type
            elif path == "fields":
                given["fields"] = dict(checked.fields)
            elif path == "expire_time":
                given["expire_time"] = _seconds(memory, "expire_time", "memory.expire_time")
            else:
                given["event_time"] = checked.event_time
        view = await self._memories.update(
            memory.memory_id, given, request.reason, request.request_id,
            convert.fingerprint(request),
        )  # fmt: skip
        return stored_wire.memory_out(view)

    async def DeleteMemory(
        self, request: api.DeleteMemoryRequest, context: Context
    ) -> empty_pb2.Empty:
        await self._memories.delete(
            request.memory_id, request.request_id, convert.fingerprint(request)
        )
        return empty_pb2.Empty()

    async def PreviewMemoryExtraction(
        self, request: api.PreviewMemoryExtractionRequest, context: Context
    ) -> api.PreviewMemoryExtractionResponse:
        validation.session_id(request.session_id)
        given = (
            convert.messages_in(list(request.messages), self._max_message_bytes)
            if request.messages
            else []
        )
        found = await self._preview.preview(request.session_id, list(request.archive_ids), given)
        return preview_out(found)

    async def RetireMemory(self, request: api.RetireMemoryRequest, context: Context) -> pb.Memory:
        view = await self._memories.retire(
            request.memory_id, request.reason, request.request_id, convert.fingerprint(request)
        )
        return stored_wire.memory_out(view)

    async def PurgeUserData(
        self, request: api.PurgeUserDataRequest, context: Context
    ) -> api.PurgeUserDataResponse:
        purged = await self._user_data.purge(
            request.user_id, request.request_id, convert.fingerprint(request)
        )
        return api.PurgeUserDataResponse(
            purged_memory_count=purged.memories, purged_session_count=purged.sessions
        )


_CONTEXT_PARTS = {
    RECALLED_MEMORIES: api.CONTEXT_PART_RECALLED_MEMORIES,
    WORKING_MEMORY: api.CONTEXT_PART_WORKING_MEMORY,
    UNCOVERED_ARCHIVES: api.CONTEXT_PART_UNCOVERED_ARCHIVES,
    LIVE_MESSAGES: api.CONTEXT_PART_LIVE_MESSAGES,
    CURRENT_TURN: api.CONTEXT_PART_CURRENT_TURN,
}


def _json(value: object) -> str:
    """A tool definition's JSON on the wire: stable (sorted keys), characters as they are."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _owner(owner: api.MemoryOwner) -> OwnerSpec:
    return OwnerSpec(owner.user_id, owner.agent_id, owner.session_id)


def _types(values: Any) -> list[str]:
    """Memory types of a filter; an unknown number is INVALID_ARGUMENT."""
    names = []
    for value in values:
        if value not in stored_wire.MEMORY_TYPES_IN:
            raise invalid("types", f"unknown memory type {value}")
        names.append(stored_wire.MEMORY_TYPES_IN[value])
    return names


def _seconds(message: Any, name: str, field: str = "") -> float | None:
    """A Timestamp field a client set, as epoch seconds (None: unset); out of Timestamp's
    range is INVALID_ARGUMENT naming ``field`` (default: ``name``)."""
    if not message.HasField(name):
        return None
    stamp: Timestamp = getattr(message, name)
    return validation.timestamp_seconds(stamp.seconds, stamp.nanos, field or name)


_SEARCH_MODES = frozenset(
    {api.SEARCH_MODE_UNSPECIFIED, api.SEARCH_MODE_LITERAL, api.SEARCH_MODE_RANKED,
     api.SEARCH_MODE_HYBRID}
)  # fmt: skip


def _hybrid_out(answer: HybridAnswer) -> api.SearchArchivesResponse:
    return api.SearchArchivesResponse(
        hits=[
            api.SearchHit(
                session_id=match.session_id,
                archive_id=stored_wire.archive_id(match.archive_seq),
                message_id=match.message.id,
                role=stored_wire.role_out(match.message.role),
                snippet=text,
                score=fused.score,
                lexical_score=fused.lexical,
                dense_score=fused.dense,
            )
            for match, text, fused in answer.hits
        ],
        total_matches=answer.total,
        semantic_recall=int(answer.status),  # type: ignore[arg-type]
        unembedded_rows=answer.unembedded,
    )
