"""Waiting out a provider outage: the retry delay and the circuit breaker.

During an outage every session's job would otherwise fail, back off and try again on its
own, so N sessions make N calls per backoff step and a long outage costs thousands of calls
that cannot succeed. The breaker is shared by the worker's loops (one per provider): after
``threshold`` consecutive outage failures it opens and no job is claimed until a cooldown
has passed; then one probe job is let through (half-open). A probe that succeeds closes the
breaker; one that meets the outage again reopens it for twice the cooldown (capped). Any
answer from the provider, even an unusable one, proves that it is reachable and closes it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from wm_server.cancellation import wait_set


def backoff_delay(
    attempt: int, base: float, cap: float, rng: Callable[[], float] = random.random
) -> float:
    """The delay before attempt ``attempt + 1``: exponential, capped, with "equal jitter"
    (half fixed, half random) so that sessions hit by the same outage spread out."""
    ceiling = min(cap, base * 2.0 ** max(attempt - 1, 0))
    jitter: float = rng()
    return ceiling / 2 + jitter * ceiling / 2


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    threshold: int = 5  # consecutive outage failures that open the breaker
    cooldown: float = 30.0  # first open period, doubled by each failed probe
    max_cooldown: float = 300.0


class CircuitBreaker:
    """One provider's breaker; the clock is injectable for tests."""

    def __init__(
        self, settings: BreakerSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._failures = 0
        self._cooldown = settings.cooldown
        self._open_until = 0.0
        self._state = BreakerState.CLOSED
        self._changed = asyncio.Event()
        self.opened_count = 0  # how many times it opened (reported, tested)

    @property
    def state(self) -> BreakerState:
        return self._state

    def remaining(self) -> float:
        """Seconds until a probe may run; 0 when closed or due."""
        if self._state is BreakerState.CLOSED:
            return 0.0
        return max(self._open_until - self._clock(), 0.0)

    async def admit(self) -> bool:
        """Wait until a job may be claimed. True when the caller is the half-open probe; it
        must then report the outcome, or call :meth:`probe_unused` if it found no job."""
        while True:
            if self._state is BreakerState.CLOSED:
                return False
            if self._state is BreakerState.OPEN:
                wait = self._open_until - self._clock()
                if wait <= 0:
                    self._set(BreakerState.HALF_OPEN)
                    return True
            else:  # another loop's probe is running: wait for its outcome
                wait = self._settings.max_cooldown
            self._changed.clear()
            await wait_set(self._changed, max(wait, 0.001))

    def probe_unused(self) -> None:
        """The probe found no job to run: let the next caller probe."""
        if self._state is BreakerState.HALF_OPEN:
            self._open_until = self._clock()
            self._set(BreakerState.OPEN)

    def succeeded(self) -> None:
        """The provider answered (whatever the answer was worth)."""
        self._failures = 0
        self._cooldown = self._settings.cooldown
        if self._state is not BreakerState.CLOSED:
            self._set(BreakerState.CLOSED)

    def failed(self) -> None:
        """A call met the outage (connection, timeout, 429, 5xx, 529)."""
        self._failures += 1
        if self._state is BreakerState.HALF_OPEN:
            self._cooldown = min(self._cooldown * 2, self._settings.max_cooldown)
            self._open()
        elif self._state is BreakerState.CLOSED and self._failures >= self._settings.threshold:
            self._open()

    def _open(self) -> None:
        self._open_until = self._clock() + self._cooldown
        self.opened_count += 1
        self._set(BreakerState.OPEN)

    def _set(self, state: BreakerState) -> None:
        self._state = state
        self._changed.set()
