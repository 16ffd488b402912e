"""The wire form of a session: every field rendered, and answers that share a configuration
independent of each other (the rendering of a configuration is cached)."""

from __future__ import annotations

from wm_core import AutoCommitPolicy, SessionSettings
from wm_server.api import stored_wire as wire
from wm_server.storage.records import SessionRecord

POLICY = SessionSettings(
    auto_commit=AutoCommitPolicy(pending_token_threshold=4000, idle_timeout_seconds=90.5),
    tool_output_inline_chars=2048,
)


def record(name: str, config: SessionSettings = POLICY) -> SessionRecord:
    return SessionRecord(
        "default", name, 1_700_000_000.25, 1_700_000_123.5, 12, 30, 450, 900, 4, 2, 7,
        config, "user-1", "agent-1",
    )  # fmt: skip


def test_every_field_of_the_record_is_rendered() -> None:
    session = wire.session_out(record("s1"))
    assert (session.name, session.user_id, session.agent_id) == ("sessions/s1", "user-1", "agent-1")
    assert (session.message_count, session.total_message_count) == (12, 30)
    assert (session.pending_tokens, session.live_tokens) == (450, 900)
    assert (session.keep_recent_count, session.archive_count) == (4, 2)
    assert session.working_memory_version == 7
    # the same instant as every other timestamp of the wire form (to a float's precision)
    assert session.create_time == wire.timestamp(1_700_000_000.25)
    assert session.update_time == wire.timestamp(1_700_000_123.5)
    assert session.create_time.seconds == 1_700_000_000
    assert abs(session.create_time.nanos - 250_000_000) < 1_000
    assert (session.update_time.seconds, session.update_time.nanos) == (1_700_000_123, 500_000_000)
    assert session.config == wire.config_out(POLICY)
    assert session.config.auto_commit.pending_token_threshold == 4000
    assert session.config.auto_commit.idle_timeout.seconds == 90
    assert session.config.tool_output_inline_chars == 2048


def test_an_unconfigured_session_still_carries_its_config_field() -> None:
    session = wire.session_out(record("plain", SessionSettings()))
    assert session.HasField("config") and session.HasField("create_time")
    assert session.config.ByteSize() == 0


def test_answers_sharing_a_configuration_do_not_share_a_message() -> None:
    first, second = wire.session_out(record("a")), wire.session_out(record("b"))
    first.config.auto_commit.pending_token_threshold = 1
    first.create_time.seconds = 5
    assert second.config.auto_commit.pending_token_threshold == 4000
    assert wire.session_out(record("c")).config.auto_commit.pending_token_threshold == 4000
    assert second.create_time.seconds == 1_700_000_000
