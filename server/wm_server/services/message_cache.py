"""The decoded messages AssembleContext reads on every call, kept per replica.

A stored message never changes: positions are never reused, a session's key is never reused,
and archiving moves a boundary, not a row. So AssembleContext, which reads every uncovered
message on every call, decodes each one once per replica instead of once per call (on 2,000
messages, most of the call).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from wm_server.storage.records import StoredMessage

# Contexts of fewer messages than this are decoded on every call: the cache pays for itself
# on long sessions, and every cached object also costs each full garbage collection a visit.
CACHED_FROM = 200


class MessageCache:
    """Decoded messages by (session key, position), least recently used first out, bounded
    by an estimate of the memory held."""

    def __init__(self, max_weight: int = 24 * 1024 * 1024) -> None:
        self._items: OrderedDict[tuple[int, int], StoredMessage] = OrderedDict()
        self._weight = 0
        self._max = max_weight

    @staticmethod
    def _weight_of(item: StoredMessage) -> int:
        # The text (about four characters a token) and the objects that hold it.
        return item.message.estimated_tokens * 4 + 160 * len(item.message.parts) + 500

    def run(self, sid: int, start: int, stop: int) -> tuple[list[StoredMessage], int]:
        """The cached messages from ``start`` on, up to the first one missing (or ``stop``),
        and that position."""
        out: list[StoredMessage] = []
        position = start
        while position < stop:
            item = self._items.get((sid, position))
            if item is None:
                break
            self._items.move_to_end((sid, position))
            out.append(item)
            position += 1
        return out, position

    def add(self, sid: int, items: Sequence[StoredMessage]) -> None:
        for item in items:
            key = (sid, item.position)
            if key not in self._items:
                self._weight += self._weight_of(item)
            self._items[key] = item
        while self._weight > self._max and self._items:
            _, old = self._items.popitem(last=False)
            self._weight -= self._weight_of(old)
