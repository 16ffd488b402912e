"""Tells commit streams what was stored, so that they read the log only when they must.

The stored events are the truth; a stream reads them from the database unless it already
holds them. Two kinds of news reach a stream (``Subscription``):

- the events this process stored and committed (``EventBus.handed``: ``EventLog`` passes
  them on once their unit of work committed), exact copies of the stored rows, so a stream
  sends them without a read;
- "look again" (``EventBus.publish``): another replica stored events (PostgreSQL's NOTIFY
  relays it; the engine drops the notifications of this process's own), or the server is
  shutting down.

A Phase 2 job stores its events in three transactions, and each woke every stream for a
read of the log (on PostgreSQL a pooled connection and a round trip, on the event loop
beside the job). Streams also re-read on every heartbeat tick, so a lost wake-up costs
latency, not data.
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

    __slots__ = ("_handed", "_unknown", "woken")

    def __init__(self) -> None:
        self.woken = asyncio.Event()
        self._handed: dict[int, StoredEvent] = {}
        self._unknown = True  # a read is due (nothing read yet, or told to look again)

    def news(self, last: int) -> tuple[list[StoredEvent], bool]:
        """The handed events that follow ``last`` without a gap, and whether the stream must
        still read the log after them: told to look again, or a gap before other handed
        events."""
        self.woken.clear()
        handed = self._handed
        events: list[StoredEvent] = []
        while (event := handed.pop(last + 1, None)) is not None:
            events.append(event)
            last = event.sequence
        for sequence in [s for s in handed if s <= last]:
            del handed[sequence]
        read = self._unknown or bool(handed)
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

    def look_again(self) -> None:
        self._unknown = True
        self.woken.set()


class EventBus:
    def __init__(self) -> None:
        self._subscriptions: dict[str, set[Subscription]] = defaultdict(set)
        self.closed = False

    def publish(self, commit_id: str) -> None:
        """Events of ``commit_id`` were stored elsewhere: its streams read the log."""
        for subscription in self._subscriptions.get(commit_id, ()):
            subscription.look_again()

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
                subscription.look_again()

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
