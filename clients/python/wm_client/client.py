"""The typed asyncio client of wm.v1.WorkingMemoryService.

Why a wrapper over the generated stub: every mutating call gets a request_id (so the retries
that the service config makes on UNAVAILABLE, and any retry of the caller with the same id,
never store twice); errors come out as :class:`~wm_client.errors.WmError` subclasses with the
decoded details; commit streams resume by themselves (:class:`~wm_client.stream.CommitStream`).
Everything else is the contract as generated: requests are built here from plain arguments and
responses are the wm.v1 messages themselves.
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
        """Create a session (the server makes an id when ``session_id`` is empty); fields of
        ``config`` left unset take the server's default; ``user_id`` (else ``agent_id``) owns
        the long-term memories the session makes and recalls."""
        request = api.CreateSessionRequest(
            session_id=session_id, request_id=request_id or new_request_id(), config=config,
            user_id=user_id, agent_id=agent_id,
        )  # fmt: skip
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
            session=pb.Session(session_id=session_id, config=config),
            update_mask=field_mask_pb2.FieldMask(paths=list(paths)),
            request_id=request_id or new_request_id(),
        )
        return await self._unary(self._stub.UpdateSession, request)

    async def get_session(self, session_id: str) -> pb.Session:
        """A session and its counters (pending_tokens, live_tokens, working_memory_version…)."""
        return await self._unary(
            self._stub.GetSession, api.GetSessionRequest(session_id=session_id)
        )

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
            session_id=session_id, request_id=request_id or new_request_id()
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
            session_id=session_id,
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
            session_id=session_id, count=count, request_id=request_id or new_request_id()
        )
        return await self._unary(self._stub.RemoveRecentMessages, request)

    # --- commits --------------------------------------------------------------------------------
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
        stream is first read."""
        rid = request_id or new_request_id()

        def open_attempt(commit_id: str | None, after: int) -> Any:
            if commit_id is None:
                request = api.CommitRequest(
                    session_id=session_id,
                    keep_recent_count=keep_recent_count,
                    keep_recent_turns=keep_recent_turns,
                    request_id=rid,
                )
                return self._stub.Commit(request, timeout=self._timeout, metadata=self._metadata)
            return self._watch_call(session_id, commit_id, after)

        return CommitStream(
            open_attempt,
            session_id=session_id,
            heartbeats=heartbeats,
            policy=self.resume_policy,
            finished=self._finished_probe(session_id),
        )

    def compact(
        self, session_id: str, *, request_id: str | None = None, heartbeats: bool = False
    ) -> CommitStream:
        """Commit with keep 0 (archive every live message); the stream runs to Phase 2's end."""
        rid = request_id or new_request_id()

        def open_attempt(commit_id: str | None, after: int) -> Any:
            if commit_id is None:
                request = api.CompactRequest(session_id=session_id, request_id=rid)
                return self._stub.Compact(request, timeout=self._timeout, metadata=self._metadata)
            return self._watch_call(session_id, commit_id, after)

        return CommitStream(
            open_attempt,
            session_id=session_id,
            heartbeats=heartbeats,
            policy=self.resume_policy,
            finished=self._finished_probe(session_id),
        )

    def watch_commit(
        self,
        session_id: str,
        commit_id: str,
        *,
        after_sequence: int = 0,
        heartbeats: bool = False,
    ) -> CommitStream:
        """Re-attach to a commit: stored events after ``after_sequence``, then live ones."""
        return CommitStream(
            lambda cid, after: self._watch_call(session_id, cid or commit_id, after),
            session_id=session_id,
            commit_id=commit_id,
            after_sequence=after_sequence,
            heartbeats=heartbeats,
            policy=self.resume_policy,
            finished=self._finished_probe(session_id),
        )

    def _finished_probe(self, session_id: str) -> Callable[[str, int], Awaitable[bool]]:
        """For a stream that ended without its terminal event: has the commit ended with
        nothing stored after ``last``? (Then there is nothing to wait for.)"""

        async def finished(commit_id: str, last: int) -> bool:
            commit = await self.get_commit(session_id, commit_id)
            return commit.state in _TERMINAL_STATES and commit.last_sequence <= last

        return finished

    def _watch_call(self, session_id: str, commit_id: str, after: int) -> Any:
        request = api.WatchCommitRequest(
            session_id=session_id, commit_id=commit_id, after_sequence=after
        )
        return self._stub.WatchCommit(request, timeout=self._timeout, metadata=self._metadata)

    async def get_commit(self, session_id: str, commit_id: str) -> pb.Commit:
        """A commit's current state."""
        request = api.GetCommitRequest(session_id=session_id, commit_id=commit_id)
        return await self._unary(self._stub.GetCommit, request)

    async def list_commits(
        self, session_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> api.ListCommitsResponse:
        """One page of a session's commits, newest first."""
        request = api.ListCommitsRequest(
            session_id=session_id, page_size=page_size, page_token=page_token
        )
        return await self._unary(self._stub.ListCommits, request)

    async def retry_commit(
        self, session_id: str, commit_id: str, *, request_id: str | None = None
    ) -> pb.Commit:
        """Run Phase 2 of a failed commit again (watch it with :meth:`watch_commit`)."""
        request = api.RetryCommitRequest(
            session_id=session_id, commit_id=commit_id, request_id=request_id or new_request_id()
        )
        return await self._unary(self._stub.RetryCommit, request)

    # --- working memory -------------------------------------------------------------------------
    async def get_working_memory(self, session_id: str, *, version: int = 0) -> pb.WorkingMemory:
        """The latest completed working memory, or ``version``; NOT_FOUND when there is none."""
        request = api.GetWorkingMemoryRequest(session_id=session_id, version=version)
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
            session_id=session_id,
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
        include_anthropic_json: bool = False,
        registered_tools: Sequence[str] | None = None,
        recall_memories: bool = False,
        memory_token_budget: int = 0,
        context_format: api.ContextFormat.ValueType = api.CONTEXT_FORMAT_UNSPECIFIED,
    ) -> api.AssembleContextResponse:
        """The next model context within ``token_budget`` tokens; with
        ``registered_tools`` (e.g. ``ToolExecutor.names``), its system-prompt addition names
        only those tools; with ``recall_memories``, it ends with the long-term memories
        relevant to the newest user request (within ``memory_token_budget``, 0: 1,000); with
        ``context_format`` (e.g. ``CONTEXT_FORMAT_OPENAI_CHAT_COMPLETIONS``), ``rendered_json``
        holds the context as that API's messages or input items."""
        request = api.AssembleContextRequest(
            session_id=session_id,
            token_budget=token_budget,
            system_prompt=system_prompt,
            include_anthropic_json=include_anthropic_json,
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
        """One page of a session's archives, oldest first, without messages."""
        request = api.ListArchivesRequest(
            session_id=session_id, page_size=page_size, page_token=page_token
        )
        return await self._unary(self._stub.ListArchives, request)

    async def get_archive(
        self, session_id: str, archive_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> pb.Archive:
        """One archive with one page of its raw messages (expand); follow
        ``next_messages_page_token``, or use :meth:`iter_archive_messages`."""
        request = api.GetArchiveRequest(
            session_id=session_id, archive_id=archive_id, page_size=page_size,
            page_token=page_token,
        )  # fmt: skip
        return await self._unary(self._stub.GetArchive, request)

    async def list_messages(
        self, session_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> api.ListMessagesResponse:
        """One page of the session's live messages, oldest first (follow ``next_page_token``)."""
        request = api.ListMessagesRequest(
            session_id=session_id, page_size=page_size, page_token=page_token
        )
        return await self._unary(self._stub.ListMessages, request)

    async def iter_archive_messages(
        self, session_id: str, archive_id: str, *, page_size: int = 0
    ) -> AsyncIterator[pb.Message]:
        """Every message of an archive, page after page."""
        token = ""
        while True:
            page = await self.get_archive(
                session_id, archive_id, page_size=page_size, page_token=token
            )
            for message in page.messages:
                yield message
            token = page.next_messages_page_token
            if not token:
                return

    # --- tool outputs ---------------------------------------------------------------------------
    async def get_tool_output(
        self,
        session_id: str,
        output_id: str,
        *,
        start_line: int = 0,
        line_count: int = 0,
        byte_offset: int | None = None,
        byte_length: int = 0,
        page_token: str = "",
    ) -> api.GetToolOutputResponse:
        """One page of a stored tool output: lines (from ``start_line``, 1-based), or bytes
        when ``byte_offset`` is given; ``page_token`` continues a range."""
        request = api.GetToolOutputRequest(
            session_id=session_id, output_id=output_id, page_token=page_token
        )
        if byte_offset is not None:
            request.bytes.CopyFrom(api.ByteRange(offset=byte_offset, length=byte_length))
        else:
            request.lines.CopyFrom(api.LineRange(start=start_line, count=line_count))
        return await self._unary(self._stub.GetToolOutput, request)

    async def search_tool_outputs(
        self, session_id: str, query: str, *, output_id: str = "", max_hits: int = 0
    ) -> api.SearchToolOutputsResponse:
        """Literal, case-insensitive search over the session's stored tool outputs, by line."""
        request = api.SearchToolOutputsRequest(
            session_id=session_id, query=query, output_id=output_id, max_hits=max_hits
        )
        return await self._unary(self._stub.SearchToolOutputs, request)

    async def search_archives(
        self,
        query: str,
        *,
        session_id: str = "",
        archive_id: str = "",
        max_hits: int = 0,
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
        request = api.SearchArchivesRequest(
            session_id=session_id,
            query=query,
            archive_id=archive_id,
            max_hits=max_hits,
            all_sessions=all_sessions,
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
        owner: api.MemoryOwner,
        types: Sequence[pb.MemoryType.ValueType] = (),
        limit: int = 0,
        include_superseded: bool = False,
    ) -> api.SearchMemoriesResponse:
        """An owner's active memories ranked against ``query``, best first; with
        ``include_superseded``, the memories newer ones replaced too, ranked below them."""
        request = api.SearchMemoriesRequest(
            owner=owner,
            query=query,
            types=types,
            limit=limit,
            include_superseded=include_superseded,
        )
        return await self._unary(self._stub.SearchMemories, request)

    async def list_memories(
        self,
        *,
        owner: api.MemoryOwner,
        types: Sequence[pb.MemoryType.ValueType] = (),
        state: pb.MemoryState.ValueType = pb.MEMORY_STATE_UNSPECIFIED,
        page_size: int = 0,
        page_token: str = "",
    ) -> api.ListMemoriesResponse:
        """One page of an owner's memories, newest first."""
        request = api.ListMemoriesRequest(
            owner=owner, types=types, state=state, page_size=page_size, page_token=page_token
        )
        return await self._unary(self._stub.ListMemories, request)

    async def get_memory(self, memory_id: str) -> pb.Memory:
        """One memory with its history."""
        return await self._unary(self._stub.GetMemory, api.GetMemoryRequest(memory_id=memory_id))

    async def create_memory(
        self,
        owner: api.MemoryOwner,
        memory_type: pb.MemoryType.ValueType,
        text: str,
        *,
        request_id: str | None = None,
        fields: Mapping[str, str] | None = None,
        supersedes: Sequence[str] = (),
        expire_time: datetime | None = None,
    ) -> api.CreateMemoryResponse:
        """Store a memory (or find the active one of the owner that says the same), with
        structured ``fields`` if given. ``supersedes``: ids of the owner's active memories it
        replaces (they become SUPERSEDED, valid until this one); ``expire_time``: when to
        forget it (a datetime with a time zone)."""
        memory = pb.Memory(
            type=memory_type, text=text, fields=fields, supersedes_memory_ids=supersedes
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
        memory = pb.Memory(memory_id=memory_id)
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
        """Forget a memory: store, index and history."""
        request = api.DeleteMemoryRequest(
            memory_id=memory_id, request_id=request_id or new_request_id()
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
        (or these archives, or these messages), with the guards' verdict on each op; a dry
        run that writes nothing."""
        request = api.PreviewMemoryExtractionRequest(
            session_id=session_id, archive_ids=archive_ids, messages=messages
        )
        return await self._unary(self._stub.PreviewMemoryExtraction, request)

    async def retire_memory(
        self, memory_id: str, reason: str, *, request_id: str | None = None
    ) -> pb.Memory:
        """Retire a memory that no longer holds: kept with ``reason``, no longer recalled."""
        request = api.RetireMemoryRequest(
            memory_id=memory_id, reason=reason, request_id=request_id or new_request_id()
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
        """archive_expand, archive_search and update_working_memory, ready to register."""
        request = api.GetToolDefinitionsRequest(format=tool_format)
        return await self._unary(self._stub.GetToolDefinitions, request)

    # --- plumbing -------------------------------------------------------------------------------
    async def _unary(self, method: Callable[..., Awaitable[Response]], request: Any) -> Response:
        try:
            return await method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from exc
