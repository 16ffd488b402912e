"""A task that repeats a round of background work until stopped, surviving outages.

Maintenance (purges, request-id pruning) and the idle sweeper share the lifecycle: start
once, run a round, wait, run again; a round that fails for an environmental reason is logged
and tried again on the next one, and stopping cancels the wait or the round in progress.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod

import structlog

from wm_server.cancellation import cancel_and_wait, wait_set


class BackgroundLoop(ABC):
    name = "wm-background"

    def __init__(self, interval_seconds: float) -> None:
        self._interval = interval_seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._log = structlog.get_logger(f"wm_server.{self.name}")

    @abstractmethod
    async def round(self) -> None:
        """One round of the work."""

    def wake(self) -> None:
        """Run the next round now rather than after the interval."""
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            # Cleared before the round, so a wake during it runs another round at once.
            self._wake.clear()
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # an outage: try again on the next round
                self._log.warning(f"{self.name}_failed", error=str(error))
            await wait_set(self._wake, self._interval)
