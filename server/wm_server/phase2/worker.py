"""The Phase 2 worker: claims archived commits in order and runs each through the pipeline.

One attempt is the stages of ``phase2/stages.py`` in order over an immutable ``State``
(bound the input → update the working memory → extract memories → embed and index →
complete); everything around them lives here, once: the lease a side task renews, the
breaker, the retries, the events, the spans and the metrics. The transactions are
``phase2/store.py``'s: three for a commit that completes at the first try (claim, the
events at the first model request, completion), written so that a crash anywhere leaves a
state the next attempt resumes from.

It runs inside the server process but outside every RPC handler, so no client can cancel it.
A crash leaves the lease to expire and the job is claimed again (here after a restart, or by
another replica). A graceful stop hands running jobs back to the queue at once.

A provider outage (connection, timeout, 429, 5xx, 529) is waited out: the job backs off
exponentially with jitter until its age reaches ``max_wait_seconds``, and a circuit breaker
shared by the loops stops claiming jobs while the outage lasts, so sessions do not spend
calls that cannot succeed. Other retryable failures (an unusable answer) count attempts.
Only then, or for an error that no retry can fix, is the commit FAILED with its reason: the
previous working memory stays current, and the archive's messages remain uncovered until a
later Phase 2 or RetryCommit covers them.

Memory extraction (the third stage) fails softly. A provider outage during it is waited out
exactly like one during the working-memory call (nothing was stored; the working memory is
generated again next time). Any other failure (the provider refuses the call, or its answer
has nothing readable) does not hold the working memory back: the commit COMPLETES with the
working memory stored and a memory diff in state FAILED saying why, and the next commit of
the session offers that archive to its own extraction again (up to three such archives),
marking it RECOVERED once extracted. Extraction off (``WM_MEMORY_EXTRACTION=false``, or the
session's ``memory_extraction`` false) makes no model call and stores a diff in state OFF.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from wm_server.breaker import CircuitBreaker, backoff_delay
from wm_server.cancellation import cancel_and_wait
from wm_server.errors import ServiceError
from wm_server.llm.chain import (
    Backfill,
    ChainEvent,
    GenerationFailed,
    LlmCallFinished,
    LlmCallStarted,
)
from wm_server.llm.port import LlmError, LlmProvider
from wm_server.phase2 import stages
from wm_server.phase2.settings import WorkerSettings
from wm_server.phase2.state import ClaimedJob, State
from wm_server.phase2.store import JobStore, LeaseLost
from wm_server.services.commit_event_log import CommitEvent
from wm_server.services.embedding_index import EmbeddingIndexer
from wm_server.services.extraction import MemoryState
from wm_server.telemetry.tracing import NO_TRACING, ModelCall, Tracing

__all__ = ["Phase2Observer", "Phase2Worker", "WorkerSettings"]

log = structlog.get_logger("wm_server.phase2")


class Phase2Observer(Protocol):
    """Receives outcomes for metrics; every method must be cheap and never raise."""

    def job_finished(self, outcome: str, seconds: float) -> None: ...

    def tokens_used(self, kind: str, count: int) -> None: ...

    def guard_intervened(self, section: str, guard: str) -> None: ...

    def memory_extraction_empty(self, reason: str) -> None:
        """A commit's extraction wrote nothing, for ``reason`` (services.extraction.EmptyReason)."""
        ...


class _NoObserver:
    def job_finished(self, outcome: str, seconds: float) -> None:
        pass

    def tokens_used(self, kind: str, count: int) -> None:
        pass

    def guard_intervened(self, section: str, guard: str) -> None:
        pass

    def memory_extraction_empty(self, reason: str) -> None:
        pass


# The stages of an attempt before its completion, in order, with their span names.
STAGES: tuple[tuple[str, Callable[[State, stages.Tools], Awaitable[State]]], ...] = (
    ("wm.phase2.bound_input", stages.bound_input),
    ("wm.phase2.update_working_memory", stages.update_working_memory),
    ("wm.phase2.extract_memories", stages.extract_memories),
    ("wm.phase2.embed_and_index", stages.embed_and_index),
)


class _Doorbell:
    """Wakes one idle claiming loop per ring, or the next loop to wait when none is idle.

    An event would wake every idle loop for each new job: all of them would claim, one
    would get it and the others would find nothing (on PostgreSQL, three empty claim
    transactions beside each job's own statements). A loop that gets a job rings again
    when its claim saw another claimable job, so one more loop looks for it, and so on
    while there is work; a job that becomes claimable later rings for itself (a commit, a
    retry), is found by the loop that finished the job before it, or by the poll."""

    def __init__(self) -> None:
        self._idle: deque[asyncio.Future[None]] = deque()
        self._rung = False  # rung while no loop was idle: the next wait returns at once

    def ring(self) -> None:
        while self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._rung = True

    async def wait(self, seconds: float) -> None:
        """Until a ring, or ``seconds`` (the poll that finds work nobody rang for)."""
        if self._rung:
            self._rung = False
            return
        waiter = asyncio.get_running_loop().create_future()
        self._idle.append(waiter)
        try:
            async with asyncio.timeout(seconds):
                await waiter
        except TimeoutError:
            pass
        finally:
            if not waiter.done():
                waiter.cancel()  # ring() passes over it


class _Journal:
    """The attempt's events not written yet: the model calls' (the chain's) and what the
    worker adds. They are written at the first model request, then at a request only when
    the last write is ``progress_seconds`` old, and the rest with whatever ends the
    attempt (completion, retry, failure, release), in the order they came."""

    def __init__(self, store: JobStore, job: ClaimedJob, progress_seconds: float) -> None:
        self._store = store
        self.job = job
        self._every = progress_seconds
        self._events: list[CommitEvent] = []
        self._written: float | None = None  # monotonic time of the last write

    async def add(self, event: CommitEvent) -> None:
        """Keep ``event``; write what is kept when a model call starts, at most once per
        ``every`` seconds."""
        self._events.append(event)
        if not isinstance(event, LlmCallStarted):
            return
        now = time.monotonic()
        if self._written is not None and now - self._written < self._every:
            return
        self.job = await self._store.record(self.job, *self.take())
        self._written = now

    def take(self) -> tuple[CommitEvent, ...]:
        events, self._events = tuple(self._events), []
        return events


class Phase2Worker:
    def __init__(
        self,
        store: JobStore,
        provider: LlmProvider,
        settings: WorkerSettings,
        *,
        indexer: EmbeddingIndexer | None = None,
        observer: Phase2Observer | None = None,
        backfill: Backfill | None = None,
        provider_for: Callable[[str | None], LlmProvider] | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self._store = store
        self._tracing = tracing  # spans of the stages and model calls (no-ops when off)
        self._provider = provider
        # The provider a session chose in its config (None: ``provider``, the default).
        self._provider_for = provider_for or (lambda name: provider)
        self._settings = settings
        self._indexer = indexer  # the archive's vectors (None: no embedder)
        self._backfill = backfill  # fills sections a model left unread (chain.py)
        self._observer = observer or _NoObserver()
        self._wake = _Doorbell()
        # One breaker per provider: the default one's gates claiming (most sessions use it);
        # a session's own provider backs its jobs off by its own breaker.
        self._breakers: dict[str, CircuitBreaker] = {}
        self.breaker = self.breaker_for(provider)
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False

    def breaker_for(self, provider: LlmProvider) -> CircuitBreaker:
        breaker = self._breakers.get(provider.name)
        if breaker is None:
            breaker = self._breakers[provider.name] = CircuitBreaker(self._settings.breaker)
        return breaker

    def wake(self) -> None:
        """New work may be claimable (a commit, a retry)."""
        self._wake.ring()

    async def start(self) -> None:
        for index in range(self._settings.concurrency):
            self._loops.append(asyncio.create_task(self._loop(), name=f"phase2-{index}"))

    async def stop(self) -> None:
        """Stop claiming; running jobs give their lease back so they resume elsewhere."""
        self._stopping = True
        await asyncio.gather(*(cancel_and_wait(task) for task in self._loops))
        self._loops.clear()

    async def _loop(self) -> None:
        backoff = 0.0  # grows while storage is unavailable, so an outage is not a busy loop
        while not self._stopping:
            probe = await self.breaker.admit()
            try:
                job = await self._store.claim(self._settings.lease_seconds)
                backoff = 0.0
            except asyncio.CancelledError:
                if probe:
                    self.breaker.probe_unused()
                raise
            except Exception as error:
                if probe:
                    self.breaker.probe_unused()
                backoff = min(max(backoff * 2, 0.5), 10.0)
                if isinstance(error, ServiceError):
                    log.warning("phase2_claim_failed", error=str(error), retry_in=backoff)
                else:
                    log.exception("phase2_claim_failed", retry_in=backoff)
                await asyncio.sleep(backoff)
                continue
            if job is None:
                if probe:
                    self.breaker.probe_unused()
                await self._wake.wait(self._settings.poll_seconds)
                continue
            if job.others_claimable:
                self._wake.ring()  # another loop finds more work
            try:
                await self._run_with_lease(job)
            finally:
                if probe:  # ended without reaching the provider (lease lost, storage down)
                    self.breaker.probe_unused()

    async def _run_with_lease(self, job: ClaimedJob) -> None:
        journal = _Journal(self._store, job, self._settings.progress_seconds)
        runner = asyncio.create_task(self._traced_run(journal), name=f"phase2-job-{job.commit_id}")
        renewer = asyncio.create_task(self._renew(journal, runner))
        current = asyncio.current_task()
        try:
            await runner
        except asyncio.CancelledError:
            if current is None or not current.cancelling():
                # The renewer stopped the runner: the lease is gone, another worker has it.
                log.warning("phase2_lease_lost", commit_id=job.commit_id)
                return
            with contextlib.suppress(BaseException):  # best effort: give the lease back
                await cancel_and_wait(runner)
            with contextlib.suppress(Exception):
                await self._store.release(journal.job, journal.take())
                log.info("phase2_released", commit_id=job.commit_id)
            raise
        except LeaseLost:
            log.warning("phase2_lease_lost", commit_id=job.commit_id)
        except ServiceError as error:  # storage unavailable: the lease expires, it runs again
            log.warning("phase2_interrupted", commit_id=job.commit_id, error=str(error))
            await asyncio.sleep(1.0)
        except Exception:
            log.exception("phase2_crashed", commit_id=job.commit_id)
        finally:
            await cancel_and_wait(renewer)

    async def _renew(self, journal: _Journal, runner: asyncio.Task[None]) -> None:
        interval = self._settings.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            job = journal.job
            try:
                renewed = await self._store.renew(job, self._settings.lease_seconds)
            except Exception as error:  # an outage: try again before the lease runs out
                log.warning("phase2_renew_failed", commit_id=job.commit_id, error=str(error))
                continue
            if not renewed:
                log.warning("phase2_lease_not_renewed", commit_id=job.commit_id)
                runner.cancel()
                return

    async def _traced_run(self, journal: _Journal) -> None:
        """One attempt of a job under its span (the stages' and model calls' parent)."""
        job = journal.job
        attributes: dict[str, str | int] = {
            "wm.commit_id": job.commit_id,
            "wm.session_id": job.session_id,
            "wm.phase2.attempt": job.attempts,
        }
        with self._tracing.span("wm.phase2", **attributes):
            await self._run(journal)

    async def _run(self, journal: _Journal) -> None:
        """The stages in order, then the completion; a working memory changed under the
        attempt (ApplyWorkingMemoryOps) runs them again on the newer one."""
        started = time.monotonic()
        span = self._tracing.span
        for _ in range(5):
            job = journal.job
            state = State(job)
            tools: stages.Tools | None = None
            try:
                # The session's provider is known once the input is read.
                state = await self._stage(STAGES[0], state, self._tools(journal, None))
                tools = self._tools(journal, state.data.provider)
                for stage in STAGES[1:]:
                    state = await self._stage(stage, state, tools)
            except LlmError as error:
                breaker = self.breaker_for(tools.provider if tools else self._provider)
                if error.transient:
                    breaker.failed()
                    await self._wait_out(journal, str(error), breaker)
                    self._observer.job_finished("retry", time.monotonic() - started)
                    return
                breaker.succeeded()  # the provider answered, if only to refuse
                await self._fail_or_retry(
                    journal, "LLM_UNAVAILABLE" if error.retryable else "LLM_REJECTED",
                    str(error), error.retryable,
                )  # fmt: skip
                self._observer.job_finished(
                    "retry" if error.retryable else "failed", time.monotonic() - started
                )
                return
            except GenerationFailed as error:
                retryable = error.retryable
                await self._fail_or_retry(journal, "GENERATION_FAILED", str(error), retryable)
                self._observer.job_finished(
                    "retry" if retryable else "failed", time.monotonic() - started
                )
                return
            except (asyncio.CancelledError, LeaseLost, ServiceError):
                raise  # storage errors: the lease expires and the job runs again
            except Exception as error:
                log.exception("phase2_error", commit_id=job.commit_id)
                await self._fail_or_retry(journal, "INTERNAL", repr(error), True)
                self._observer.job_finished("error", time.monotonic() - started)
                return

            self._observe(state)
            with span("wm.phase2.complete"):
                done = await stages.complete(state, tools, journal.take())
            if done is not None:
                empty = stages.empty_reason(done)
                if self._indexer is not None and state.index is not None:
                    self._indexer.stored(state.index.vectors)
                    if stages.leaves_rows_unembedded(state, empty):
                        self._indexer.wake()
                if empty:
                    self._observer.memory_extraction_empty(empty)
                log.info(
                    "phase2_completed",
                    commit_id=job.commit_id,
                    session_id=job.session_id,
                    version=done[1].version,
                    attempts=job.attempts,
                )
                self._observer.job_finished("completed", time.monotonic() - started)
                return
            log.info("phase2_rerun_on_newer_wm", commit_id=job.commit_id)
            journal.job = await self._store.restart(job, journal.take())
        await self._fail_or_retry(journal, "INTERNAL", "working memory kept changing", True)

    async def _stage(
        self,
        stage: tuple[str, Callable[[State, stages.Tools], Awaitable[State]]],
        state: State,
        tools: stages.Tools,
    ) -> State:
        name, run = stage
        with self._tracing.span(name, **{"wm.provider": tools.provider.name}):
            return await run(state, tools)

    def _tools(self, journal: _Journal, provider_name: str | None) -> stages.Tools:
        """What the stages use; the events of the model calls go through the journal, and
        tell the breaker and the tracing what the provider does."""
        provider = self._provider_for(provider_name)
        breaker = self.breaker_for(provider)
        calls: list[ModelCall] = []  # the model call in flight (calls are sequential)

        async def on_event(event: ChainEvent) -> None:
            if isinstance(event, LlmCallStarted):
                calls.append(self._tracing.model_call(event))
            elif isinstance(event, LlmCallFinished) and calls:
                calls.pop().finish(event)
            if isinstance(event, LlmCallFinished) and not event.error:
                breaker.succeeded()  # the provider answers: no outage
            await journal.add(event)

        return stages.Tools(
            self._store, provider, self._settings, on_event, self._backfill, self._indexer
        )

    def _observe(self, state: State) -> None:
        """Metrics and logs of an attempt about to complete."""
        generation, job = state.generated, state.job
        for decision in generation.decisions:
            self._observer.guard_intervened(decision.section, decision.guard.value)
        for kind, count in (
            ("input", generation.usage.input_tokens),
            ("output", generation.usage.output_tokens),
            ("cache_read", generation.usage.cache_read_input_tokens),
            ("cache_write", generation.usage.cache_creation_input_tokens),
        ):
            self._observer.tokens_used(kind, count)
        if state.lost:
            log.warning(
                "phase2_pending_items_dropped", commit_id=job.commit_id, count=len(state.lost)
            )
        if state.extracted.state is MemoryState.FAILED:
            log.warning(
                "phase2_memory_extraction_failed",
                commit_id=job.commit_id,
                error=state.extracted.message,
            )

    async def _wait_out(self, journal: _Journal, message: str, breaker: CircuitBreaker) -> None:
        """A provider outage: back off (at least until the breaker lets a probe through),
        or fail once the job is older than the maximum wait."""
        job = journal.job
        now = time.time()
        remaining = self._settings.max_wait_seconds - (now - job.queued_at)
        if remaining <= 0:
            waited = f"provider unavailable for {self._settings.max_wait_seconds:g}s"
            log.error("phase2_failed", commit_id=job.commit_id, reason="LLM_UNAVAILABLE")
            await self._store.fail(job, "LLM_UNAVAILABLE", f"{waited}: {message}", journal.take())
            return
        delay = backoff_delay(
            job.attempts, self._settings.retry_base_delay, self._settings.retry_max_delay
        )
        delay = min(max(delay, breaker.remaining()), remaining)
        log.warning(
            "phase2_waiting_for_provider",
            commit_id=job.commit_id,
            attempt=job.attempts,
            delay=round(delay, 3),
            breaker=breaker.state.value,
            wait_remaining=round(remaining, 1),
            error=message,
        )
        await self._store.schedule_retry(
            job, delay, message, events=journal.take(), next_attempt_at=now + delay,
            wait_remaining=remaining,
        )  # fmt: skip

    async def _fail_or_retry(
        self, journal: _Journal, reason: str, message: str, retryable: bool
    ) -> None:
        job = journal.job
        if retryable and job.attempts < self._settings.max_attempts:
            delay = self._settings.retry_base_delay * (2 ** (job.attempts - 1))
            log.warning(
                "phase2_retry",
                commit_id=job.commit_id,
                attempt=job.attempts,
                delay=delay,
                error=message,
            )
            await self._store.schedule_retry(job, delay, message, events=journal.take())
            return
        log.error("phase2_failed", commit_id=job.commit_id, reason=reason, error=message)
        await self._store.fail(job, reason, message, journal.take())
