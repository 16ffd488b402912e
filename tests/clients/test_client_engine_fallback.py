"""ContextEngine when the service is down: the agent goes on with its own messages, nothing
raises, one warning per outage, and the turns that waited are stored once it comes back."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from support.providers import ProgrammableProvider
from support.server_process import free_port
from wm_client import CompactOutcome, ContextEngine, WmClient
from wm_client.engine import _Unsent
from wm_client.jsonl import message_from_dict
from wm_proto.v1 import resources_pb2 as pb
from wm_server.app import Application, start_application
from wm_server.config import Settings


def _turn(n: int) -> list[pb.Message]:
    return [
        message_from_dict({"id": f"u{n}", "role": "user", "content": f"question {n}"}),
        message_from_dict({"id": f"a{n}", "role": "assistant", "content": f"answer {n}"}),
    ]


def _texts(messages: object) -> list[str]:
    return [m.parts[0].text for m in messages]  # type: ignore[attr-defined]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "wm_client.engine" and r.levelno >= logging.WARNING
    ]


async def _start(data_dir: Path, port: int) -> Application:
    settings = Settings(
        address=f"127.0.0.1:{port}",
        data_dir=data_dir,
        llm_provider="offline",
        shutdown_grace_seconds=0.5,
    )  # type: ignore[call-arg]
    return await start_application(settings, provider=ProgrammableProvider())


async def test_a_stopped_server_then_one_that_comes_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wm_client.engine")
    port = free_port()
    async with WmClient(f"127.0.0.1:{port}", timeout=5) as client:
        engine = ContextEngine(client)
        started = time.monotonic()

        first = await engine.after_turn("down", _turn(1), token_budget=1000)
        assert not first.stored and first.unsent_messages == 2
        assert "unreachable" in first.fallback_reason and first.added_message_ids == ()
        second = await engine.after_turn("down", _turn(2), token_budget=1000)
        assert not second.stored and second.unsent_messages == 4

        context = await engine.assemble("down", 100_000)
        assert context.fallback and "unreachable" in context.fallback_reason
        assert _texts(context.messages) == ["question 1", "answer 1", "question 2", "answer 2"]
        assert context.working_memory_version == 0 and context.system_prompt_addition == ""

        compacted = await engine.compact("down")
        assert compacted.outcome is CompactOutcome.UNAVAILABLE and not compacted.compacted
        assert "unreachable" in compacted.error
        assert time.monotonic() - started < 30, "an unreachable service must fail fast"
        assert len(_warnings(caplog)) == 1, _warnings(caplog)
        assert engine.outage

        app = await _start(tmp_path, port)
        # The channel finds the server again within its reconnect backoff (≤ 3 s); a call
        # made before that falls back once more, which is not what this test is about.
        assert await client.wait_ready(10)
        try:
            third = await engine.after_turn("down", _turn(3), token_budget=1000)
            assert third.stored and third.flushed_messages == 4 and third.unsent_messages == 0
            assert list(third.added_message_ids) == ["u3", "a3"]
            assert engine.outage == "" and engine.unsent_messages("down") == 0
            stored = await client.list_messages("down")
            assert [m.id for m in stored.messages] == ["u1", "a1", "u2", "a2", "u3", "a3"]
            served = await engine.assemble("down", 100_000)
            assert not served.fallback and len(served.messages) == 6
            assert any("reachable again" in r.getMessage() for r in caplog.records)
            assert len(_warnings(caplog)) == 1
        finally:
            await app.stop(grace=0.5)


async def test_a_server_that_goes_away_mid_session_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    app = await _start(tmp_path, port)
    async with WmClient(app.address, timeout=5) as client:
        engine = ContextEngine(client)
        assert (await engine.after_turn("mid", _turn(1), token_budget=100_000)).stored
        await app.stop(grace=0.5)

        waiting = await engine.after_turn("mid", _turn(2), token_budget=100_000)
        assert not waiting.stored and waiting.unsent_messages == 2
        # The runtime's own history wins over what the engine saw, and the budget trims it
        # from the oldest end, never opening on a half turn.
        own = [*_turn(1), *_turn(2), *_turn(3)]
        cost = [max(1, m.ByteSize() // 4) for m in own]  # the fallback's rough estimate
        # Room for "answer 2" and turn 3: the lone answer is dropped, the turn kept whole.
        trimmed = await engine.assemble("mid", sum(cost[3:]), messages=own)
        assert trimmed.fallback and _texts(trimmed.messages) == ["question 3", "answer 3"]
        assert trimmed.response.dropped_message_count == 4
        assert trimmed.estimated_tokens == sum(cost[4:])
        assert len(_warnings(caplog)) == 1

        app = await _start(tmp_path, port)  # the same data directory: a restart
        assert await client.wait_ready(10)
        try:
            context = await engine.assemble("mid", 100_000)  # sends what waited first
            assert not context.fallback
            assert _texts(context.messages) == ["question 1", "answer 1", "question 2", "answer 2"]
            assert engine.unsent_messages("mid") == 0
        finally:
            await app.stop(grace=0.5)


async def test_a_batch_whose_answer_was_lost_is_not_stored_twice(app: Application) -> None:
    """The server stored the batch but the answer never came (the engine saw DEADLINE_EXCEEDED):
    the re-send carries the same request id, so the server answers it without storing again.
    The messages have no ids, so only the request id can tell the two sends apart."""
    async with WmClient(app.address) as client:
        engine = ContextEngine(client)
        lost = _Unsent([message_from_dict({"role": "user", "content": "sent once"})])
        await client.add_messages(
            "lost", lost.messages, create_session_if_missing=True, request_id=lost.request_id
        )
        engine._queue("lost", lost)  # what after_turn keeps when the answer does not come
        result = await engine.after_turn(
            "lost", [message_from_dict({"role": "assistant", "content": "next"})], 1000
        )
        assert result.stored and result.flushed_messages == 1
        stored = await client.list_messages("lost")
        assert _texts(stored.messages) == ["sent once", "next"]
