"""Tells commit streams what was stored, so that they read the log only when they must.

The stored events are the truth; a stream reads them from the database unless it already
holds them. Two kinds of news reach a stream (``Subscription``):

- the events this process stored and committed (``EventBus.handed``: ``EventLog`` passes
  them on once their unit of work committed), exact copies of the stored rows, so a stream
  sends them without a read;
- a wake-up from elsewhere (``EventBus.publish``): another replica's events, relayed by
  PostgreSQL's NOTIFY with the last sequence the transaction stored (this process's own
  come back too, and then tell the stream nothing new), or a bare "look again".

On PostgreSQL a Phase 2 job stores its events in three transactions, and each woke every
stream for a read of the log (a pooled connection and a round trip on the event loop beside
the job): about 1 ms of the loop's CPU per job of ``bench/phase2_ab.py``'s round. Streams
also re-read on every heartbeat tick, so a lost wake-up costs latency, not data.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from wm_server.storage.records import StoredEvent

# Events a stream may hold before it reads them: a stream whose client reads slowly drops
# them and reads the log instead, rather than holding a long-running commit's events.
MAX_HANDED = 256


class Subscription:
    """One stream's news of one commit."""

    __slots__ = ("_announced", "_handed", "_unknown", "woken")

    def __init__(self) -> None:
        self.woken = asyncio.Event()
        self._handed: dict[int, StoredEvent] = {}
        self._announced = 0  # the highest sequence the database said is stored
        self._unknown = True  # a read is due (nothing read yet, or a bare wake-up)

    def news(self, last: int) -> tuple[list[StoredEvent], bool]:
        """The handed events that follow ``last`` without a gap, and whether the stream must
        still read the log after them: a bare wake-up, a stored sequence announced beyond
        them, or a gap before other handed events."""
        self.woken.clear()
        handed = self._handed
        events: list[StoredEvent] = []
        while (event := handed.pop(last + 1, None)) is not None:
            events.append(event)
            last = event.sequence
        for sequence in [s for s in handed if s <= last]:
            del handed[sequence]
        read = self._unknown or self._announced > last or bool(handed)
        self._unknown = False
        return events, read

    def receive(self, events: Sequence[StoredEvent]) -> None:
        if len(self._handed) + len(events) > MAX_HANDED:
            self._handed.clear()
            self._unknown = True
        else:
            for event in events:
                self._handed[event.sequence] = event
        self.woken.set()

    def announce(self, through: int | None) -> None:
        if through is None:
            self._unknown = True
        else:
            self._announced = max(self._announced, through)
        self.woken.set()


class EventBus:
    def __init__(self) -> None:
        self._subscriptions: dict[str, set[Subscription]] = defaultdict(set)
        self.closed = False

    def publish(self, commit_id: str, through: int | None = None) -> None:
        """Events of ``commit_id`` were stored, through sequence ``through`` (None: not
        known; every stream reads the log)."""
        for subscription in self._subscriptions.get(commit_id, ()):
            subscription.announce(through)

    def handed(self, commit_id: str, rows: Sequence[tuple[int, bytes, bool]]) -> None:
        """Events of ``commit_id``, as (sequence, payload, terminal) in order, were stored
        by this process, and their transaction committed."""
        subscriptions = self._subscriptions.get(commit_id)
        if subscriptions:
            events = [StoredEvent(commit_id, *row) for row in rows]
            for subscription in subscriptions:
                subscription.receive(events)

    def close(self) -> None:
        """The server is shutting down: wake every stream one last time; streams see
        ``closed``, send what is stored and end, so clients resume elsewhere at once."""
        self.closed = True
        for subscriptions in self._subscriptions.values():
            for subscription in subscriptions:
                subscription.announce(None)

    @contextmanager
    def subscribe(self, commit_id: str) -> Iterator[Subscription]:
        subscription = Subscription()
        self._subscriptions[commit_id].add(subscription)
        try:
            yield subscription
        finally:
            subscriptions = self._subscriptions.get(commit_id)
            if subscriptions is not None:
                subscriptions.discard(subscription)
                if not subscriptions:
                    del self._subscriptions[commit_id]
