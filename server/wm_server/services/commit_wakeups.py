"""Wakes commit streams when new events are stored.

The stored events are the truth; this only says "look again". Within one process the worker
publishes after each write; across replicas the PostgreSQL engine relays LISTEN/NOTIFY here,
and streams also re-read on every heartbeat tick, so a lost wake-up costs latency, not data.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class EventBus:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self.closed = False

    def publish(self, commit_id: str) -> None:
        for waiter in self._waiters.get(commit_id, ()):
            waiter.set()

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
