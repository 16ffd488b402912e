"""The Phase 2 worker: claims archived commits in order and folds them into the WM.

It runs inside the server process but outside every RPC handler, so no client can cancel it.
Each job is claimed with a lease that a side task renews; a crash leaves the lease to expire
and the job is claimed again (here after a restart, or by another replica). A graceful stop
hands running jobs back to the queue at once. Transient model failures retry with
exponential backoff; after the last attempt the commit is FAILED with its reason, the
previous working memory stays current, and the archive's messages remain uncovered until a
later Phase 2 or RetryCommit covers them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from wm_core import abstract_of, estimate_tokens
from wm_server import wire
from wm_server.errors import ServiceError
from wm_server.llm.chain import ChainEvent, GenerationFailed, generate_working_memory
from wm_server.llm.port import LlmError, LlmProvider
from wm_server.services.event_bus import EventBus
from wm_server.services.events import GuardDecided
from wm_server.services.jobs import JobService, LeaseLost
from wm_server.storage.records import ClaimedJob, Phase2Completion

log = structlog.get_logger("wm_server.phase2")


class PostStep(Protocol):
    """A step that must finish before a commit counts as completed (e.g. indexing)."""

    async def __call__(self, job: ClaimedJob, document: str) -> None: ...


class Phase2Observer(Protocol):
    """Receives outcomes for metrics; every method must be cheap and never raise."""

    def job_finished(self, outcome: str, seconds: float) -> None: ...

    def tokens_used(self, kind: str, count: int) -> None: ...

    def guard_intervened(self, section: str, guard: str) -> None: ...


class _NoObserver:
    def job_finished(self, outcome: str, seconds: float) -> None:
        pass

    def tokens_used(self, kind: str, count: int) -> None:
        pass

    def guard_intervened(self, section: str, guard: str) -> None:
        pass


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 4
    max_attempts: int = 3
    retry_base_delay: float = 1.0
    lease_seconds: float = 60.0
    poll_seconds: float = 1.0


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
        provider_for: Callable[[str | None], LlmProvider] | None = None,
    ) -> None:
        self._jobs = jobs
        self._provider = provider
        # The provider a session chose in its config (None: ``provider``, the default).
        self._provider_for = provider_for or (lambda name: provider)
        self._bus = bus
        self._settings = settings
        self._post_steps = tuple(post_steps)
        self._observer = observer or _NoObserver()
        self._wake = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False

    def wake(self) -> None:
        """New work may be claimable (a commit, a retry)."""
        self._wake.set()

    async def start(self) -> None:
        for index in range(self._settings.concurrency):
            self._loops.append(asyncio.create_task(self._loop(), name=f"phase2-{index}"))

    async def stop(self) -> None:
        """Stop claiming; running jobs give their lease back so they resume elsewhere."""
        self._stopping = True
        for task in self._loops:
            task.cancel()
        for task in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._loops.clear()

    async def _loop(self) -> None:
        backoff = 0.0  # grows while storage is unavailable, so an outage is not a busy loop
        while not self._stopping:
            try:
                job = await self._jobs.claim(self._settings.lease_seconds)
                backoff = 0.0
            except asyncio.CancelledError:
                raise
            except Exception as error:
                backoff = min(max(backoff * 2, 0.5), 10.0)
                if isinstance(error, ServiceError):
                    log.warning("phase2_claim_failed", error=str(error), retry_in=backoff)
                else:
                    log.exception("phase2_claim_failed", retry_in=backoff)
                await asyncio.sleep(backoff)
                continue
            if job is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._settings.poll_seconds)
                continue
            self._wake.set()  # another loop may find more work
            await self._run_with_lease(job)

    async def _run_with_lease(self, job: ClaimedJob) -> None:
        runner = asyncio.create_task(self._run(job))
        renewer = asyncio.create_task(self._renew(job, runner))
        current = asyncio.current_task()
        try:
            await runner
        except asyncio.CancelledError:
            if current is None or not current.cancelling():
                # The renewer stopped the runner: the lease is gone, another worker has it.
                log.warning("phase2_lease_lost", commit_id=job.commit_id)
                return
            runner.cancel()
            with contextlib.suppress(BaseException):
                await runner
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
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
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

    async def _run(self, job: ClaimedJob) -> None:
        started = time.monotonic()
        for _ in range(5):  # re-run on a WM changed under us (ApplyWorkingMemoryOps)
            data = await self._jobs.read_input(job)
            previous = data.previous
            await self._jobs.start(job, data)
            self._bus.publish(job.commit_id)

            async def on_event(event: ChainEvent) -> None:
                await self._jobs.record(job, event)
                self._bus.publish(job.commit_id)

            try:
                generation = await generate_working_memory(
                    self._provider_for(data.provider),
                    previous_document=previous.document if previous else None,
                    messages=data.messages,
                    on_event=on_event,
                )
                for step in self._post_steps:
                    await step(job, generation.document)
            except (LlmError, GenerationFailed) as error:
                retryable = getattr(error, "retryable", True)
                reason = "LLM_UNAVAILABLE" if isinstance(error, LlmError) else "GENERATION_FAILED"
                if isinstance(error, LlmError) and not retryable:
                    reason = "LLM_REJECTED"
                await self._fail_or_retry(job, reason, str(error), retryable)
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
            completion = Phase2Completion(
                document=generation.document,
                estimated_tokens=estimate_tokens(generation.document),
                abstract=abstract_of(generation.document),
                decisions_json=wire.decisions_json(generation.decisions),
                usage_json=wire.usage_json(generation.usage),
                covered_seqs=data.covered_seqs,
            )
            done = await self._jobs.complete(
                job,
                previous.version if previous else 0,
                completion,
                tuple(GuardDecided(d) for d in generation.decisions),
            )
            if done is not None:
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
