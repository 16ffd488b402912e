"""Fair shares of the server: each caller gets its own budget, so none can starve the others.

gRPC's ``maximum_concurrent_rpcs`` is one pool for everybody: a tenant holding its streams open,
or an anonymous caller holding ``Health/Watch`` streams, would make every other tenant's calls
fail. Here every tenant has its own budget of concurrent unary calls and of open server streams,
every caller without a tenant (health, reflection: the methods that need no key) shares one
small budget of its own, and each tenant's mutating calls (those carrying a ``request_id``) pass
a token bucket. A caller over a budget gets RESOURCE_EXHAUSTED with ErrorInfo (the reason and
the limit) and RetryInfo (when to try again); everybody else is untouched.

The interceptor asks :meth:`Admission.enter` once per call and :meth:`Admission.leave` when the
call ends. Budgets are created once per tenant (tenants are bounded by the keyring) and the
refusal statuses of the concurrency limits once per server, so an admitted call costs two
integer updates and, for a mutation, a little float arithmetic. The event loop is the only
writer; the metrics thread only copies the counters.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from wm_server.api.status import rpc_status_of

ANONYMOUS = "(anonymous)"  # the metrics label of callers without a tenant; no tenant name
# can look like it (tenant names start with a letter or digit)

TOO_MANY_CONCURRENT_RPCS = "TOO_MANY_CONCURRENT_RPCS"
TOO_MANY_OPEN_STREAMS = "TOO_MANY_OPEN_STREAMS"
TOO_MANY_ANONYMOUS_RPCS = "TOO_MANY_ANONYMOUS_RPCS"
RATE_LIMITED = "RATE_LIMITED"
# How long a caller over a concurrency budget should wait: a slot frees when one of its own
# calls ends, which the server cannot foresee; one second keeps retries from spinning.
CONCURRENCY_RETRY_SECONDS = 1.0
_WHOLE_TOKEN = 1.0 - 1e-9  # a refill summed from float time steps may fall short by noise


@dataclass(frozen=True, slots=True)
class Limits:
    """The budgets, from the settings (``WM_TENANT_*``, ``WM_ANONYMOUS_*``)."""

    tenant_rpcs: int
    tenant_streams: int
    anonymous_rpcs: int
    mutations_per_second: float  # 0: no rate limit
    mutation_burst: int


class Budget:
    """One caller's share: what it holds now, its token bucket, and its counters."""

    __slots__ = ("finished", "rejected", "rpcs", "stamp", "streams", "tenant", "tokens")

    def __init__(self, tenant: str, tokens: float, stamp: float) -> None:
        self.tenant = tenant
        self.rpcs = 0  # unary calls in flight (all calls, for the anonymous budget)
        self.streams = 0  # server streams open
        self.tokens = tokens
        self.stamp = stamp
        self.rejected: dict[str, int] = {}  # reason → calls refused
        self.finished: dict[str, int] = {}  # status code name → calls ended


class Admission:
    """The budgets of every caller of one server."""

    def __init__(self, limits: Limits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._budgets: dict[str, Budget] = {}
        self._rate = float(limits.mutations_per_second)  # tokens per second; 0: no bucket
        self._burst = float(limits.mutation_burst)
        self.anonymous = Budget(ANONYMOUS, 0.0, clock())
        self._refusals = {
            TOO_MANY_CONCURRENT_RPCS: _refusal(
                TOO_MANY_CONCURRENT_RPCS,
                f"too many concurrent calls of this tenant (limit {limits.tenant_rpcs});"
                " retry when one of them has ended",
                {"limit": str(limits.tenant_rpcs), "scope": "tenant"},
                CONCURRENCY_RETRY_SECONDS,
            ),
            TOO_MANY_OPEN_STREAMS: _refusal(
                TOO_MANY_OPEN_STREAMS,
                f"too many open streams of this tenant (limit {limits.tenant_streams});"
                " retry when one of them has ended",
                {"limit": str(limits.tenant_streams), "scope": "tenant"},
                CONCURRENCY_RETRY_SECONDS,
            ),
            TOO_MANY_ANONYMOUS_RPCS: _refusal(
                TOO_MANY_ANONYMOUS_RPCS,
                f"too many concurrent calls without credentials (health, reflection;"
                f" limit {limits.anonymous_rpcs} shared by all such callers)",
                {"limit": str(limits.anonymous_rpcs), "scope": "anonymous"},
                CONCURRENCY_RETRY_SECONDS,
            ),
        }

    def budget(self, tenant: str) -> Budget:
        """The tenant's budget, made on its first call (with a full bucket)."""
        budget = self._budgets.get(tenant)
        if budget is None:
            budget = Budget(tenant, self._burst, self._clock())
            self._budgets[tenant] = budget
        return budget

    def budgets(self) -> list[Budget]:
        """Every budget, the anonymous one first (for the metrics)."""
        return [self.anonymous, *list(self._budgets.values())]

    def enter(self, budget: Budget, *, stream: bool, mutating: bool) -> grpc.Status | None:
        """Take a slot of ``budget`` (None), or the status to refuse the call with."""
        limits = self.limits
        if budget is self.anonymous:
            if budget.rpcs >= limits.anonymous_rpcs:
                return self._refuse(budget, TOO_MANY_ANONYMOUS_RPCS)
            budget.rpcs += 1
            return None
        if stream:
            if budget.streams >= limits.tenant_streams:
                return self._refuse(budget, TOO_MANY_OPEN_STREAMS)
        elif budget.rpcs >= limits.tenant_rpcs:
            return self._refuse(budget, TOO_MANY_CONCURRENT_RPCS)
        if mutating and self._rate:  # the token bucket, inline: every mutation passes here
            now = self._clock()
            tokens = budget.tokens + (now - budget.stamp) * self._rate
            if tokens > self._burst:
                tokens = self._burst
            budget.stamp = now
            if tokens < _WHOLE_TOKEN:
                budget.tokens = tokens
                budget.rejected[RATE_LIMITED] = budget.rejected.get(RATE_LIMITED, 0) + 1
                return self._rate_refusal((1.0 - tokens) / self._rate)
            budget.tokens = tokens - 1.0 if tokens > 1.0 else 0.0
        if stream:
            budget.streams += 1
        else:
            budget.rpcs += 1
        return None

    def leave(self, budget: Budget, *, stream: bool) -> None:
        """Give back the slot :meth:`enter` took."""
        if stream and budget is not self.anonymous:
            budget.streams -= 1
        else:
            budget.rpcs -= 1

    def _refuse(self, budget: Budget, reason: str) -> grpc.Status:
        budget.rejected[reason] = budget.rejected.get(reason, 0) + 1
        return self._refusals[reason]

    def _rate_refusal(self, wait: float) -> grpc.Status:
        # Whole milliseconds, rounded up (past float noise): a client that waits exactly this
        # long finds a token. A flood of refused calls meets few distinct delays, so their
        # statuses are built once each (building one costs tens of microseconds).
        return self._rate_status(math.ceil(wait * 1000 - 1e-6))

    @functools.lru_cache(maxsize=256)  # noqa: B019 (one Admission per server, kept for its life)
    def _rate_status(self, wait_ms: int) -> grpc.Status:
        limits = self.limits
        rate = f"{limits.mutations_per_second:g}"
        return _refusal(
            RATE_LIMITED,
            f"too many mutating calls of this tenant (limit {rate} per second,"
            f" bursts of {limits.mutation_burst}); retry after the delay in RetryInfo",
            {"limit": rate, "burst": str(limits.mutation_burst), "scope": "tenant"},
            wait_ms / 1000,
        )


def _refusal(reason: str, message: str, metadata: dict[str, str], delay: float) -> grpc.Status:
    return rpc_status_of("RESOURCE_EXHAUSTED", message, reason, metadata, retry_delay=delay)
