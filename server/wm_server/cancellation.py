"""Waiting with a timeout, and stopping a task, without losing a cancellation.

On Python 3.11 ``asyncio.wait_for`` returns normally when a cancellation reaches the waiting
task in the same loop iteration as the future it waits for completes (CPython gh-86296; 3.12
rewrote ``wait_for``). psycopg waits for its socket that way, so a task cancelled during a
query can carry on as if it never was: a background loop runs its next round, and a stop that
awaits it after one ``cancel()`` never returns (a CI run hung for an hour on the idle sweeper's
stop). So our waits use :func:`wait_set` (``asyncio.timeout`` counts cancellations and never
takes one for its own), and tasks are stopped with :func:`cancel_and_wait`, which cancels
again until the task has ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

RECANCEL_SECONDS = 0.5  # long enough for a cancelled task's clean-up (a lease given back)


async def wait_set(event: asyncio.Event, seconds: float) -> bool:
    """Wait at most ``seconds`` for ``event``; whether it was set."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def cancel_and_wait(task: asyncio.Task[Any], *, every: float = RECANCEL_SECONDS) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling it again every ``every``
    seconds while it runs (a cancellation lost in a library's wait). Raises what the task
    raised, if it ended with an error other than its cancellation; a cancellation of the
    caller stops the wait, not the task."""
    while not task.done():
        task.cancel()
        await asyncio.wait((task,), timeout=every)  # never raises the task's error
    if not task.cancelled():
        task.result()
