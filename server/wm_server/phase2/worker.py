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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from wm_core import abstract_of, estimate_tokens
from wm_server import wire
from wm_server.llm.chain import (
    ChainEvent,
    GenerationFailed,
    LlmCallFinished,
    LlmCallStarted,
    OpsParsed,
    generate_working_memory,
)
from wm_server.llm.port import LlmError, LlmProvider
from wm_server.services import events
from wm_server.services.event_bus import EventBus
from wm_server.storage.port import LeaseLost, Store
from wm_server.storage.records import ClaimedJob, Phase2Completion, archive_name

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
        store: Store,
        provider: LlmProvider,
        bus: EventBus,
        settings: WorkerSettings,
        *,
        post_steps: Sequence[PostStep] = (),
        observer: Phase2Observer | None = None,
    ) -> None:
        self._store = store
        self._provider = provider
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
        while not self._stopping:
            try:
                job = await self._store.claim_job(self._settings.lease_seconds)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("phase2_claim_failed")
                job = None
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
        try:
            await runner
        except asyncio.CancelledError:
            runner.cancel()
            with contextlib.suppress(BaseException):
                await runner
            with contextlib.suppress(Exception):
                await self._store.release_job(job)
                log.info("phase2_released", commit_id=job.commit_id)
            raise
        except LeaseLost:
            log.warning("phase2_lease_lost", commit_id=job.commit_id)
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
            if not await self._store.renew_lease(job, self._settings.lease_seconds):
                log.warning("phase2_lease_not_renewed", commit_id=job.commit_id)
                runner.cancel()
                return

    async def _run(self, job: ClaimedJob) -> None:
        started = time.monotonic()
        commit = await self._store.get_commit(job.tenant, job.session_id, job.commit_id)
        seq = commit.last_sequence
        for _ in range(5):  # re-run on a WM changed under us (ApplyWorkingMemoryOps)
            data = await self._store.phase2_input(job)
            previous = data.previous
            seq += 1
            await self._store.append_events(
                job,
                [
                    (
                        seq,
                        events.phase2_started(
                            job.commit_id,
                            seq,
                            job.attempts,
                            previous is None,
                            previous.version if previous else 0,
                            [archive_name(s) for s in data.covered_seqs],
                        ),
                        False,
                    )
                ],
                running=True,
            )
            self._bus.publish(job.commit_id)
            counter = _Sequence(seq)

            async def on_event(event: ChainEvent, counter: _Sequence = counter) -> None:
                payload = self._event_payload(job.commit_id, counter.next(), event)
                await self._store.append_events(job, [(counter.value, payload, False)], False)
                self._bus.publish(job.commit_id)

            try:
                generation = await generate_working_memory(
                    self._provider,
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
                await self._fail_or_retry(job, counter.value, reason, str(error), retryable)
                self._observer.job_finished(
                    "retry" if retryable else "failed", time.monotonic() - started
                )
                return
            except (asyncio.CancelledError, LeaseLost):
                raise
            except Exception as error:
                log.exception("phase2_error", commit_id=job.commit_id)
                await self._fail_or_retry(job, counter.value, "INTERNAL", repr(error), True)
                self._observer.job_finished("error", time.monotonic() - started)
                return

            guard_events = []
            for decision in generation.decisions:
                guard_events.append(
                    (
                        counter.next(),
                        events.guard_decision(job.commit_id, counter.value, decision),
                        False,
                    )
                )
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
                events=tuple(guard_events),
            )
            closing_from = counter.value + 1
            done = await self._store.complete_phase2(
                job,
                previous.version if previous else 0,
                completion,
                lambda record, wm, first=closing_from: events.completion(record, wm, first),
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
            seq = counter.value
            log.info("phase2_rerun_on_newer_wm", commit_id=job.commit_id)
        await self._fail_or_retry(job, seq, "INTERNAL", "working memory kept changing", True)

    def _event_payload(self, commit_id: str, seq: int, event: ChainEvent) -> bytes:
        if isinstance(event, LlmCallStarted):
            return events.llm_request(
                commit_id, seq, event.provider, event.model, str(event.purpose)
            )
        if isinstance(event, LlmCallFinished):
            return events.llm_response(
                commit_id, seq, event.stop_reason, event.usage, event.duration_ms
            )
        assert isinstance(event, OpsParsed)
        return events.ops_parsed(commit_id, seq, dict(event.ops), list(event.problems))

    async def _fail_or_retry(
        self, job: ClaimedJob, seq: int, reason: str, message: str, retryable: bool
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
            await self._store.schedule_retry(
                job,
                delay,
                [
                    (
                        seq + 1,
                        events.retry_scheduled(
                            job.commit_id, seq + 1, job.attempts, delay, message
                        ),
                        False,
                    )
                ],
            )
            return
        log.error("phase2_failed", commit_id=job.commit_id, reason=reason, error=message)
        await self._store.fail_commit(
            job, reason, message, lambda record, _wm: events.completion(record, None, seq + 1)
        )


class _Sequence:
    """The next event number of the commit being processed."""

    def __init__(self, value: int) -> None:
        self.value = value

    def next(self) -> int:
        self.value += 1
        return self.value
