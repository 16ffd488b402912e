"""The typed asyncio client of wm.v1.WorkingMemoryService.

Why a wrapper over the generated stub: every mutating call gets a request_id (so the retries
that the service config makes on UNAVAILABLE, and any retry of the caller with the same id,
never store twice); errors come out as :class:`~wm_client.errors.WmError` subclasses with the
decoded details; commit streams resume by themselves (:class:`~wm_client.stream.CommitStream`);
sessions, commits, archives and memories are taken as bare ids or as names (wm_client.names).
Everything else is the contract as generated: requests are built here from plain arguments and
responses are the wm.v1 messages themselves (names, not ids).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from google.protobuf import field_mask_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from wm_client import names
from wm_client.channel import default_address, open_channel, reachable_address
from wm_client.errors import error_from_rpc
from wm_client.stream import CommitStream, ResumePolicy
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

if TYPE_CHECKING:
    from wm_proto.v1.working_memory_service_pb2_grpc import WorkingMemoryServiceAsyncStub

Response = TypeVar("Response")
_TERMINAL_STATES = (pb.COMMIT_STATE_COMPLETED, pb.COMMIT_STATE_FAILED, pb.COMMIT_STATE_SKIPPED)
Metadata = Sequence[tuple[str, str]]


def _timestamp(moment: datetime) -> Timestamp:
    """A datetime with a time zone as a Timestamp (a naive one would be ambiguous)."""
    if moment.tzinfo is None:
        raise ValueError("a datetime with a time zone (e.g. datetime.now(UTC))")
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def new_request_id() -> str:
    """A fresh idempotency key (a UUID, as the contract recommends)."""
    return str(uuid.uuid4())


class WmClient:
    """One channel to the service and a method per RPC.

    Give an ``address`` (default: ``WM_ADDRESS`` or 127.0.0.1:50051) or an existing
    ``channel`` (which the client then does not close). ``timeout`` overrides the per-method
    timeouts of the service config; ``metadata`` is sent with every call, and ``api_key`` adds
    ``authorization: Bearer <key>`` for a server that requires API keys.
    Use it as an async context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
        api_key: str | None = None,
        resume_policy: ResumePolicy | None = None,
    ) -> None:
        self.address = reachable_address(address) if address else default_address()
        self._owns_channel = channel is None
        self.channel = channel if channel is not None else open_channel(self.address)
        self._stub: WorkingMemoryServiceAsyncStub = service_grpc.WorkingMemoryServiceStub(
            self.channel
        )
        self._timeout = timeout
        self._metadata = tuple(metadata)
        if api_key:
            self._metadata += (("authorization", f"Bearer {api_key}"),)
        self.resume_policy = resume_policy or ResumePolicy()

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The metadata sent with every call (the API key's authorization among it)."""
        return self._metadata

    async def __aenter__(self) -> WmClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel if this client opened it."""
        if self._owns_channel:
            await self.channel.close()

    async def wait_ready(self, seconds: float, *, fail_fast: bool = False) -> bool:
        """Wait until the channel is connected; False when the server is not reachable in time.

        ``fail_fast``: give up at the first failed connection attempt (a refused connection
        is known at once; a command line should say so rather than wait out its timeout).
        """
        try:
            async with asyncio.timeout(seconds):
                state = self.channel.get_state(try_to_connect=True)
                while state != grpc.ChannelConnectivity.READY:
                    if fail_fast and state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                        return False
                    await self.channel.wait_for_state_change(state)
                    state = self.channel.get_state(try_to_connect=True)
        except TimeoutError:
            return False
        return True

    # --- sessions -------------------------------------------------------------------------------
    async def create_session(
        self,
        session_id: str = "",
        *,
        config: pb.SessionConfig | None = None,
        request_id: str | None = None,
        user_id: str = "",
        agent_id: str = "",
    ) -> pb.Session:
        """Create a session (the server makes an id when ``session_id`` is empty; its name is
        also accepted); fields of ``config`` left unset take the server's default; ``user_id``
        (else ``agent_id``) owns the long-term memories the session makes and recalls."""
        request = api.CreateSessionRequest(
            session=pb.Session(config=config, user_id=user_id, agent_id=agent_id),
            session_id=names.session_id(session_id) if session_id else "",
            request_id=request_id or new_request_id(),
        )
        return await self._unary(self._stub.CreateSession, request)

    async def update_session(
        self,
        session_id: str,
        config: pb.SessionConfig,
        paths: Sequence[str] = (),
        *,
        request_id: str | None = None,
    ) -> pb.Session:
        """Change the session's config: the fields ``paths`` names (e.g.
        ``"config.auto_commit.idle_timeout"``), or with no paths every field set in ``config``."""
        request = api.UpdateSessionRequest(
            session=pb.Session(name=names.session_name(session_id), config=config),
            update_mask=field_mask_pb2.FieldMask(paths=list(paths)),
            request_id=request_id or new_request_id(),
        )
        return await self._unary(self._stub.UpdateSession, request)

    async def get_session(self, session_id: str) -> pb.Session:
        """A session and its counters (pending_tokens, live_tokens, working_memory_version…)."""
        request = api.GetSessionRequest(name=names.session_name(session_id))
        return await self._unary(self._stub.GetSession, request)

    async def list_sessions(
        self, *, page_size: int = 0, page_token: str = ""
    ) -> api.ListSessionsResponse:
        """One page of sessions, newest first."""
        request = api.ListSessionsRequest(page_size=page_size, page_token=page_token)
        return await self._unary(self._stub.ListSessions, request)

    async def iter_sessions(self, *, page_size: int = 100) -> AsyncIterator[pb.Session]:
        """Every session, newest first, page after page."""
        token = ""
        while True:
            page = await self.list_sessions(page_size=page_size, page_token=token)
            for session in page.sessions:
                yield session
            token = page.next_page_token
            if not token:
                return

    async def delete_session(self, session_id: str, *, request_id: str | None = None) -> None:
        """Delete a session and everything of it."""
        request = api.DeleteSessionRequest(
            name=names.session_name(session_id), request_id=request_id or new_request_id()
        )
        await self._unary(self._stub.DeleteSession, request)

    async def add_messages(
        self,
        session_id: str,
        messages: Sequence[pb.Message],
        *,
        create_session_if_missing: bool = False,
        request_id: str | None = None,
    ) -> api.AddMessagesResponse:
        """Add 1-1000 messages atomically; ids already stored come back as duplicates."""
        request = api.AddMessagesRequest(
            parent=names.session_name(session_id),
            messages=messages,
            create_session_if_missing=create_session_if_missing,
            request_id=request_id or new_request_id(),
        )
        return await self._unary(self._stub.AddMessages, request)

    async def remove_recent_messages(
        self, session_id: str, count: int = 1, *, request_id: str | None = None
    ) -> api.RemoveRecentMessagesResponse:
        """Take back the newest ``count`` (1-100) live messages and return them, oldest first;
        FailedPreconditionError (reason MESSAGES_NOT_LIVE) when fewer are live (archived
        messages stay). A retry with the same ``request_id`` returns the same messages."""
        request = api.RemoveRecentMessagesRequest(
            parent=names.session_name(session_id),
            count=count,
            request_id=request_id or new_request_id(),
        )
        return await self._unary(self._stub.RemoveRecentMessages, request)

    # --- commits --------------------------------------------------------------------------------
    async def create_commit(
        self,
        session_id: str,
        keep_recent_count: int = 0,
        *,
        keep_recent_turns: int = 0,
        request_id: str | None = None,
    ) -> pb.Commit:
        """Start a commit and return it once Phase 1 is stored (watch Phase 2 with
        :meth:`watch_commit`, or use :meth:`commit`, which does both)."""
        request = api.CreateCommitRequest(
            parent=names.session_name(session_id),
            keep_recent_count=keep_recent_count,
            keep_recent_turns=keep_recent_turns,
            request_id=request_id or new_request_id(),
        )
        return await self._unary(self._stub.CreateCommit, request)

    async def compact_session(self, session_id: str, *, request_id: str | None = None) -> pb.Commit:
        """Start a commit with keep 0 (archive every live message) and return it once Phase 1
        is stored (or use :meth:`compact`, which also follows it)."""
        request = api.CompactSessionRequest(
            name=names.session_name(session_id), request_id=request_id or new_request_id()
        )
        return await self._unary(self._stub.CompactSession, request)

    def commit(
        self,
        session_id: str,
        keep_recent_count: int = 0,
        *,
        keep_recent_turns: int = 0,
        request_id: str | None = None,
        heartbeats: bool = False,
    ) -> CommitStream:
        """Start a commit keeping the newest ``keep_recent_count`` messages (or, with
        ``keep_recent_turns``, the newest turns); the returned stream yields its events
        (Phase 1 first) and resumes itself after a disconnect. Nothing is sent until the
        stream is first read: then CreateCommit (retried with the same request id while the
        service is unreachable), then WatchCommit."""
        rid = request_id or new_request_id()

        async def start() -> pb.Commit:
            return await self.create_commit(
                session_id, keep_recent_count, keep_recent_turns=keep_recent_turns, request_id=rid
            )

        return self._stream(session_id, start=start, heartbeats=heartbeats)

    def compact(
        self, session_id: str, *, request_id: str | None = None, heartbeats: bool = False
    ) -> CommitStream:
        """Commit with keep 0 (archive every live message); the stream runs to Phase 2's end."""
        rid = request_id or new_request_id()

        async def start() -> pb.Commit:
            return await self.compact_session(session_id, request_id=rid)

        return self._stream(session_id, start=start, heartbeats=heartbeats)

    def watch_commit(
        self,
        session_id: str,
        commit_id: str = "",
        *,
        after_sequence: int = 0,
        heartbeats: bool = False,
    ) -> CommitStream:
        """Re-attach to a commit (a session and a commit id, or the commit's name alone):
        stored events after ``after_sequence``, then live ones."""
        name = names.commit_name(session_id, commit_id) if commit_id else session_id
        return self._stream(name, commit=name, after_sequence=after_sequence, heartbeats=heartbeats)

    def _stream(
        self,
        session: str,
        *,
        start: Callable[[], Awaitable[pb.Commit]] | None = None,
        commit: str | None = None,
        after_sequence: int = 0,
        heartbeats: bool = False,
    ) -> CommitStream:
        return CommitStream(
            self._watch_call,
            start=start,
            session=names.session_name(session),
            commit=commit,
            after_sequence=after_sequence,
            heartbeats=heartbeats,
            policy=self.resume_policy,
            finished=self._finished,
        )

    async def _finished(self, commit: str, last: int) -> bool:
        """For a stream that ended without its terminal event: has the commit ended with
        nothing stored after ``last``? (Then there is nothing to wait for.)"""
        state = await self.get_commit(commit)
        return state.state in _TERMINAL_STATES and state.last_sequence <= last

    def _watch_call(self, commit: str, after: int) -> Any:
        request = api.WatchCommitRequest(name=commit, after_sequence=after)
        return self._stub.WatchCommit(request, timeout=self._timeout, metadata=self._metadata)

    async def get_commit(self, session_id: str, commit_id: str = "") -> pb.Commit:
        """A commit's current state (a session and a commit id, or the commit's name)."""
        name = names.commit_name(session_id, commit_id) if commit_id else session_id
        return await self._unary(self._stub.GetCommit, api.GetCommitRequest(name=name))

    async def list_commits(
        self, session_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> api.ListCommitsResponse:
        """One page of a session's commits, newest first."""
        request = api.ListCommitsRequest(
            parent=names.session_name(session_id), page_size=page_size, page_token=page_token
        )
        return await self._unary(self._stub.ListCommits, request)

    async def retry_commit(
        self, session_id: str, commit_id: str = "", *, request_id: str | None = None
    ) -> pb.Commit:
        """Run Phase 2 of a failed commit again (a session and a commit id, or the commit's
        name); watch it with :meth:`watch_commit`."""
        name = names.commit_name(session_id, commit_id) if commit_id else session_id
        request = api.RetryCommitRequest(name=name, request_id=request_id or new_request_id())
        return await self._unary(self._stub.RetryCommit, request)

    # --- working memory -------------------------------------------------------------------------
    async def get_working_memory(self, session_id: str, *, version: int = 0) -> pb.WorkingMemory:
        """The latest completed working memory, or ``version``; NOT_FOUND when there is none."""
        request = api.GetWorkingMemoryRequest(name=names.working_memory_name(session_id, version))
        return await self._unary(self._stub.GetWorkingMemory, request)

    async def apply_working_memory_ops(
        self,
        session_id: str,
        ops: Sequence[pb.SectionOp],
        *,
        expected_version: int = 0,
        request_id: str | None = None,
    ) -> api.ApplyWorkingMemoryOpsResponse:
        """Apply ops computed by the caller's own model, through the server's guards."""
        request = api.ApplyWorkingMemoryOpsRequest(
            parent=names.session_name(session_id),
            ops=ops,
            expected_version=expected_version,
            request_id=request_id or new_request_id(),
        )
        return await self._unary(self._stub.ApplyWorkingMemoryOps, request)

    async def assemble_context(
        self,
        session_id: str,
        token_budget: int,
        *,
        system_prompt: str = "",
        registered_tools: Sequence[str] | None = None,
        recall_memories: bool = False,
        memory_token_budget: int = 0,
        context_format: api.ContextFormat.ValueType = api.CONTEXT_FORMAT_UNSPECIFIED,
    ) -> api.AssembleContextResponse:
        """The next model context within ``token_budget`` tokens; with
        ``registered_tools`` (e.g. ``ToolExecutor.names``), its system-prompt addition names
        only those tools; with ``recall_memories``, it ends with the long-term memories
        relevant to the newest user request (within ``memory_token_budget``, 0: 1,000); with
        ``context_format`` (e.g. ``CONTEXT_FORMAT_ANTHROPIC_MESSAGES``), ``rendered_json``
        holds the context as that API's messages or input items."""
        request = api.AssembleContextRequest(
            name=names.session_name(session_id),
            token_budget=token_budget,
            system_prompt=system_prompt,
            format=context_format,
        )
        if recall_memories:
            request.memory_recall.CopyFrom(
                api.MemoryRecall(enabled=True, token_budget=memory_token_budget)
            )
        if registered_tools is not None:
            request.registered_tools.SetInParent()  # set, even when empty: no tools at all
            request.registered_tools.names.extend(registered_tools)
        return await self._unary(self._stub.AssembleContext, request)

    # --- archives -------------------------------------------------------------------------------
    async def list_archives(
        self, session_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> api.ListArchivesResponse:
        """One page of a session's archives, oldest first."""
        request = api.ListArchivesRequest(
            parent=names.session_name(session_id), page_size=page_size, page_token=page_token
        )
        return await self._unary(self._stub.ListArchives, request)

    async def get_archive(self, session_id: str, archive_id: str = "") -> pb.Archive:
        """One archive (a session and ``archive_001``, or the archive's name), without its
        messages: page them with :meth:`list_messages` or :meth:`iter_archive_messages`."""
        name = names.archive_name(session_id, archive_id) if archive_id else session_id
        return await self._unary(self._stub.GetArchive, api.GetArchiveRequest(name=name))

    async def list_messages(
        self,
        session_id: str,
        *,
        archive_id: str = "",
        page_size: int = 0,
        page_token: str = "",
    ) -> api.ListMessagesResponse:
        """One page of the session's live messages, or with ``archive_id`` (or an archive's
        name as the first argument) of that archive's messages, oldest first (follow
        ``next_page_token``)."""
        request = api.ListMessagesRequest(
            parent=names.messages_parent(session_id, archive_id),
            page_size=page_size,
            page_token=page_token,
        )
        return await self._unary(self._stub.ListMessages, request)

    async def iter_archive_messages(
        self, session_id: str, archive_id: str = "", *, page_size: int = 0
    ) -> AsyncIterator[pb.Message]:
        """Every message of an archive, page after page."""
        parent = names.archive_name(session_id, archive_id) if archive_id else session_id
        token = ""
        while True:
            page = await self.list_messages(parent, page_size=page_size, page_token=token)
            for message in page.messages:
                yield message
            token = page.next_page_token
            if not token:
                return

    # --- tool outputs ---------------------------------------------------------------------------
    async def get_tool_output(
        self,
        session_id: str,
        output_id: str = "",
        *,
        start_line: int = 0,
        line_count: int = 0,
        byte_offset: int | None = None,
        byte_length: int = 0,
        page_token: str = "",
    ) -> api.GetToolOutputResponse:
        """One page of a stored tool output (a session and ``out.m12.0``, or the output's
        name): lines (from ``start_line``, 1-based), or bytes when ``byte_offset`` is given;
        ``page_token`` continues a range."""
        name = names.tool_output_name(session_id, output_id) if output_id else session_id
        request = api.GetToolOutputRequest(name=name, page_token=page_token)
        if byte_offset is not None:
            request.bytes.CopyFrom(api.ByteRange(offset=byte_offset, length=byte_length))
        else:
            request.lines.CopyFrom(api.LineRange(start=start_line, count=line_count))
        return await self._unary(self._stub.GetToolOutput, request)

    async def search_tool_outputs(
        self, session_id: str, query: str, *, output_id: str = "", page_size: int = 0
    ) -> api.SearchToolOutputsResponse:
        """Literal, case-insensitive search over the session's stored tool outputs (or one of
        them, ``output_id``), by line."""
        request = api.SearchToolOutputsRequest(
            parent=names.session_name(session_id),
            query=query,
            tool_output=names.tool_output_name(session_id, output_id) if output_id else "",
            page_size=page_size,
        )
        return await self._unary(self._stub.SearchToolOutputs, request)

    async def search_archives(
        self,
        query: str,
        *,
        session_id: str = "",
        archive_id: str = "",
        page_size: int = 0,
        all_sessions: bool = False,
        ranked: bool = False,
        user_id: str = "",
        agent_id: str = "",
        mode: api.SearchMode.ValueType | None = None,
        hybrid: bool = False,
        min_score: float = 0.0,
    ) -> api.SearchArchivesResponse:
        """Search over archived messages: literal and case-insensitive (newest archive
        first), or ``ranked`` by BM25 (best first), or any ``mode`` of the contract (wins over
        ``ranked``); across all sessions of the tenant, or of ``user_id`` / ``agent_id``, with
        ``all_sessions``."""
        if mode is None and hybrid:
            mode = api.SEARCH_MODE_HYBRID
        if mode is None:
            mode = api.SEARCH_MODE_RANKED if ranked else api.SEARCH_MODE_UNSPECIFIED
        parent = names.ALL_SESSIONS if all_sessions else names.session_name(session_id)
        request = api.SearchArchivesRequest(
            parent=parent,
            query=query,
            archive=names.archive_name(session_id, archive_id) if archive_id else "",
            page_size=page_size,
            mode=mode,
            min_score=min_score,
            user_id=user_id,
            agent_id=agent_id,
        )
        return await self._unary(self._stub.SearchArchives, request)

    # --- long-term memories ---------------------------------------------------------------------
    async def search_memories(
        self,
        query: str,
        *,
        owner: str,
        types: Sequence[pb.MemoryType.ValueType] = (),
        page_size: int = 0,
        include_superseded: bool = False,
    ) -> api.SearchMemoriesResponse:
        """An owner's active memories (``owner``: ``users/{u}``, ``agents/{a}`` or
        ``sessions/{s}``, see :func:`wm_client.names.owner_name`) ranked against ``query``,
        best first; with ``include_superseded``, the memories newer ones replaced too, ranked
        below them."""
        request = api.SearchMemoriesRequest(
            owner=owner,
            query=query,
            types=types,
            page_size=page_size,
            include_superseded=include_superseded,
        )
        return await self._unary(self._stub.SearchMemories, request)

    async def list_memories(
        self,
        *,
        owner: str,
        types: Sequence[pb.MemoryType.ValueType] = (),
        state: pb.MemoryState.ValueType = pb.MEMORY_STATE_UNSPECIFIED,
        page_size: int = 0,
        page_token: str = "",
    ) -> api.ListMemoriesResponse:
        """One page of an owner's memories (an owner's name), newest first."""
        request = api.ListMemoriesRequest(
            owner=owner, types=types, state=state, page_size=page_size, page_token=page_token
        )
        return await self._unary(self._stub.ListMemories, request)

    async def get_memory(self, memory_id: str) -> pb.Memory:
        """One memory (its id or its name) with its history."""
        request = api.GetMemoryRequest(name=names.memory_name(memory_id))
        return await self._unary(self._stub.GetMemory, request)

    async def create_memory(
        self,
        owner: str,
        memory_type: pb.MemoryType.ValueType,
        text: str,
        *,
        request_id: str | None = None,
        fields: Mapping[str, str] | None = None,
        supersedes: Sequence[str] = (),
        expire_time: datetime | None = None,
    ) -> api.CreateMemoryResponse:
        """Store a memory for ``owner`` (an owner's name), or find the active one of the owner
        that says the same, with structured ``fields`` if given. ``supersedes``: ids (or
        names) of the owner's active memories it replaces (they become SUPERSEDED, valid until
        this one); ``expire_time``: when to forget it (a datetime with a time zone)."""
        memory = pb.Memory(
            type=memory_type,
            text=text,
            fields=fields,
            supersedes=[names.memory_name(m) for m in supersedes],
        )
        if expire_time is not None:
            memory.expire_time.CopyFrom(_timestamp(expire_time))
        request = api.CreateMemoryRequest(
            owner=owner, memory=memory, request_id=request_id or new_request_id()
        )
        return await self._unary(self._stub.CreateMemory, request)

    async def update_memory(
        self,
        memory_id: str,
        *,
        text: str | None = None,
        memory_type: pb.MemoryType.ValueType | None = None,
        expire_time: datetime | None = None,
        reason: str = "",
        request_id: str | None = None,
    ) -> pb.Memory:
        """Correct a memory: write the fields given (the superseded version stays in its
        history with ``reason``; empty: "user correction"). ``expire_time`` alone sets when
        to forget it and makes no new version."""
        memory = pb.Memory(name=names.memory_name(memory_id))
        paths: list[str] = []
        if text is not None:
            memory.text, paths = text, [*paths, "text"]
        if memory_type is not None:
            memory.type, paths = memory_type, [*paths, "type"]
        if expire_time is not None:
            memory.expire_time.CopyFrom(_timestamp(expire_time))
            paths.append("expire_time")
        if not paths:
            raise ValueError("update_memory needs text, memory_type or expire_time")
        request = api.UpdateMemoryRequest(
            memory=memory,
            update_mask=field_mask_pb2.FieldMask(paths=paths),
            reason=reason,
            request_id=request_id or new_request_id(),
        )
        return await self._unary(self._stub.UpdateMemory, request)

    async def delete_memory(self, memory_id: str, *, request_id: str | None = None) -> None:
        """Forget a memory (its id or its name): store, index and history."""
        request = api.DeleteMemoryRequest(
            name=names.memory_name(memory_id), request_id=request_id or new_request_id()
        )
        await self._unary(self._stub.DeleteMemory, request)

    async def preview_memory_extraction(
        self,
        session_id: str,
        *,
        archive_ids: Sequence[str] = (),
        messages: Sequence[pb.Message] = (),
    ) -> api.PreviewMemoryExtractionResponse:
        """What a commit's memory extraction would propose for the session's live messages
        (or these archives, ids or names, or these messages), with the guards' verdict on
        each op; a dry run that writes nothing."""
        request = api.PreviewMemoryExtractionRequest(
            name=names.session_name(session_id),
            archives=[names.archive_name(session_id, a) for a in archive_ids],
            messages=messages,
        )
        return await self._unary(self._stub.PreviewMemoryExtraction, request)

    async def retire_memory(
        self, memory_id: str, reason: str, *, request_id: str | None = None
    ) -> pb.Memory:
        """Retire a memory that no longer holds: kept with ``reason``, no longer recalled."""
        request = api.RetireMemoryRequest(
            name=names.memory_name(memory_id),
            reason=reason,
            request_id=request_id or new_request_id(),
        )
        return await self._unary(self._stub.RetireMemory, request)

    async def purge_user_data(
        self, user_id: str, *, request_id: str | None = None
    ) -> api.PurgeUserDataResponse:
        """Forget a user: every memory they own and every session created with their
        user_id (messages, archives, tool outputs); the counts removed."""
        request = api.PurgeUserDataRequest(
            user_id=user_id, request_id=request_id or new_request_id()
        )
        return await self._unary(self._stub.PurgeUserData, request)

    async def get_tool_definitions(
        self, tool_format: api.ToolFormat.ValueType = api.TOOL_FORMAT_UNSPECIFIED
    ) -> api.GetToolDefinitionsResponse:
        """The recall tools' definitions, ready to register; with ``tool_format`` (e.g.
        ``TOOL_FORMAT_ANTHROPIC_MESSAGES``) each one's ``rendered_json`` holds it in that
        API's shape."""
        request = api.GetToolDefinitionsRequest(format=tool_format)
        return await self._unary(self._stub.GetToolDefinitions, request)

    # --- plumbing -------------------------------------------------------------------------------
    async def _unary(self, method: Callable[..., Awaitable[Response]], request: Any) -> Response:
        try:
            return await method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from exc
