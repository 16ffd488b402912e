"""What a commit stream learns from the bus, and when it must still read the log."""

from __future__ import annotations

from wm_server.services.commit_wakeups import MAX_HANDED, EventBus, Subscription
from wm_server.storage.records import StoredEvent


def _rows(first: int, last: int) -> list[tuple[int, bytes, bool]]:
    return [(s, f"event {s}".encode(), False) for s in range(first, last + 1)]


def _sequences(events: list[StoredEvent]) -> list[int]:
    return [e.sequence for e in events]


def _subscribed(bus: EventBus, commit_id: str = "c") -> Subscription:
    with bus.subscribe(commit_id) as news:
        return news


def test_a_new_stream_reads_the_log_first() -> None:
    bus = EventBus()
    with bus.subscribe("c") as news:
        assert news.news(0) == ([], True)
        assert news.news(0) == ([], False)  # nothing since: no read


def test_handed_events_that_follow_the_last_sent_need_no_read() -> None:
    bus = EventBus()
    with bus.subscribe("c") as news:
        news.news(0)
        bus.handed("c", _rows(1, 3))
        assert news.woken.is_set()
        events, read = news.news(0)
        assert _sequences(events) == [1, 2, 3] and not read
        assert events[0] == StoredEvent("c", 1, b"event 1", False)
        assert not news.woken.is_set()
        bus.handed("c", _rows(4, 4))
        assert (_sequences(news.news(3)[0]), news.news(4)[1]) == ([4], False)


def test_a_gap_before_handed_events_is_read_and_what_was_read_is_not_sent_twice() -> None:
    bus = EventBus()
    with bus.subscribe("c") as news:
        news.news(0)
        bus.handed("c", _rows(3, 4))  # 1 and 2 were stored elsewhere (or before)
        events, read = news.news(0)
        assert events == [] and read
        # The read returned 1..4: the held copies of 3 and 4 are dropped, not sent again.
        assert news.news(4) == ([], False)


def test_events_stored_elsewhere_need_a_read_after_what_was_handed() -> None:
    bus = EventBus()
    with bus.subscribe("c") as news:
        news.news(0)
        bus.handed("c", _rows(1, 2))
        bus.publish("c")  # another replica stored events too
        events, read = news.news(0)
        assert _sequences(events) == [1, 2] and read
        assert news.news(2) == ([], False)


def test_a_stream_that_falls_far_behind_reads_the_log_instead_of_holding_events() -> None:
    bus = EventBus()
    with bus.subscribe("c") as news:
        news.news(0)
        bus.handed("c", _rows(1, MAX_HANDED))
        bus.handed("c", _rows(MAX_HANDED + 1, MAX_HANDED + 1))  # one more: all dropped
        assert news.news(0) == ([], True)


def test_events_go_only_to_the_streams_of_their_commit_and_only_while_subscribed() -> None:
    bus = EventBus()
    left = _subscribed(bus, "c")  # its stream ended
    with bus.subscribe("c") as news, bus.subscribe("d") as other:
        news.news(0)
        other.news(0)
        bus.handed("c", _rows(1, 1))
        assert not other.woken.is_set() and other.news(0) == ([], False)
        assert _sequences(news.news(0)[0]) == [1]
    left.news(0)
    bus.handed("c", _rows(2, 2))
    assert not left.woken.is_set()


def test_closing_wakes_every_stream_for_a_last_read() -> None:
    bus = EventBus()
    with bus.subscribe("c") as news:
        news.news(0)
        bus.close()
        assert bus.closed and news.woken.is_set() and news.news(0) == ([], True)
