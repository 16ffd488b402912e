"""Prometheus metrics, served on their own port (``WM_METRICS_ADDRESS``; off when unset).

A separate port keeps scraping out of the gRPC listener (no auth, no TLS, no mesh routing
needed for it) and lets a NetworkPolicy expose it to the monitoring namespace only.

Each :class:`Metrics` owns its registry rather than using the process-global one, so several
servers in one process (the in-process tests) never collide on metric names.

Series (label values are bounded: only registered methods and canonical codes reach them):

- ``wm_rpcs_total{method,code}`` and ``wm_rpc_duration_seconds{method,code}``
- ``wm_phase2_duration_seconds{outcome}`` (completed, retry, failed, error)
- ``wm_phase2_queue_depth`` (jobs queued or running, read from the store at scrape time)
- ``wm_llm_tokens_total{kind}`` (input, output, cache_read, cache_write)
- ``wm_guard_interventions_total{section,guard}``
- ``wm_undecodable_requests_total{method}`` (request bytes that were not the method's message)
- recall by meaning: ``wm_embedded_rows_total{kind}`` (message, memory),
  ``wm_embedding_backlog`` (rows the backfill has still to embed),
  ``wm_embedding_failures_total{where}`` (phase2, backfill),
  ``wm_recall_degraded_total{reason}`` (a hybrid search answered lexically: unavailable,
  timeout), ``wm_recall_empty_total{kind}`` (searches that found nothing: archives, memories)
  and ``wm_recall_warmed_total{kind}`` (memories: owners, sessions: their archived rows, read
  into the search's indexes by the warm-up after a start)
- per tenant (``(anonymous)`` for health and reflection callers), read from the admission
  budgets at scrape time, so a call pays nothing for them:
  ``wm_tenant_rpcs_total{tenant,code}``, ``wm_tenant_active_calls{tenant,kind}`` (kind
  ``unary`` or ``stream``) and ``wm_tenant_rejected_total{tenant,reason}`` (the ErrorInfo
  reason of the RESOURCE_EXHAUSTED answer)
"""

from __future__ import annotations

import asyncio
import threading
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Protocol
from wsgiref.simple_server import WSGIServer

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from wm_server.config import ConfigurationError, split_host_port

# The logger keeps the name it had before the module moved: operators filter on it.
log = structlog.get_logger("wm_server.metrics")

RPC_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# The ``le`` labels of RPC_BUCKETS as prometheus_client writes them ("0.001", "1.0", "+Inf").
_RPC_LE = (*(repr(float(bound)) for bound in RPC_BUCKETS), "+Inf")
PHASE2_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)


class _QueueDepth(Collector):
    """``wm_phase2_queue_depth``, asked of the store on each scrape.

    The HTTP server runs in its own thread while the store belongs to the event loop, so the
    query is handed to the loop and awaited with a short timeout; if the loop is busy, shut
    down, or the scrape runs on the loop's own thread, the last known value is reported.
    """

    def __init__(
        self, depth: Callable[[], Awaitable[int]], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._depth = depth
        self._loop = loop
        self._last = 0.0

    def _family(self, value: float | None) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "wm_phase2_queue_depth", "Phase 2 jobs not done yet (queued or running)."
        )
        if value is not None:
            family.add_metric([], value)
        return family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family(None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if not self._loop.is_closed() and not self._on_loop_thread():
            try:
                future = asyncio.run_coroutine_threadsafe(self._query(), self._loop)
                self._last = float(future.result(timeout=2.0))
            except Exception:  # a scrape must never fail: report the last value
                log.debug("queue_depth_unavailable")
        yield self._family(self._last)

    async def _query(self) -> int:
        return await self._depth()

    def _on_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False


class RpcSeries:
    """One method's figures per status code, kept as plain numbers the event loop adds to.

    ``prometheus_client``'s children take a lock per update and find a histogram bucket with
    a Python loop: about a tenth of a health check's server time. An RPC here costs a dict
    lookup, a ``bisect`` and two additions; :class:`_RpcFigures` turns the numbers into
    ``wm_rpcs_total`` and ``wm_rpc_duration_seconds`` when the endpoint is scraped."""

    __slots__ = ("_codes", "method")

    def __init__(self, method: str) -> None:
        self.method = method
        # code → [count per bucket (the last one +Inf, not cumulative)..., sum of seconds]
        self._codes: dict[str, list[float]] = {}

    def finished(self, code: str, seconds: float) -> None:
        figures = self._codes.get(code)
        if figures is None:
            figures = self._codes[code] = [0.0] * (len(RPC_BUCKETS) + 2)
        figures[bisect_left(RPC_BUCKETS, seconds)] += 1
        figures[-1] += seconds

    def snapshot(self) -> list[tuple[str, list[float]]]:
        """Each code's figures, copied: the event loop is the only writer, and copying a
        list is atomic under the GIL, so a scrape sees one moment of each series."""
        return [(code, list(figures)) for code, figures in list(self._codes.items())]


class _RpcFigures(Collector):
    """``wm_rpcs_total{method,code}`` and ``wm_rpc_duration_seconds{method,code}``, built
    from the :class:`RpcSeries` on each scrape; a count is the sum of its own buckets, so a
    histogram's ``_count``, its ``+Inf`` bucket and the counter always agree."""

    def __init__(self) -> None:
        self.series: dict[str, RpcSeries] = {}

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        total, seconds = self._families()
        for series in list(self.series.values()):
            for code, figures in series.snapshot():
                counts, cumulative, running = figures[:-1], [], 0.0
                for bound, count in zip(_RPC_LE, counts, strict=True):
                    running += count
                    cumulative.append((bound, running))
                total.add_metric([series.method, code], running)
                seconds.add_metric([series.method, code], cumulative, figures[-1])
        yield from (total, seconds)

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, HistogramMetricFamily]:
        return (
            CounterMetricFamily(
                "wm_rpcs",
                "RPCs handled, by full method name and status code.",
                labels=["method", "code"],
            ),
            HistogramMetricFamily(
                "wm_rpc_duration_seconds",
                "RPC duration (streams: until the stream ended), by method and status code.",
                labels=["method", "code"],
            ),
        )


class TenantFigures(Protocol):
    """What one admission budget reports (``wm_server.api.admission.Budget``)."""

    @property
    def tenant(self) -> str: ...
    @property
    def rpcs(self) -> int: ...
    @property
    def streams(self) -> int: ...
    @property
    def rejected(self) -> Mapping[str, int]: ...
    @property
    def finished(self) -> Mapping[str, int]: ...


class _Tenants(Collector):
    """The per-tenant series, copied from the budgets on each scrape.

    The event loop is the only writer of the budgets; copying a dict is atomic under the GIL,
    so the scrape thread reads consistent (if a moment old) numbers without a lock."""

    def __init__(self, budgets: Callable[[], Iterable[TenantFigures]]) -> None:
        self._budgets = budgets

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        rpcs, active, rejected = self._families()
        for budget in list(self._budgets()):
            tenant = budget.tenant
            for code, count in dict(budget.finished).items():
                rpcs.add_metric([tenant, code], count)
            active.add_metric([tenant, "unary"], budget.rpcs)
            active.add_metric([tenant, "stream"], budget.streams)
            for reason, count in dict(budget.rejected).items():
                rejected.add_metric([tenant, reason], count)
        yield from (rpcs, active, rejected)

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, GaugeMetricFamily, CounterMetricFamily]:
        return (
            CounterMetricFamily(
                "wm_tenant_rpcs",
                "RPCs ended, by tenant and status code.",
                labels=["tenant", "code"],
            ),
            GaugeMetricFamily(
                "wm_tenant_active_calls",
                "Calls holding a slot of the tenant's budget, by kind (unary, stream).",
                labels=["tenant", "kind"],
            ),
            CounterMetricFamily(
                "wm_tenant_rejected",
                "Calls refused RESOURCE_EXHAUSTED by the tenant's budget, by reason.",
                labels=["tenant", "reason"],
            ),
        )


class Metrics:
    """The service's metrics; also the Phase 2 worker's observer (``Phase2Observer``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._rpcs = _RpcFigures()
        self.registry.register(self._rpcs)
        self.phase2_seconds = Histogram(
            "wm_phase2_duration_seconds",
            "Duration of one Phase 2 attempt, by outcome.",
            ["outcome"],
            buckets=PHASE2_BUCKETS,
            registry=self.registry,
        )
        self.llm_tokens = Counter(
            "wm_llm_tokens",
            "Model tokens used by Phase 2, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.guard_interventions = Counter(
            "wm_guard_interventions",
            "Changes refused or repaired by the server-side guards, by section and guard.",
            ["section", "guard"],
            registry=self.registry,
        )
        self.extraction_empty = Counter(
            "wm_memory_extraction_empty",
            "Commits whose long-term memory extraction wrote nothing, by reason (nothing_new, "
            "all_refused, no_tool_call, failed).",
            ["reason"],
            registry=self.registry,
        )
        self.undecodable = Counter(
            "wm_undecodable_requests",
            "Requests whose bytes were not the method's message (answered INVALID_ARGUMENT).",
            ["method"],
            registry=self.registry,
        )
        self.embedded_rows = Counter(
            "wm_embedded_rows", "Rows given a vector, by kind.", ["kind"], registry=self.registry
        )
        self.embedding_backlog_rows = Gauge(
            "wm_embedding_backlog",
            "Rows the embedding backfill has still to embed.",
            registry=self.registry,
        )
        self.embedding_failures = Counter(
            "wm_embedding_failures",
            "Embedding attempts that met a failing embedder, by where.",
            ["where"],
            registry=self.registry,
        )
        self.recall_degraded_total = Counter(
            "wm_recall_degraded",
            "Hybrid searches answered lexically because the embedder failed, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.recall_empty_total = Counter(
            "wm_recall_empty",
            "Searches that found nothing, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.recall_warmed_total = Counter(
            "wm_recall_warmed",
            "Owners' memories and sessions' archived rows the warm-up after start read in.",
            ["kind"],
            registry=self.registry,
        )
        self._queue: _QueueDepth | None = None
        self._tenants: _Tenants | None = None
        self._http: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    # --- RPCs (the interceptor) ------------------------------------------------------------
    def rpc_series(self, method: str) -> RpcSeries:
        """The RPC series of ``method``, for the interceptor to keep with the method (one per
        method: asking again returns the same series)."""
        series = self._rpcs.series.get(method)
        if series is None:
            series = self._rpcs.series[method] = RpcSeries(method)
        return series

    def request_undecodable(self, method: str) -> None:
        self.undecodable.labels(method).inc()

    def watch_tenants(self, budgets: Callable[[], Iterable[TenantFigures]]) -> None:
        """Report the per-tenant series from ``budgets()`` (called on each scrape)."""
        if self._tenants is None:
            self._tenants = _Tenants(budgets)
            self.registry.register(self._tenants)

    # --- Phase2Observer --------------------------------------------------------------------
    def job_finished(self, outcome: str, seconds: float) -> None:
        self.phase2_seconds.labels(outcome).observe(seconds)

    def tokens_used(self, kind: str, count: int) -> None:
        if count > 0:
            self.llm_tokens.labels(kind).inc(count)

    def guard_intervened(self, section: str, guard: str) -> None:
        self.guard_interventions.labels(section, guard).inc()

    def memory_extraction_empty(self, reason: str) -> None:
        self.extraction_empty.labels(reason).inc()

    # --- EmbeddingObserver and RecallObserver ---------------------------------------------
    def rows_embedded(self, kind: str, count: int) -> None:
        self.embedded_rows.labels(kind).inc(count)

    def embedding_backlog(self, count: int) -> None:
        self.embedding_backlog_rows.set(count)

    def embedding_failed(self, where: str) -> None:
        self.embedding_failures.labels(where).inc()

    def recall_degraded(self, reason: str) -> None:
        self.recall_degraded_total.labels(reason).inc()

    def recall_empty(self, kind: str) -> None:
        self.recall_empty_total.labels(kind).inc()

    def recall_warmed(self, kind: str, count: int) -> None:
        self.recall_warmed_total.labels(kind).inc(count)

    # --- queue depth and the HTTP endpoint -------------------------------------------------
    def watch_queue(self, depth: Callable[[], Awaitable[int]]) -> None:
        """Report ``depth()`` (a coroutine of the running loop) as the queue-depth gauge."""
        if self._queue is None:
            self._queue = _QueueDepth(depth, asyncio.get_running_loop())
            self.registry.register(self._queue)

    def serve(self, address: str) -> int:
        """Start the scrape endpoint on ``host:port`` (port 0 picks one); return the port."""
        host, port = split_host_port(address)
        try:
            self._http, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigurationError(
                f"WM_METRICS_ADDRESS: cannot listen on {address}: {exc}"
            ) from None
        bound = int(self._http.server_port)
        log.info("metrics_started", address=f"{host}:{bound}")
        return bound

    def stop(self) -> None:
        """Stop the endpoint (a blocking call of a few milliseconds)."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
