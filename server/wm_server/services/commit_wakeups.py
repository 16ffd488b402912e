"""Wakes commit streams when new events are stored.

The stored events are the truth; this only says "look again". Within one process the worker
publishes after each write; across replicas the PostgreSQL engine relays LISTEN/NOTIFY here,
its own writes' too, so while it listens the worker leaves their wake-up to it (``stored``).
Streams also re-read on every heartbeat tick, so a lost wake-up costs latency, not data.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class EventBus:
    def __init__(self, relayed: Callable[[], bool] = lambda: False) -> None:
        """``relayed``: whether the database now relays this process's own stored events
        to ``publish`` (``Database.relays_events``)."""
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._relayed = relayed
        self.closed = False

    def publish(self, commit_id: str) -> None:
        for waiter in self._waiters.get(commit_id, ()):
            waiter.set()

    def stored(self, commit_id: str) -> None:
        """This process stored events of ``commit_id``: wake its streams, unless the
        database relays those events back (PostgreSQL's NOTIFY, a moment later). Its
        streams would then read twice for one write, the second time finding nothing, on
        the event loop beside the Phase 2 job that wrote."""
        if not self._relayed():
            self.publish(commit_id)

    def close(self) -> None:
        """The server is shutting down: wake every stream one last time; streams see
        ``closed``, send what is stored and end, so clients resume elsewhere at once."""
        self.closed = True
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.set()

    @contextmanager
    def subscribe(self, commit_id: str) -> Iterator[asyncio.Event]:
        waiter = asyncio.Event()
        self._waiters[commit_id].add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiters.get(commit_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[commit_id]
