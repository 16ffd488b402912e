"""The auto-commit rules and the stored form of a session's settings."""

from __future__ import annotations

import pytest

from wm_core import (
    DEFAULT_AUTO_KEEP,
    AutoCommitPolicy,
    SessionSettings,
    Trigger,
    idle_due,
    threshold_trigger,
)


def _trigger(
    policy: AutoCommitPolicy, pending: int, count: int, last: float | None = None
) -> Trigger | None:
    return threshold_trigger(
        policy, pending_tokens=pending, message_count=count, now=100.0, last_commit_time=last
    )


def test_no_trigger_set_means_never() -> None:
    policy = AutoCommitPolicy(keep_recent_count=0)
    assert not policy.active and _trigger(policy, 10**9, 10**6) is None
    assert not idle_due(policy, message_count=5, last_add_time=0.0, now=1e9, last_commit_time=None)


def test_pending_tokens_win_and_a_commit_must_archive_something() -> None:
    both = AutoCommitPolicy(
        pending_token_threshold=100, message_count_threshold=5, keep_recent_count=2
    )
    assert _trigger(both, 100, 5) is Trigger.PENDING_TOKENS
    assert _trigger(both, 99, 5) is Trigger.MESSAGE_COUNT
    assert _trigger(both, 99, 4) is None
    assert _trigger(both, 500, 2) is None  # everything live is within the keep window
    assert AutoCommitPolicy(message_count_threshold=3).keep == DEFAULT_AUTO_KEEP


@pytest.mark.parametrize(("last", "fires"), [(None, True), (39.0, True), (41.0, False)])
def test_the_minimum_interval_counts_from_the_last_commit(last: float | None, fires: bool) -> None:
    policy = AutoCommitPolicy(message_count_threshold=1, keep_recent_count=0,
                              min_commit_interval_seconds=60.0)  # fmt: skip
    assert (_trigger(policy, 0, 1, last) is not None) is fires
    assert idle_due(
        AutoCommitPolicy(idle_timeout_seconds=10.0, min_commit_interval_seconds=60.0),
        message_count=1, last_add_time=80.0, now=100.0, last_commit_time=last,
    ) is fires  # fmt: skip


def test_idle_needs_live_messages_and_silence() -> None:
    policy = AutoCommitPolicy(idle_timeout_seconds=30.0)
    assert idle_due(policy, message_count=3, last_add_time=70.0, now=100.0, last_commit_time=None)
    assert not idle_due(
        policy, message_count=3, last_add_time=71.0, now=100.0, last_commit_time=None
    )
    assert not idle_due(
        policy, message_count=0, last_add_time=0.0, now=100.0, last_commit_time=None
    )


def test_settings_store_only_what_is_set_and_read_back_equal() -> None:
    settings = SessionSettings(
        auto_commit=AutoCommitPolicy(pending_token_threshold=0, idle_timeout_seconds=2.5),
        memory_extraction=False,
        provider="offline",
    )
    stored = settings.to_json()
    assert stored == (
        '{"auto_commit": {"idle_timeout_seconds": 2.5, "pending_token_threshold": 0},'
        ' "memory_extraction": false, "provider": "offline"}'
    )
    assert SessionSettings.from_json(stored) == settings
    assert (
        SessionSettings.from_json("{}") == SessionSettings() and SessionSettings().to_json() == "{}"
    )
