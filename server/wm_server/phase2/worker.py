"""The Phase 2 worker: claims archived commits in order and folds them into the WM.

It runs inside the server process but outside every RPC handler, so no client can cancel it.
Each job is claimed with a lease that a side task renews; a crash leaves the lease to expire
and the job is claimed again (here after a restart, or by another replica). A graceful stop
hands running jobs back to the queue at once.

A provider outage (connection, timeout, 429, 5xx, 529) is waited out: the job backs off
exponentially with jitter until its age reaches ``max_wait_seconds``, and a circuit breaker
shared by the loops stops claiming jobs while the outage lasts, so sessions do not spend
calls that cannot succeed. Other retryable failures (an unusable answer) count attempts.
Only then, or for an error that no retry can fix, is the commit FAILED with its reason: the
previous working memory stays current, and the archive's messages remain uncovered until a
later Phase 2 or RetryCommit covers them.

Long-term memory extraction runs after the working memory is generated and before it is
stored (``services.extraction``): the owner's most similar memories are read, the provider
proposes memory ops, the guards make a plan, and ``JobService.complete`` applies the plan in
the transaction that stores the working memory and completes the commit. So a Phase 2 that
crashes or loses its lease before that transaction applied nothing, and its re-run reads
the memories afresh (a CREATE of what exists is a duplicate, not a second memory). What can
go wrong, and what we chose:

- a provider outage during extraction (transient) is waited out exactly like one during the
  working-memory call: the breaker counts it and the whole job backs off (the working memory
  is generated again on the next attempt; nothing was stored);
- any other failure (the provider refuses the call, or its answer has nothing readable)
  does not hold the working memory back: the commit COMPLETES with the working memory stored
  and a memory diff in state FAILED saying why, and the next commit of the session offers
  that archive to its own extraction again (up to three such archives), marking it RECOVERED
  once extracted. The commit is never FAILED, and the archive is never silently skipped;
- extraction off (``WM_MEMORY_EXTRACTION=false``, or the session's ``memory_extraction``
  false) makes no model call and stores a diff in state OFF.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from wm_core import (
    DEFAULT_LIMITS,
    MAX_PENDING_TOKENS,
    PendingItem,
    WmLimits,
    abstract_of,
    archive_name,
    estimate_tokens,
    refused_items,
    settle_pending,
    unfold_pending,
)
from wm_server.breaker import BreakerSettings, CircuitBreaker, backoff_delay
from wm_server.cancellation import cancel_and_wait, wait_set
from wm_server.errors import ServiceError
from wm_server.llm.chain import (
    Backfill,
    ChainEvent,
    GenerationFailed,
    LlmCallFinished,
    LlmCallStarted,
)
from wm_server.llm.port import LlmError, LlmProvider, usage_json
from wm_server.phase2.chunked import InputBudget, generate_in_chunks
from wm_server.services.event_bus import EventBus
from wm_server.services.events import GuardDecided
from wm_server.services.extraction import MemoryState, extract
from wm_server.services.jobs import JobService, LeaseLost
from wm_server.storage import codec
from wm_server.storage.records import ClaimedJob, Phase2Completion
from wm_server.tracing import NO_TRACING, ModelCall, Tracing

log = structlog.get_logger("wm_server.phase2")


class PostStep(Protocol):
    """A step that must finish before a commit counts as completed (e.g. indexing)."""

    async def __call__(self, job: ClaimedJob, document: str) -> None: ...


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


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 4
    max_attempts: int = 3
    retry_base_delay: float = 1.0
    lease_seconds: float = 60.0
    poll_seconds: float = 1.0
    max_wait_seconds: float = 3600.0  # how long a job waits out a provider outage
    retry_max_delay: float = 300.0  # the backoff's ceiling
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    input: InputBudget = field(default_factory=InputBudget)
    limits: WmLimits = DEFAULT_LIMITS
    max_pending_items: int = 30  # refused items a session keeps for the next update
    max_pending_tokens: int = MAX_PENDING_TOKENS  # what they may take in all
    max_chunks: int = 16  # chunks of one commit's input before its messages are cut
    memory_extraction: bool = True  # the server's switch (sessions can turn it off too)


class Phase2Worker:
    def __init__(
        self,
        jobs: JobService,
        provider: LlmProvider,
        bus: EventBus,
        settings: WorkerSettings,
        *,
        post_steps: Sequence[PostStep] = (),
        observer: Phase2Observer | None = None,
        backfill: Backfill | None = None,
        provider_for: Callable[[str | None], LlmProvider] | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self._jobs = jobs
        self._tracing = tracing  # spans of the stages and model calls (no-ops when off)
        self._provider = provider
        # The provider a session chose in its config (None: ``provider``, the default).
        self._provider_for = provider_for or (lambda name: provider)
        self._bus = bus
        self._settings = settings
        self._post_steps = tuple(post_steps)
        self._backfill = backfill  # fills sections a model left unread (chain.py)
        self._observer = observer or _NoObserver()
        self._wake = asyncio.Event()
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
        self._wake.set()

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
                job = await self._jobs.claim(self._settings.lease_seconds)
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
                self._wake.clear()
                await wait_set(self._wake, self._settings.poll_seconds)
                continue
            self._wake.set()  # another loop may find more work
            try:
                await self._run_with_lease(job)
            finally:
                if probe:  # ended without reaching the provider (lease lost, storage down)
                    self.breaker.probe_unused()

    async def _run_with_lease(self, job: ClaimedJob) -> None:
        runner = asyncio.create_task(self._traced_run(job))
        renewer = asyncio.create_task(self._renew(job, runner))
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
                await self._jobs.release(job)
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
            self._bus.publish(job.commit_id)

    async def _renew(self, job: ClaimedJob, runner: asyncio.Task[None]) -> None:
        interval = self._settings.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                renewed = await self._jobs.renew(job, self._settings.lease_seconds)
            except Exception as error:  # an outage: try again before the lease runs out
                log.warning("phase2_renew_failed", commit_id=job.commit_id, error=str(error))
                continue
            if not renewed:
                log.warning("phase2_lease_not_renewed", commit_id=job.commit_id)
                runner.cancel()
                return

    async def _traced_run(self, job: ClaimedJob) -> None:
        """One attempt of a job under its span (the stages' and model calls' parent)."""
        attributes: dict[str, str | int] = {
            "wm.commit_id": job.commit_id,
            "wm.session_id": job.session_id,
            "wm.phase2.attempt": job.attempts,
        }
        with self._tracing.span("wm.phase2", **attributes):
            await self._run(job)

    async def _run(self, job: ClaimedJob) -> None:
        started = time.monotonic()
        span = self._tracing.span
        for _ in range(5):  # re-run on a WM changed under us (ApplyWorkingMemoryOps)
            with span("wm.phase2.read_input"):
                data = await self._jobs.read_input(job)
            previous = data.previous
            await self._jobs.start(job, data)
            with span("wm.phase2.index_archive"):
                await self._jobs.index_archive(job)
            self._bus.publish(job.commit_id)
            provider = self._provider_for(data.provider)
            breaker = self.breaker_for(provider)

            calls: list[ModelCall] = []  # the model call in flight (calls are sequential)

            async def on_event(
                event: ChainEvent,
                breaker: CircuitBreaker = breaker,
                calls: list[ModelCall] = calls,
            ) -> None:
                if isinstance(event, LlmCallStarted):
                    calls.append(self._tracing.model_call(event))
                elif isinstance(event, LlmCallFinished) and calls:
                    calls.pop().finish(event)
                if isinstance(event, LlmCallFinished) and not event.error:
                    breaker.succeeded()  # the provider answers: no outage
                await self._jobs.record(job, event)
                self._bus.publish(job.commit_id)

            try:
                with span("wm.phase2.generate", **{"wm.provider": provider.name}):
                    generation = await generate_in_chunks(
                        provider,
                        previous_document=previous.document if previous else None,
                        messages=data.messages,
                        input_tokens=self._settings.input.for_provider(provider),
                        on_event=on_event,
                        limits=self._settings.limits,
                        backfill=self._backfill,
                        pending=data.pending,
                        max_chunks=self._settings.max_chunks,
                    )
                with span("wm.phase2.post_steps"):
                    for step in self._post_steps:
                        await step(job, generation.document)
                # What leaves the pending items (their bound) is written to long-term memory
                # by this commit's extraction (wm_core.safekeeping_ops), so compute it first.
                refused = refused_items(generation.decisions, job.archive_seq)
                pending, dropped = settle_pending(
                    data.pending,
                    refused,
                    generation.document,
                    self._settings.max_pending_items,
                    self._settings.max_pending_tokens,
                )
                with span("wm.phase2.extract_memories", **{"wm.provider": provider.name}):
                    context = await self._jobs.memory_context(
                        job, data.messages, enabled_by_server=self._settings.memory_extraction
                    )
                    extraction = await extract(
                        provider,
                        context,
                        messages=data.messages,
                        pending=unfold_pending(data.pending),  # each refused item on its own
                        archive_id=archive_name(job.archive_seq),
                        input_tokens=self._settings.input.for_provider(provider),
                        on_event=on_event,
                        message_dates=data.message_dates,
                        dropped=dropped,
                    )
            except LlmError as error:
                if error.transient:
                    breaker.failed()
                    await self._wait_out(job, str(error), breaker)
                    self._observer.job_finished("retry", time.monotonic() - started)
                    return
                breaker.succeeded()  # the provider answered, if only to refuse
                await self._fail_or_retry(
                    job, "LLM_UNAVAILABLE" if error.retryable else "LLM_REJECTED",
                    str(error), error.retryable,
                )  # fmt: skip
                self._observer.job_finished(
                    "retry" if error.retryable else "failed", time.monotonic() - started
                )
                return
            except GenerationFailed as error:
                retryable = error.retryable
                await self._fail_or_retry(job, "GENERATION_FAILED", str(error), retryable)
                self._observer.job_finished(
                    "retry" if retryable else "failed", time.monotonic() - started
                )
                return
            except (asyncio.CancelledError, LeaseLost, ServiceError):
                raise  # storage errors: the lease expires and the job runs again
            except Exception as error:
                log.exception("phase2_error", commit_id=job.commit_id)
                await self._fail_or_retry(job, "INTERNAL", repr(error), True)
                self._observer.job_finished("error", time.monotonic() - started)
                return

            for decision in generation.decisions:
                self._observer.guard_intervened(decision.section, decision.guard.value)
            for kind, count in (
                ("input", generation.usage.input_tokens),
                ("output", generation.usage.output_tokens),
                ("cache_read", generation.usage.cache_read_input_tokens),
                ("cache_write", generation.usage.cache_creation_input_tokens),
            ):
                self._observer.tokens_used(kind, count)
            lost: tuple[PendingItem, ...] = ()
            if dropped and extraction.state is MemoryState.FAILED:
                # Not written anywhere: they stay pending, over the bound, until an extraction
                # that works takes them (the next commit offers them again) — up to a second
                # bound's worth, so a model that keeps failing cannot grow the list (and every
                # prompt that shows it) without end; past that the oldest are lost, counted.
                pending, lost = settle_pending(
                    (*dropped, *pending),
                    (),
                    generation.document,
                    2 * self._settings.max_pending_items,
                    2 * self._settings.max_pending_tokens,
                )
                dropped = ()
            if dropped and extraction.state is MemoryState.OFF:
                lost = dropped  # no long-term memory for this session: what the bound drops
            if lost:
                log.warning(
                    "phase2_pending_items_dropped", commit_id=job.commit_id, count=len(lost)
                )
            completion = Phase2Completion(
                document=generation.document,
                estimated_tokens=estimate_tokens(generation.document),
                abstract=abstract_of(generation.document),
                decisions_json=codec.decisions_json(generation.decisions),
                usage_json=usage_json(generation.usage),
                covered_seqs=data.covered_seqs,
                pending=pending,
                pending_dropped=len(lost),
            )
            with span("wm.phase2.store"):
                done = await self._jobs.complete(
                    job,
                    previous.version if previous else 0,
                    completion,
                    tuple(GuardDecided(d) for d in generation.decisions),
                    extraction,
                )
            if done is not None:
                empty = json.loads(done[0].memory_diff_json or "{}").get("empty_reason")
                if empty:
                    self._observer.memory_extraction_empty(empty)
                if extraction.state is MemoryState.FAILED:
                    log.warning(
                        "phase2_memory_extraction_failed",
                        commit_id=job.commit_id,
                        error=extraction.message,
                    )
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
        await self._fail_or_retry(job, "INTERNAL", "working memory kept changing", True)

    async def _wait_out(self, job: ClaimedJob, message: str, breaker: CircuitBreaker) -> None:
        """A provider outage: back off (at least until the breaker lets a probe through),
        or fail once the job is older than the maximum wait."""
        now = time.time()
        remaining = self._settings.max_wait_seconds - (now - job.queued_at)
        if remaining <= 0:
            waited = f"provider unavailable for {self._settings.max_wait_seconds:g}s"
            log.error("phase2_failed", commit_id=job.commit_id, reason="LLM_UNAVAILABLE")
            await self._jobs.fail(job, "LLM_UNAVAILABLE", f"{waited}: {message}")
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
        await self._jobs.schedule_retry(
            job, delay, message, next_attempt_at=now + delay, wait_remaining=remaining
        )

    async def _fail_or_retry(
        self, job: ClaimedJob, reason: str, message: str, retryable: bool
    ) -> None:
        if retryable and job.attempts < self._settings.max_attempts:
            delay = self._settings.retry_base_delay * (2 ** (job.attempts - 1))
            log.warning(
                "phase2_retry",
                commit_id=job.commit_id,
                attempt=job.attempts,
                delay=delay,
                error=message,
            )
            await self._jobs.schedule_retry(job, delay, message)
            return
        log.error("phase2_failed", commit_id=job.commit_id, reason=reason, error=message)
        await self._jobs.fail(job, reason, message)
