"""Stopping background work for certain (wm_server.cancellation): a wait never takes a
cancellation for its own, and a task that lost one (as a psycopg query does on Python 3.11,
CPython gh-86296) is still stopped, so a server's stop always returns."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import pytest

from wm_server.cancellation import cancel_and_wait, wait_set
from wm_server.services.background import BackgroundLoop


async def _waiter(event: asyncio.Event, rounds: list[int]) -> None:
    while True:
        rounds.append(1)
        event.clear()
        await wait_set(event, 10.0)


@pytest.mark.parametrize("ticks", range(6))
async def test_a_cancellation_arriving_as_the_event_is_set_is_never_lost(ticks: int) -> None:
    # With asyncio.wait_for on Python 3.11, one of these offsets lands in the window where
    # the waited future has completed but the waiter has not been woken: wait_for returns
    # normally and the loop goes on waiting, cancelled in name only.
    event = asyncio.Event()
    rounds: list[int] = []
    task = asyncio.create_task(_waiter(event, rounds))
    await asyncio.sleep(0.01)
    event.set()
    for _ in range(ticks):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait((task,), timeout=2.0)
    assert done, f"the cancellation was lost {ticks} ticks after the event was set"
    assert task.cancelled()


async def test_wait_set_says_whether_the_event_came() -> None:
    event = asyncio.Event()
    assert not await wait_set(event, 0.01)
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_set(event, 5.0)


async def _ends_within(stopping: Coroutine[Any, Any, None], seconds: float) -> bool:
    """Whether ``stopping`` returns within ``seconds``, waited for from outside (a timeout
    around it would cancel it, and so deliver the second cancellation itself)."""
    stopper = asyncio.create_task(stopping)
    done, _ = await asyncio.wait((stopper,), timeout=seconds)
    if done:
        stopper.result()
    return bool(done)


async def _deaf_once(ended: asyncio.Event) -> None:
    """Goes on after its first cancellation, as a task whose library lost it does."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(60)
    try:
        await asyncio.sleep(60)
    finally:
        ended.set()


async def test_cancel_and_wait_stops_a_task_that_lost_its_cancellation() -> None:
    ended = asyncio.Event()
    task = asyncio.create_task(_deaf_once(ended))
    await asyncio.sleep(0)
    assert await _ends_within(cancel_and_wait(task, every=0.05), 5.0)
    assert task.cancelled() and ended.is_set()


async def test_cancel_and_wait_raises_what_the_task_raised() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("connection lost while stopping") from None

    task = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="connection lost"):
        await cancel_and_wait(task)
    finished = asyncio.create_task(asyncio.sleep(0))
    await finished
    await cancel_and_wait(finished)  # a task that already ended: nothing to do


class _LosesOneCancellation(BackgroundLoop):
    name = "test_loop"

    def __init__(self) -> None:
        super().__init__(interval_seconds=0.01)
        self.rounds = 0
        self.in_round = asyncio.Event()

    async def round(self) -> None:
        self.rounds += 1
        self.in_round.set()
        if self.rounds == 1:
            # Lost, as in a psycopg wait: the round returns as if it had finished.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(60)


async def test_a_background_loop_stops_although_a_round_lost_the_cancellation() -> None:
    loop = _LosesOneCancellation()
    loop.start()
    await loop.in_round.wait()
    assert await _ends_within(loop.stop(), 5.0)
    assert loop.rounds >= 1
