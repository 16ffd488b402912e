"""The outage rules of Phase 2: the jittered backoff and the per-provider circuit breaker."""

from __future__ import annotations

import asyncio

import pytest

from wm_server.breaker import (
    BreakerSettings,
    BreakerState,
    CircuitBreaker,
    backoff_delay,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_is_capped_and_jitters_within_its_upper_half() -> None:
    assert backoff_delay(1, 1.0, 60.0, rng=lambda: 0.0) == 0.5
    assert backoff_delay(1, 1.0, 60.0, rng=lambda: 1.0) == 1.0
    assert backoff_delay(4, 1.0, 60.0, rng=lambda: 1.0) == 8.0
    assert backoff_delay(30, 1.0, 60.0, rng=lambda: 1.0) == 60.0
    assert backoff_delay(30, 1.0, 60.0, rng=lambda: 0.0) == 30.0
    delays = {backoff_delay(3, 1.0, 60.0) for _ in range(50)}
    assert len(delays) > 1 and all(2.0 <= d <= 4.0 for d in delays)


async def test_opens_after_threshold_and_lets_one_probe_through_after_cooldown() -> None:
    breaker = CircuitBreaker(BreakerSettings(threshold=3, cooldown=0.1, max_cooldown=0.25))
    for _ in range(2):
        breaker.failed()
    assert breaker.state is BreakerState.CLOSED and not await breaker.admit()
    breaker.failed()
    assert breaker.state is BreakerState.OPEN and 0.05 < breaker.remaining() <= 0.1

    waiting = asyncio.ensure_future(breaker.admit())
    await asyncio.sleep(0.03)
    assert not waiting.done()  # open: nobody may claim
    assert await asyncio.wait_for(waiting, 1.0) is True  # the probe, after the cooldown
    assert breaker.state is BreakerState.HALF_OPEN

    second = asyncio.ensure_future(breaker.admit())
    await asyncio.sleep(0.03)
    assert not second.done()  # one probe at a time
    breaker.failed()  # the probe met the outage: reopen for twice the cooldown
    assert breaker.state is BreakerState.OPEN and 0.15 < breaker.remaining() <= 0.2
    await asyncio.sleep(0.1)
    assert not second.done()
    assert await asyncio.wait_for(second, 1.0) is True
    breaker.failed()
    assert 0.2 < breaker.remaining() <= 0.25  # capped
    assert breaker.opened_count == 3

    assert await asyncio.wait_for(breaker.admit(), 1.0) is True
    breaker.succeeded()
    assert breaker.state is BreakerState.CLOSED and not await breaker.admit()
    breaker.failed()
    assert breaker.state is BreakerState.CLOSED  # the count started again


async def test_unused_probe_hands_the_probe_to_the_next_caller() -> None:
    clock = Clock()
    breaker = CircuitBreaker(BreakerSettings(threshold=1, cooldown=5.0), clock)
    breaker.failed()
    clock.now += 5.0
    assert await breaker.admit() is True
    breaker.probe_unused()
    assert breaker.state is BreakerState.OPEN
    assert await asyncio.wait_for(breaker.admit(), 1.0) is True


@pytest.mark.parametrize("answered", [True, False])
async def test_any_answer_closes_the_breaker(answered: bool) -> None:
    breaker = CircuitBreaker(BreakerSettings(threshold=2), Clock())
    breaker.failed()
    if answered:
        breaker.succeeded()
    breaker.failed()
    assert breaker.state is (BreakerState.CLOSED if answered else BreakerState.OPEN)
