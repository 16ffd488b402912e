"""The gRPC servicer: a thin adapter from wm.v1 messages to the application services.

Each method converts the request, calls one service method and converts the answer back;
validation and behaviour live in the services and in ``convert``. A ``ServiceError`` raised
here reaches the caller as its rich status through the interceptor, the one wrapper of every
RPC (``api.interceptors``).

Its length follows the contract's, about 17 lines an RPC for 32 RPCs: gRPC registers one
servicer class per service, so the adapters stay together here rather than in mixins read
apart; what is not one RPC's own adapting (conversions, the wire form of stored records)
lives in ``convert``, ``stored_wire`` and ``commit_wire``.
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
    openai_responses_tool,
    openai_tool,
)
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.api import commit_wire, convert, legacy_events, names, session_config, stored_wire
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
from wm_server.services.memories import MASKABLE, MemoryService, changes_in, content_in
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
        given_session = request.session
        config = None
        if given_session.HasField("config"):
            given = session_config.partial_settings(
                given_session.config, "session.config", self._check_model
            )
            config = session_config.overlay(self._default_config, given)
        record, _ = await self._sessions.create(
            request.session_id, request.request_id, convert.fingerprint(request), config,
            given_session.user_id, given_session.agent_id,
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
            names.session_id(request.session.name, "session.name"), change, request.request_id,
            convert.fingerprint(request),
        )  # fmt: skip
        return stored_wire.session_out(record)

    async def GetSession(self, request: api.GetSessionRequest, context: Context) -> pb.Session:
        return stored_wire.session_out(await self._sessions.get(names.session_id(request.name)))

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
            names.session_id(request.name), request.request_id, convert.fingerprint(request)
        )
        return empty_pb2.Empty()

    async def AddMessages(
        self, request: api.AddMessagesRequest, context: Context
    ) -> api.AddMessagesResponse:
        session_id = names.session_id(request.parent, "parent")
        messages = convert.messages_in(list(request.messages), self._max_message_bytes)
        result = await self._sessions.add_messages(
            session_id,
            messages,
            create_if_missing=request.create_session_if_missing,
            request_id=request.request_id,
            fingerprint=convert.fingerprint(request),
        )
        return api.AddMessagesResponse(
            session=names.session(result.session.session_id),
            message_count=result.session.message_count,
            pending_tokens=result.session.pending_tokens,
            added_message_ids=result.added_ids,
            duplicate_message_ids=result.duplicate_ids,
            session_created=result.created,
            auto_commit=names.commit(result.session.session_id, result.auto_commit_id or ""),
        )

    async def ListMessages(
        self, request: api.ListMessagesRequest, context: Context
    ) -> api.ListMessagesResponse:
        if "/archives/" in request.parent:
            session_id, archive_id = names.archive_ids(request.parent, "parent")
            page = await self._archives.messages(
                session_id, archive_id, request.page_size, request.page_token
            )
        else:
            session_id = names.session_id(request.parent, "parent")
            page = await self._archives.live(session_id, request.page_size, request.page_token)
        return api.ListMessagesResponse(
            messages=[
                stored_wire.message_out(m.message, session_id, m.position, m.create_time)
                for m in page.messages
            ],
            next_page_token=page.next_page_token,
        )

    async def RemoveRecentMessages(
        self, request: api.RemoveRecentMessagesRequest, context: Context
    ) -> api.RemoveRecentMessagesResponse:
        session_id = names.session_id(request.parent, "parent")
        removed = await self._sessions.remove_recent(
            session_id, request.count, request_id=request.request_id,
            fingerprint=convert.fingerprint(request),
        )  # fmt: skip
        return api.RemoveRecentMessagesResponse(
            session=request.parent,
            messages=[stored_wire.message_out(m.message, session_id, m.position, m.create_time)
                      for m in removed.messages],
            message_count=removed.session.message_count,
            pending_tokens=removed.session.pending_tokens,
            live_tokens=removed.session.live_tokens,
        )  # fmt: skip

    # --- commits ---------------------------------------------------------------------------
    async def CreateCommit(self, request: api.CreateCommitRequest, context: Context) -> pb.Commit:
        record = await self._commits.commit(
            names.session_id(request.parent, "parent"),
            request.keep_recent_count,
            request.request_id,
            convert.fingerprint(request),
            request.keep_recent_turns,
        )
        return commit_wire.commit_out(record)

    async def CompactSession(
        self, request: api.CompactSessionRequest, context: Context
    ) -> pb.Commit:
        record = await self._commits.commit(
            names.session_id(request.name), 0, request.request_id, convert.fingerprint(request)
        )
        return commit_wire.commit_out(record)

    async def WatchCommit(
        self, request: api.WatchCommitRequest, context: Context
    ) -> AsyncIterator[pb.CommitEvent]:
        session_id, commit_id = names.commit_ids(request.name)
        async for payload, terminal in self._commits.watch(
            session_id, commit_id, request.after_sequence
        ):
            event = pb.CommitEvent.FromString(payload)
            if legacy_events.is_legacy(event):
                event = legacy_events.upgraded(event, session_id)
            if event.terminal != terminal:
                event.terminal = terminal
            yield event

    async def GetCommit(self, request: api.GetCommitRequest, context: Context) -> pb.Commit:
        return commit_wire.commit_out(await self._commits.get(*names.commit_ids(request.name)))

    async def ListCommits(
        self, request: api.ListCommitsRequest, context: Context
    ) -> api.ListCommitsResponse:
        records, token = await self._commits.list(
            names.session_id(request.parent, "parent"), request.page_size, request.page_token
        )
        return api.ListCommitsResponse(
            commits=[commit_wire.commit_out(r) for r in records], next_page_token=token
        )

    async def RetryCommit(self, request: api.RetryCommitRequest, context: Context) -> pb.Commit:
        session_id, commit_id = names.commit_ids(request.name)
        record = await self._commits.retry(
            session_id, commit_id, request.request_id, convert.fingerprint(request)
        )
        return commit_wire.commit_out(record)

    # --- working memory --------------------------------------------------------------------
    async def GetWorkingMemory(
        self, request: api.GetWorkingMemoryRequest, context: Context
    ) -> pb.WorkingMemory:
        view = await self._memory.get(*names.working_memory_version(request.name))
        return commit_wire.working_memory_view_out(view)

    async def ApplyWorkingMemoryOps(
        self, request: api.ApplyWorkingMemoryOpsRequest, context: Context
    ) -> api.ApplyWorkingMemoryOpsResponse:
        session_id = names.session_id(request.parent, "parent")
        ops = convert.ops_in(list(request.ops))
        record, decisions = await self._memory.apply(
            session_id,
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
            names.session_id(request.parent, "parent"), request.page_size, request.page_token
        )
        return api.ListArchivesResponse(
            archives=[commit_wire.archive_out(r) for r in records], next_page_token=token
        )

    async def GetArchive(self, request: api.GetArchiveRequest, context: Context) -> pb.Archive:
        record, wm = await self._archives.get(*names.archive_ids(request.name))
        archive = commit_wire.archive_out(record)
        if wm is not None:
            archive.working_memory.CopyFrom(commit_wire.working_memory_out(wm))
        return archive

    async def SearchArchives(
        self, request: api.SearchArchivesRequest, context: Context
    ) -> api.SearchArchivesResponse:
        session_id, all_sessions = names.search_scope(request.parent)
        archive_id = names.archive_in(request.archive, session_id, "archive")
        if request.mode == api.SEARCH_MODE_HYBRID:
            return _hybrid_out(
                await self._archive_search.hybrid(
                    session_id,
                    request.query,
                    archive_id,
                    request.page_size,
                    all_sessions,
                    request.user_id,
                    request.agent_id,
                    request.min_score,
                )
            )
        searches = self._archive_search
        search = searches.ranked if request.mode == api.SEARCH_MODE_RANKED else searches.search
        hits, total = await search(
            session_id,
            request.query,
            archive_id,
            request.page_size,
            all_sessions,
            request.user_id,
            request.agent_id,
        )
        return api.SearchArchivesResponse(
            hits=[
                api.SearchHit(
                    archive=names.archive(match.session_id, match.archive_seq),
                    message=names.message(match.session_id, match.message.id),
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
            request.memory_recall.page_size,
        )
        session_id = names.session_id(request.name)
        built = await self._context.assemble(
            session_id,
            request.token_budget,
            request.system_prompt,
            list(request.registered_tools.names) if request.HasField("registered_tools") else None,
            recall,
            fmt=context_format(request.format),
        )
        result, wm, semantic = built.context, built.working_memory, built.recall.semantic
        return api.AssembleContextResponse(
            system_prompt_addition=result.system_prompt_addition,
            messages=self._messages_out.all(result.messages, session_id),
            estimated_tokens=result.estimated_tokens,
            reply_reserve_tokens=result.reply_reserve,
            working_memory_version=wm.version if wm else 0,
            working_memory_tokens=result.working_memory_tokens,
            trimmed_items=result.trimmed_items,
            uncovered_archives=[names.archive(session_id, s) for s in built.uncovered],
            included_message_count=result.included_source_messages,
            dropped_message_count=result.dropped_source_messages,
            cut_parts=result.cut_parts,
            effective_token_budget=built.budget,
            recalled_memories=[names.memory(m) for m in built.recall.ids],
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
            if request.format == api.TOOL_FORMAT_ANTHROPIC_MESSAGES:
                definition.rendered_json = _json(tool)
            elif request.format == api.TOOL_FORMAT_OPENAI_CHAT_COMPLETIONS:
                definition.rendered_json = _json(openai_tool(tool))
            elif request.format == api.TOOL_FORMAT_OPENAI_RESPONSES:
                definition.rendered_json = _json(openai_responses_tool(tool))
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
        session_id, output_id = names.tool_output_ids(request.name)
        page = await self._tool_outputs.read(
            session_id, output_id, which, start, count, request.page_token
        )
        return api.GetToolOutputResponse(
            tool_output=stored_wire.tool_output_out(page.output, session_id),
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
        session_id = names.session_id(request.parent, "parent")
        output_id = (
            names.tool_output_ids(request.tool_output, "tool_output")[1]
            if request.tool_output
            else ""
        )
        hits, total = await self._tool_outputs.search(
            session_id, request.query, output_id, request.page_size
        )
        return api.SearchToolOutputsResponse(
            hits=[
                api.ToolOutputHit(
                    tool_output=names.tool_output(session_id, h.output_id),
                    message=names.message(session_id, h.message_id),
                    line=h.line,
                    snippet=h.snippet,
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
            names.owner_in(request.owner),
            request.query,
            _types(request.types),
            _seconds(request, "start_time"),
            _seconds(request, "end_time"),
            request.page_size,
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
        views, token = await self._memories.list(
            names.owner_in(request.owner),
            _types(request.types),
            stored_wire.MEMORY_STATES_IN.get(request.state, "active"),
            request.page_size,
            request.page_token,
        )
        return api.ListMemoriesResponse(
            memories=[stored_wire.memory_out(v) for v in views], next_page_token=token
        )

    async def GetMemory(self, request: api.GetMemoryRequest, context: Context) -> pb.Memory:
        return stored_wire.memory_out(await self._memories.get(names.memory_id(request.name)))

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
            names.owner_in(request.owner), content, request.request_id,
            convert.fingerprint(request),
            supersedes=supersedes_in(names.memory_ids(list(memory.supersedes), "memory.supersedes")),
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
        given = changes_in(
            paths,
            stored_wire.MEMORY_TYPES_IN.get(memory.type, ""),
            memory.text,
            dict(memory.fields),
            _seconds(memory, "event_time", "memory.event_time") if "event_time" in paths else None,
            _seconds(memory, "expire_time", "memory.expire_time")
            if "expire_time" in paths
            else None,
        )
        view = await self._memories.update(
            names.memory_id(memory.name, "memory.name"), given, request.reason, request.request_id,
            convert.fingerprint(request),
        )  # fmt: skip
        return stored_wire.memory_out(view)

    async def DeleteMemory(
        self, request: api.DeleteMemoryRequest, context: Context
    ) -> empty_pb2.Empty:
        await self._memories.delete(
            names.memory_id(request.name), request.request_id, convert.fingerprint(request)
        )
        return empty_pb2.Empty()

    async def PreviewMemoryExtraction(
        self, request: api.PreviewMemoryExtractionRequest, context: Context
    ) -> api.PreviewMemoryExtractionResponse:
        session_id = names.session_id(request.name)
        archive_ids = [
            names.archive_in(a, session_id, f"archives[{i}]")
            for i, a in enumerate(request.archives)
        ]
        given = (
            convert.messages_in(list(request.messages), self._max_message_bytes)
            if request.messages
            else []
        )
        found = await self._preview.preview(session_id, archive_ids, given)
        return preview_out(found, session_id)

    async def RetireMemory(self, request: api.RetireMemoryRequest, context: Context) -> pb.Memory:
        view = await self._memories.retire(
            names.memory_id(request.name),
            request.reason,
            request.request_id,
            convert.fingerprint(request),
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


def _hybrid_out(answer: HybridAnswer) -> api.SearchArchivesResponse:
    return api.SearchArchivesResponse(
        hits=[
            api.SearchHit(
                archive=names.archive(match.session_id, match.archive_seq),
                message=names.message(match.session_id, match.message.id),
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
