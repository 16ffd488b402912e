"""The context engine: the three calls an agent runtime makes around its model turns.

Why a layer over the client: a runtime does not want to think about commits. After each turn
it hands over the new messages (``after_turn``); when the tokens waiting outside the keep window
reach a share of its context budget, a commit starts in the background and the turn goes on
without waiting for the working memory. When the runtime must shrink its context now, it
compacts (``compact``: archive everything, wait for the new working memory). Before each model
call it asks for the context to send (``assemble``).

Compared with the reference plugin this engine adds a turn's messages in one atomic batch (not
one request per message), reads ``pending_tokens`` from that same answer (no extra round trip),
reports a failed commit as a failure (never as a "timeout"), and keeps errors of background
commits on their task, logged, never raised into the runtime's turn.

An agent never stops because its memory is down. When the service cannot be reached
(UNAVAILABLE: refused or reset connections, a server shutting down; DEADLINE_EXCEEDED) the
three calls do not raise: ``assemble`` returns the runtime's own messages, newest first within
the budget, flagged as a fallback with the reason; ``after_turn`` keeps the turn's batch with
its request id and reports it as not stored; ``compact`` reports the outage as its outcome.
The next call that reaches the service first sends the waiting batches, in order, each with
its original request id (so a batch the server did store before the answer was lost is not
stored twice). One warning is logged when an outage starts, one line when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType

from wm_client import _rules
from wm_client.client import WmClient, new_request_id
from wm_client.errors import WmError, error_class
from wm_client.jsonl import is_user_turn_start
from wm_client.stream import CommitStream
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api

log = logging.getLogger("wm_client.engine")

# The contract's largest AssembleContext budget and keep_recent_count, and the engine's own
# bound on keep_recent_turns: generated from the rules both clients share (_rules.py).
MAX_TOKEN_BUDGET = _rules.MAX_TOKEN_BUDGET
MAX_KEEP_RECENT = _rules.MAX_KEEP_RECENT
MAX_KEEP_TURNS = _rules.MAX_KEEP_TURNS
# Bounds of what the engine holds for a fallback, per session: the messages it has seen (the
# runtime's history; a runtime may pass its own instead) and the batches waiting for the
# service. Past MAX_UNSENT_MESSAGES the oldest waiting batches are dropped with a warning
# (they stay in the runtime's own history, not in the service's archives).
MAX_SEEN_MESSAGES = _rules.MAX_SEEN_MESSAGES
MAX_UNSENT_MESSAGES = _rules.MAX_UNSENT_MESSAGES
# The service is unreachable (not: it refused the request): fall back, never raise.
UNREACHABLE: tuple[type[WmError], ...] = tuple(
    sorted({error_class(code) for code in _rules.ENGINE_UNREACHABLE}, key=lambda c: c.__name__)
)
# A rough token estimate for a fallback (the service's own estimate is not at hand).
_CHARS_PER_TOKEN = 4


class CompactOutcome(StrEnum):
    """How a compaction ended."""

    COMPLETED = "completed"  # everything archived and folded into a new working memory
    SKIPPED = "skipped"  # nothing to archive
    FAILED = "failed"  # Phase 2 failed; the previous working memory stays current
    # The service could not be reached; nothing is known to be compacted (a compaction whose
    # Phase 1 answered may still complete on the server: ``commit`` names it then).
    UNAVAILABLE = "unavailable"


class BackgroundCommit:
    """A commit that ``after_turn`` started and follows to its end in a task.

    Nobody has to await it. A runtime that wants to know may wait for Phase 1
    (:meth:`phase1`) or for the terminal event (:meth:`wait`); an error stays on the task
    and is logged, never raised into the turn that started it.
    """

    def __init__(
        self, session_id: str, stream: CommitStream, after: BackgroundCommit | None = None
    ) -> None:
        self.session_id = session_id
        self.stream = stream
        self._after = after
        self._first = asyncio.Event()
        self.task: asyncio.Task[pb.CommitEvent] = asyncio.create_task(
            self._follow(), name=f"wm-commit-{session_id}"
        )
        self.task.add_done_callback(self._log_outcome)

    @property
    def commit(self) -> str | None:
        """The commit's name, known once Phase 1 answered."""
        return self.stream.commit

    @property
    def done(self) -> bool:
        return self.task.done()

    @property
    def past_phase1(self) -> bool:
        """True once the server answered Phase 1 (or the attempt ended)."""
        return self._first.is_set()

    async def phase1(self) -> pb.CommitEvent:
        """The Phase 1 event (archived or skipped)."""
        await self._first.wait()
        if self.stream.first_event is None:
            await self.task  # raises what ended the attempt
            raise RuntimeError("commit ended without any event")
        return self.stream.first_event

    async def wait(self) -> pb.CommitEvent:
        """The terminal event (completed, failed or skipped)."""
        return await asyncio.shield(self.task)

    async def _follow(self) -> pb.CommitEvent:
        try:
            if self._after is not None:
                # Commit only once the session's previous commit has answered Phase 1, so
                # the two never race for the same messages and archives stay in turn order.
                await self._after._first.wait()
                self._after = None  # no chain of finished commits kept alive
            async for _ in self.stream:
                self._first.set()
        finally:
            self._first.set()
        return await self.stream.wait()

    def _log_outcome(self, task: asyncio.Task[pb.CommitEvent]) -> None:
        if task.cancelled():
            return
        error = task.exception()  # also marks the exception as retrieved
        if error is not None:
            log.warning("background commit of %s failed: %s", self.session_id, error)
            return
        event = task.result()
        log.info(
            "background commit %s of %s ended: %s",
            event.commit,
            self.session_id,
            pb.CommitState.Name(event.state),
        )


@dataclass(frozen=True, slots=True)
class AfterTurnResult:
    """What ``after_turn`` did. ``pending_tokens`` is None when there was nothing to add (or
    the service could not be reached)."""

    session_id: str
    added_message_ids: tuple[str, ...]
    duplicate_message_ids: tuple[str, ...]
    pending_tokens: int | None
    threshold: int
    commit: BackgroundCommit | None
    # The commit (its name) the server started under the session's own auto-commit policy
    # ("" if none).
    server_commit: str = ""
    # False when the service could not be reached: the turn waits in the engine (see
    # ``unsent_messages``) and is sent before anything else on the next call that reaches it.
    stored: bool = True
    # Messages of this session still waiting for the service after this call.
    unsent_messages: int = 0
    # Why the turn was not stored ("" when it was).
    fallback_reason: str = ""
    # Messages of earlier turns that waited and were stored by this call.
    flushed_messages: int = 0

    @property
    def commit_started(self) -> bool:
        return self.commit is not None


@dataclass(frozen=True, slots=True)
class AssembledContext:
    """The context for the next model call: the service's AssembleContext answer, or, when
    the service could not be reached, a fallback built from the runtime's own messages.

    ``response`` is always an AssembleContextResponse; a fallback's holds the runtime's
    newest messages within the budget (``estimated_tokens`` by a rough 4-characters-a-token
    rule), no working memory and no system-prompt addition.
    """

    session_id: str
    response: api.AssembleContextResponse
    # Why this is a fallback ("" when the service answered).
    fallback_reason: str = ""

    @property
    def fallback(self) -> bool:
        return bool(self.fallback_reason)

    @property
    def messages(self) -> Sequence[pb.Message]:
        return self.response.messages

    @property
    def system_prompt_addition(self) -> str:
        return self.response.system_prompt_addition

    @property
    def rendered_json(self) -> str:
        """The context in the format asked for (empty without one, and in a fallback)."""
        return self.response.rendered_json

    @property
    def estimated_tokens(self) -> int:
        return self.response.estimated_tokens

    @property
    def working_memory_version(self) -> int:
        return self.response.working_memory_version

    @property
    def recalled_memories(self) -> Sequence[str]:
        """The names of the long-term memories recalled into the system-prompt addition (none
        in a fallback)."""
        return self.response.recalled_memories


@dataclass(slots=True)
class _Unsent:
    """A turn's batch that did not reach the service, with the request id it was sent with."""

    messages: list[pb.Message]
    request_id: str = field(default_factory=new_request_id)


@dataclass(frozen=True, slots=True)
class CompactResult:
    """The outcome of ``compact``: the new summary and the context size before and after.

    ``tokens_before``/``tokens_after`` are the estimated tokens of the assembled context
    (working memory, uncovered archives, live messages) around the compaction. ``summary`` is
    the new working memory document when completed, else empty; ``error`` explains a failure.
    ``commit`` and ``archive`` are names ("" when unknown).
    """

    session_id: str
    outcome: CompactOutcome
    summary: str
    tokens_before: int
    tokens_after: int
    commit: str
    archive: str
    working_memory_version: int
    archived_message_count: int
    error: str
    terminal: pb.CommitEvent

    @property
    def compacted(self) -> bool:
        return self.outcome is CompactOutcome.COMPLETED


class ContextEngine:
    """after_turn / compact / assemble over a :class:`WmClient` (which the caller owns)."""

    def __init__(self, client: WmClient) -> None:
        self.client = client
        self._latest: dict[str, BackgroundCommit] = {}
        self._running: set[BackgroundCommit] = set()
        self._server_managed: dict[str, bool] = {}
        self._seen: dict[str, deque[pb.Message]] = {}
        self._unsent: dict[str, deque[_Unsent]] = {}
        self._outage = ""  # the reason of the current outage, "" while the service answers

    # --- the fallback --------------------------------------------------------------------------
    @property
    def outage(self) -> str:
        """Why the service is considered unreachable ("" when its last answer came)."""
        return self._outage

    def unsent_messages(self, session: str) -> int:
        """Messages of ``session`` waiting for the service."""
        return sum(len(batch.messages) for batch in self._unsent.get(session, ()))

    def _reached(self) -> None:
        if self._outage:
            log.info("working memory service reachable again (was: %s)", self._outage)
            self._outage = ""

    def _unreachable(self, error: Exception) -> str:
        reason = f"working memory service unreachable: {error}"
        if not self._outage:
            # One warning per outage, not one per call while it lasts.
            log.warning("%s; the agent goes on with its own messages", reason)
        self._outage = reason
        return reason

    def _remember(self, session: str, messages: Sequence[pb.Message]) -> None:
        seen = self._seen.setdefault(session, deque(maxlen=MAX_SEEN_MESSAGES))
        seen.extend(messages)

    def _queue(self, session: str, batch: _Unsent) -> None:
        waiting = self._unsent.setdefault(session, deque())
        waiting.append(batch)
        while self.unsent_messages(session) > MAX_UNSENT_MESSAGES and len(waiting) > 1:
            dropped = waiting.popleft()
            log.warning(
                "%s: dropped %d unsent messages (more than %d waiting for the service)",
                session,
                len(dropped.messages),
                MAX_UNSENT_MESSAGES,
            )

    async def _flush(self, session: str) -> int:
        """Send the waiting batches of ``session`` in order; the number of messages stored.
        Raises what the service answered (an unreachable one leaves the rest waiting)."""
        waiting = self._unsent.get(session)
        stored = 0
        while waiting:
            batch = waiting[0]
            await self.client.add_messages(
                session,
                batch.messages,
                create_session_if_missing=True,
                request_id=batch.request_id,
            )
            waiting.popleft()
            stored += len(batch.messages)
        self._unsent.pop(session, None)
        if stored:
            log.info("%s: stored %d messages that waited for the service", session, stored)
        return stored

    def _fallback_context(
        self, session: str, token_budget: int, messages: Sequence[pb.Message] | None, reason: str
    ) -> AssembledContext:
        """The newest messages within ``token_budget``, starting at a turn when one fits."""
        history = list(messages) if messages is not None else list(self._seen.get(session, ()))
        chosen: list[pb.Message] = []
        tokens = 0
        for message in reversed(history):
            cost = max(1, message.ByteSize() // _CHARS_PER_TOKEN)
            if tokens + cost > token_budget:
                break
            chosen.append(message)
            tokens += cost
        chosen.reverse()
        # Never open on a tool result whose call was cut: start at the first user turn.
        start = next((i for i, m in enumerate(chosen) if is_user_turn_start(m)), 0)
        tokens -= sum(max(1, m.ByteSize() // _CHARS_PER_TOKEN) for m in chosen[:start])
        chosen = chosen[start:]
        response = api.AssembleContextResponse(
            messages=chosen,
            estimated_tokens=tokens,
            included_message_count=len(chosen),
            dropped_message_count=len(history) - len(chosen),
        )
        return AssembledContext(session, response, fallback_reason=reason)

    async def _managed_by_server(self, session: str) -> bool:
        """Whether the session has a server-side auto-commit policy (asked once per session;
        ``forget`` asks again after an UpdateSession)."""
        if session not in self._server_managed:
            policy = (await self.client.get_session(session)).config.auto_commit
            self._server_managed[session] = bool(
                policy.pending_token_threshold
                or policy.message_count_threshold
                or policy.idle_timeout.ToNanoseconds()
            )
        return self._server_managed[session]

    def forget(self, session: str) -> None:
        """Ask the server again whether it commits ``session`` itself (its config changed)."""
        self._server_managed.pop(session, None)

    async def after_turn(
        self,
        session: str,
        new_messages: Sequence[pb.Message],
        token_budget: int,
        commit_ratio: float = 0.5,
        keep_recent: int | None = None,
        keep_recent_turns: int = 2,
    ) -> AfterTurnResult:
        """Add the turn's messages in one batch (creating the session if needed); when
        pending_tokens ≥ floor(token_budget × commit_ratio), start a commit in the background
        keeping the newest ``keep_recent_turns`` turns (or, when ``keep_recent`` is given, that
        many messages), and return without waiting for it.

        A session with a server-side auto-commit policy is committed by the server (the
        result names that commit): the engine then never commits it, so nothing runs twice.

        A commit triggered while the session's previous background commit has not answered
        Phase 1 yet starts after that answer (the previous one may have archived everything,
        and then this one ends skipped): commits of a session never race each other."""
        if token_budget <= 0:
            raise ValueError("token_budget must be positive")
        if not 0.0 <= commit_ratio <= 1.0:
            raise ValueError("commit_ratio must be between 0 and 1")
        if keep_recent is not None and not 0 <= keep_recent <= MAX_KEEP_RECENT:
            raise ValueError(f"keep_recent must be 0-{MAX_KEEP_RECENT}")
        if keep_recent is None and not 1 <= keep_recent_turns <= MAX_KEEP_TURNS:
            raise ValueError(f"keep_recent_turns must be 1-{MAX_KEEP_TURNS}")
        threshold = math.floor(token_budget * commit_ratio)
        self._remember(session, new_messages)
        batch = _Unsent(list(new_messages)) if new_messages else None
        try:
            flushed = await self._flush(session)
            if batch is None:
                self._reached()
                return AfterTurnResult(
                    session, (), (), None, threshold, None, flushed_messages=flushed
                )
            added = await self.client.add_messages(
                session,
                batch.messages,
                create_session_if_missing=True,
                request_id=batch.request_id,
            )
        except UNREACHABLE as error:
            reason = self._unreachable(error)
            if batch is not None:
                self._queue(session, batch)
            return AfterTurnResult(
                session,
                (),
                (),
                None,
                threshold,
                None,
                stored=False,
                unsent_messages=self.unsent_messages(session),
                fallback_reason=reason,
            )
        self._reached()
        commit = None
        if added.pending_tokens >= threshold and not await self._server_commits(session):
            previous = self._latest.get(session)
            commit = BackgroundCommit(
                session,
                self.client.commit(session, keep_recent)
                if keep_recent is not None
                else self.client.commit(session, keep_recent_turns=keep_recent_turns),
                after=previous if previous is not None and not previous.past_phase1 else None,
            )
            self._latest[session] = commit
            self._running.add(commit)
            commit.task.add_done_callback(functools.partial(self._finished, commit))
        return AfterTurnResult(
            session_id=session,
            added_message_ids=tuple(added.added_message_ids),
            duplicate_message_ids=tuple(added.duplicate_message_ids),
            pending_tokens=added.pending_tokens,
            threshold=threshold,
            commit=commit,
            server_commit=added.auto_commit,
            flushed_messages=flushed,
        )

    async def _server_commits(self, session: str) -> bool:
        """Whether the server commits ``session`` itself; an unreachable service answers
        yes, so this turn starts no commit (the turn itself is stored already)."""
        try:
            return await self._managed_by_server(session)
        except UNREACHABLE as error:
            self._unreachable(error)
            return True

    def _finished(self, commit: BackgroundCommit, _task: asyncio.Task[pb.CommitEvent]) -> None:
        self._running.discard(commit)

    async def compact(
        self,
        session: str,
        *,
        token_budget: int = MAX_TOKEN_BUDGET,
        tokens_before: int | None = None,
    ) -> CompactResult:
        """Archive every live message, wait for the terminal event, and return the new summary
        with the context size before and after (measured by AssembleContext within
        ``token_budget``; pass ``tokens_before`` when the runtime knows it already).

        An unreachable service ends it with the UNAVAILABLE outcome (the error says why),
        never with an exception: the runtime keeps its own context then."""
        if tokens_before is None:
            tokens_before = (await self.assemble(session, token_budget)).estimated_tokens
        stream = self.client.compact(session)
        try:
            await self._flush(session)
            terminal = await stream.wait()
        except UNREACHABLE as exc:
            reason = self._unreachable(exc)
            await stream.aclose()
            first_event = stream.first_event
            return CompactResult(
                session_id=session,
                outcome=CompactOutcome.UNAVAILABLE,
                summary="",
                tokens_before=tokens_before,
                tokens_after=tokens_before,
                commit=stream.commit or "",
                archive=first_event.phase1.archive if first_event else "",
                working_memory_version=0,
                archived_message_count=(
                    first_event.phase1.archived_message_count if first_event else 0
                ),
                error=reason,
                terminal=first_event or pb.CommitEvent(),
            )
        self._reached()
        first = stream.first_event or terminal
        summary, error, version = "", "", 0
        if terminal.stage == pb.COMMIT_STAGE_COMPLETED:
            outcome = CompactOutcome.COMPLETED
            version = terminal.completed.working_memory_version
            with contextlib.suppress(*UNREACHABLE):  # completed; only the summary is missing
                memory = await self.client.get_working_memory(session, version=version)
                summary = memory.document
        elif terminal.stage == pb.COMMIT_STAGE_FAILED:
            outcome = CompactOutcome.FAILED
            error = terminal.failed.error.message or "Phase 2 failed"
        else:
            outcome = CompactOutcome.SKIPPED
            error = first.phase1.message
        tokens_after = (await self.assemble(session, token_budget)).estimated_tokens
        return CompactResult(
            session_id=session,
            outcome=outcome,
            summary=summary,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            commit=terminal.commit,
            archive=first.phase1.archive,
            working_memory_version=version,
            archived_message_count=first.phase1.archived_message_count,
            error=error,
            terminal=terminal,
        )

    async def assemble(
        self,
        session: str,
        token_budget: int,
        *,
        system_prompt: str = "",
        context_format: api.ContextFormat.ValueType = api.CONTEXT_FORMAT_UNSPECIFIED,
        registered_tools: Sequence[str] | None = None,
        messages: Sequence[pb.Message] | None = None,
        recall_memories: bool = True,
    ) -> AssembledContext:
        """The context for the next model call (AssembleContext); ``registered_tools``: the
        recall tools the runtime registered (e.g. ``ToolExecutor.names``); ``context_format``:
        the model API whose messages ``rendered_json`` holds (none in a fallback). Long-term
        memories relevant to the newest user request are recalled into the system-prompt
        addition unless ``recall_memories`` is False.

        When the service cannot be reached the answer is a fallback (``fallback_reason``
        says why) holding ``messages`` (the runtime's own history, when it passes it) or
        else the messages this engine was given by ``after_turn``, newest within the budget.
        Turns waiting for the service are sent first, so the context includes them."""
        try:
            await self._flush(session)
            response = await self.client.assemble_context(
                session,
                token_budget,
                system_prompt=system_prompt,
                context_format=context_format,
                registered_tools=registered_tools,
                recall_memories=recall_memories,
            )
        except UNREACHABLE as error:
            reason = self._unreachable(error)
            return self._fallback_context(session, token_budget, messages, reason)
        self._reached()
        return AssembledContext(session, response)

    def running_commits(self) -> tuple[BackgroundCommit, ...]:
        """Background commits still being followed."""
        return tuple(self._running)

    async def wait_idle(self) -> list[pb.CommitEvent | BaseException]:
        """Wait for every running background commit; their terminal events, or the errors
        that ended them."""
        tasks = [c.task for c in self._running]
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    async def aclose(self) -> None:
        """Stop following background commits (Phase 2 goes on on the server)."""
        running = list(self._running)
        for commit in running:
            commit.task.cancel()
        for commit in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await commit.task
            await commit.stream.aclose()

    async def __aenter__(self) -> ContextEngine:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
