"""A commit's progress stream that survives broken connections.

Why: gRPC never retries a stream once a response has arrived, and a stream can break for many
ordinary reasons (a server restart, a mesh's maximum connection age, an idle timeout of a
proxy). The server stores every event with a per-commit sequence, so the client keeps the last
sequence it delivered and, on a break, calls WatchCommit(after_sequence=last) and carries on;
events at or below that sequence are dropped, so the caller sees each event once, in order,
ending with exactly one terminal event. A stream of a new commit first starts it (CreateCommit
or CompactSession, unary and idempotent by request_id): while that call cannot reach the
service it is repeated with the same request_id, which the server answers with the same commit.

Only transport failures resume (UNAVAILABLE, CANCELLED by the server, DEADLINE_EXCEEDED of one
stream, and INTERNAL/UNKNOWN that carry no ErrorInfo of the service, i.e. did not come from
it). An error the service reports (NOT_FOUND, INVALID_ARGUMENT, ...) is raised at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc

from wm_client import _rules, names
from wm_client.errors import ERROR_DOMAIN, UnavailableError, WmError, error_from_rpc
from wm_proto.v1 import resources_pb2 as pb

# Opens one WatchCommit attempt: given the commit's name and the last sequence delivered.
Opener = Callable[[str, int], Any]
# Starts the commit (CreateCommit or CompactSession) and returns it.
Starter = Callable[[], Awaitable[pb.Commit]]
# Whether a commit (its name) has ended with no stored event after the given sequence.
Finished = Callable[[str, int], Awaitable[bool]]

_ALWAYS_RESUMABLE = _rules.STREAM_ALWAYS_RESUMABLE
_RESUMABLE_FROM_TRANSPORT = _rules.STREAM_RESUMABLE_FROM_TRANSPORT


@dataclass(frozen=True, slots=True)
class ResumePolicy:
    """How a broken stream is resumed.

    ``idle_timeout``: with no event (heartbeats included) for this long the stream is taken for
    dead and re-opened; the server sends a heartbeat at least every 15 s, so the default leaves
    three of them. ``give_up_after``: how long to keep trying to re-attach without receiving
    anything before raising :class:`UnavailableError`. Backoff grows from ``initial_backoff``
    by ``multiplier`` up to ``max_backoff`` between attempts.
    """

    idle_timeout: float = _rules.RESUME_IDLE_TIMEOUT
    give_up_after: float = _rules.RESUME_GIVE_UP_AFTER
    initial_backoff: float = _rules.RESUME_INITIAL_BACKOFF
    max_backoff: float = _rules.RESUME_MAX_BACKOFF
    multiplier: float = _rules.RESUME_MULTIPLIER


def is_resumable(error: WmError) -> bool:
    """True for a failure of the connection rather than an answer of the service."""
    if error.code in _ALWAYS_RESUMABLE:
        return True
    return error.code in _RESUMABLE_FROM_TRANSPORT and error.domain != ERROR_DOMAIN


class CommitStream:
    """The events of one commit, resumed across disconnects; an async iterator.

    Heartbeats are skipped unless ``heartbeats`` is true (a progress display uses them to show
    that the server is alive). Closing the stream never cancels Phase 2 on the server.
    ``commit`` is the commit's name, known once ``start`` answered (or given, to watch one);
    ``started`` is the Commit that start returned.
    """

    def __init__(
        self,
        opener: Opener,
        *,
        session: str,
        start: Starter | None = None,
        commit: str | None = None,
        after_sequence: int = 0,
        heartbeats: bool = False,
        policy: ResumePolicy | None = None,
        finished: Finished | None = None,
    ) -> None:
        if start is None and commit is None:
            raise ValueError("a commit stream needs a commit to watch or a way to start one")
        self._open = opener
        self._start = start
        self._finished = finished
        self.session = session
        self.commit: str | None = commit
        self.started: pb.Commit | None = None
        self.last_sequence = after_sequence
        self.heartbeats = heartbeats
        self.policy = policy or ResumePolicy()
        self.first_event: pb.CommitEvent | None = None
        self.terminal: pb.CommitEvent | None = None
        self.resumes = 0
        self.errors: deque[WmError] = deque(maxlen=50)  # the latest reasons for resuming
        self._call: Any = None
        self._closed = False

    # --- the iterator ---------------------------------------------------------------------------
    def __aiter__(self) -> CommitStream:
        return self

    async def __anext__(self) -> pb.CommitEvent:
        while True:
            if self.terminal is not None or self._closed:
                await self._cancel_call()
                raise StopAsyncIteration
            event = await self._next_raw()
            if event is None:  # the commit had ended before after_sequence: nothing more
                self._closed = True
                raise StopAsyncIteration
            if event.stage == pb.COMMIT_STAGE_HEARTBEAT:
                if self.heartbeats:
                    return event
                continue
            if event.sequence <= self.last_sequence:
                continue  # replayed after a resume: already delivered
            self.last_sequence = event.sequence
            if self.first_event is None:
                self.first_event = event
            if event.terminal:
                self.terminal = event
            return event

    async def _next_raw(self) -> pb.CommitEvent | None:
        """The next message of the current attempt, re-opening attempts as needed; None when
        the server has nothing after our sequence for a commit that has ended."""
        broken_since: float | None = None
        backoff = self.policy.initial_backoff
        while True:
            try:
                if self.commit is None:
                    await self._start_commit()
                if self._call is None:
                    assert self.commit is not None
                    self._call = self._open(self.commit, self.last_sequence)
                async with asyncio.timeout(self.policy.idle_timeout):
                    message = await self._call.read()
            except WmError as failure:  # starting the commit did not reach the service
                if not is_resumable(failure):
                    raise
                self.errors.append(failure)
            except grpc.aio.AioRpcError as exc:
                error = error_from_rpc(exc)
                self._call = None
                if not is_resumable(error):
                    raise error from exc
                self.errors.append(error)
            except TimeoutError:
                await self._cancel_call()
                self.errors.append(
                    UnavailableError(
                        grpc.StatusCode.UNAVAILABLE,
                        f"no event for {self.policy.idle_timeout:g} s; re-attaching",
                    )
                )
            else:
                if message is not grpc.aio.EOF:
                    return message  # type: ignore[no-any-return]
                # The server ended the stream before the terminal event (its stream lifetime
                # cap, a graceful shutdown), or the commit ended before after_sequence.
                self._call = None
                if (
                    self._finished is not None
                    and self.commit is not None
                    and await self._finished(self.commit, self.last_sequence)
                ):
                    return None
            now = time.monotonic()
            broken_since = broken_since or now
            if now - broken_since > self.policy.give_up_after:
                last = self.errors[-1] if self.errors else None
                raise UnavailableError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"commit stream lost and not resumed within {self.policy.give_up_after:g} s"
                    + (f": {last.message}" if last else ""),
                    status=last.status if last else None,
                )
            self.resumes += 1
            await asyncio.sleep(backoff)
            backoff = min(backoff * self.policy.multiplier, self.policy.max_backoff)

    async def _start_commit(self) -> None:
        assert self._start is not None
        self.started = await self._start()
        self.commit = self.started.name

    @property
    def commit_id(self) -> str:
        """The commit's id (the last segment of its name); "" before it started."""
        return names.short_id(self.commit) if self.commit else ""

    # --- conveniences ---------------------------------------------------------------------------
    async def phase1(self) -> pb.CommitEvent:
        """The first event (the Phase 1 outcome); the stream can be iterated on afterwards."""
        if self.first_event is None:
            await self.__anext__()
        assert self.first_event is not None
        return self.first_event

    async def wait(self) -> pb.CommitEvent:
        """Read until the terminal event (completed, failed or skipped) and return it."""
        async for _ in self:
            pass
        if self.terminal is None:
            raise RuntimeError(
                "no terminal event: the stream was closed, or it started after the commit's"
                " terminal sequence"
            )
        return self.terminal

    async def collect(self) -> list[pb.CommitEvent]:
        """Every remaining event up to and including the terminal one."""
        return [event async for event in self]

    async def aclose(self) -> None:
        """Stop reading. Phase 2 goes on on the server; WatchCommit can re-attach later."""
        self._closed = True
        await self._cancel_call()

    async def _cancel_call(self) -> None:
        call, self._call = self._call, None
        if call is not None:
            call.cancel()

    async def __aenter__(self) -> CommitStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
