"""RemoveRecentMessages over every engine: the newest live messages taken back in one unit of
work, the window counters right afterwards, idempotent by request id, refused for archived
messages (an OpenAI Agents Session's pop_item is built on it)."""

from __future__ import annotations

import pytest
from storage_support import Services

from wm_core import Message, Role, TextPart, ToolResultPart, ToolUsePart, message_tokens
from wm_server.errors import FailedPrecondition, InvalidArgument, NotFound


def _text(mid: str, words: int) -> Message:
    parts = (TextPart(" ".join(f"{mid}w{n}" for n in range(words))),)
    return Message(mid, Role.USER, parts, message_tokens(parts))


async def _add(services: Services, session: str, *messages: Message) -> None:
    await services.sessions.add_messages(
        session, messages, create_if_missing=True, request_id="", fingerprint=""
    )


async def _assert_counters_rebuild(services: Services, session: str) -> None:
    counted = await services.sessions.get(session)
    live = await services.sessions.live_messages(session)
    pending, live_tokens = await services.sessions.rebuild_pending_tokens(session)
    assert (counted.pending_tokens, counted.live_tokens) == (pending, live_tokens)
    assert counted.message_count == len(live)
    positions = [m.position for m in live]
    assert positions == list(range(positions[0], positions[0] + len(positions))) if live else True


async def test_the_newest_live_messages_are_removed_and_returned_oldest_first(
    services: Services,
) -> None:
    await services.sessions.create("s", "")
    await _add(services, "s", *[_text(f"m{n}", 10 + n) for n in range(1, 6)])
    await services.commits.phase1("s", 2, None)  # archives m1-m3: keep window 2
    await _add(services, "s", _text("m6", 30), _text("m7", 40))
    before = await services.sessions.get("s")

    removed = await services.sessions.remove_recent("s", 2, request_id="pop-1", fingerprint="a")

    assert [m.message.id for m in removed.messages] == ["m6", "m7"]
    assert [m.position for m in removed.messages] == [6, 7]
    gone = sum(m.message.estimated_tokens for m in removed.messages)
    assert removed.session.live_tokens == before.live_tokens - gone
    assert removed.session.message_count == before.message_count - 2 == 2
    assert removed.session.total_message_count == before.total_message_count - 2
    assert [m.message.id for m in await services.sessions.live_messages("s")] == ["m4", "m5"]
    await _assert_counters_rebuild(services, "s")
    # The freed positions are taken again: the window arithmetic stays right afterwards.
    await _add(services, "s", _text("m8", 12), _text("m6", 5))  # a removed id may come back
    live = await services.sessions.live_messages("s")
    assert [(m.position, m.message.id) for m in live] == [
        (4, "m4"),
        (5, "m5"),
        (6, "m8"),
        (7, "m6"),
    ]
    await _assert_counters_rebuild(services, "s")
    record, _ = await services.commits.phase1("s", 1, None)
    assert record.archived_message_count == 3
    await _assert_counters_rebuild(services, "s")


async def test_a_retry_with_the_same_request_id_returns_the_same_messages(
    services: Services,
) -> None:
    await _add(services, "s", *[_text(f"m{n}", 5) for n in range(1, 5)])
    first = await services.sessions.remove_recent("s", 1, request_id="pop", fingerprint="fp")
    again = await services.sessions.remove_recent("s", 1, request_id="pop", fingerprint="fp")
    assert [m.message for m in again.messages] == [m.message for m in first.messages]
    assert [m.message.id for m in first.messages] == ["m4"]
    assert (await services.sessions.get("s")).message_count == 3  # removed once
    with pytest.raises(FailedPrecondition) as reused:
        await services.sessions.remove_recent("s", 2, request_id="pop", fingerprint="other")
    assert reused.value.reason == "REQUEST_ID_REUSED"
    other = await services.sessions.remove_recent("s", 1, request_id="pop-2", fingerprint="fp")
    assert [m.message.id for m in other.messages] == ["m3"]


async def test_archived_messages_are_never_removed(services: Services) -> None:
    await _add(services, "s", *[_text(f"m{n}", 5) for n in range(1, 4)])
    await services.commits.phase1("s", 1, None)  # m1, m2 archived; m3 live
    before = await services.sessions.get("s")
    with pytest.raises(FailedPrecondition) as refused:
        await services.sessions.remove_recent("s", 2, request_id="r1", fingerprint="a")
    assert refused.value.reason == "MESSAGES_NOT_LIVE"
    assert refused.value.metadata["live_message_count"] == "1"
    assert await services.sessions.get("s") == before  # nothing changed
    await services.sessions.remove_recent("s", 1, request_id="r2", fingerprint="a")
    with pytest.raises(FailedPrecondition):
        await services.sessions.remove_recent("s", 1, request_id="r3", fingerprint="a")
    assert (await services.sessions.get("s")).live_tokens == 0


async def test_bad_requests_change_nothing(services: Services) -> None:
    await _add(services, "s", _text("m1", 5))
    for count in (0, -1, 101):
        with pytest.raises(InvalidArgument) as bad:
            await services.sessions.remove_recent("s", count, request_id="", fingerprint="")
        assert bad.value.violations[0].field == "count"
    with pytest.raises(NotFound):
        await services.sessions.remove_recent("nope", 1, request_id="", fingerprint="")
    assert (await services.sessions.get("s")).message_count == 1


async def test_stored_tool_outputs_go_with_their_message_and_the_id_can_be_added_again(
    services: Services,
) -> None:
    log = "".join(f"line {n}\n" for n in range(3000))
    call = Message("c1", Role.ASSISTANT, (ToolUsePart("t1", "run", "{}"),), 0)
    result = Message("r1", Role.USER, (ToolResultPart("t1", log),), 0)
    await _add(services, "s", _text("m1", 3), call, result)
    assert (await services.tool_outputs.read("s", "out.r1.0", "lines", 1, 1, "")).content
    removed = await services.sessions.remove_recent("s", 2, request_id="", fingerprint="")
    assert [m.message.id for m in removed.messages] == ["c1", "r1"]
    with pytest.raises(NotFound):
        await services.tool_outputs.read("s", "out.r1.0", "lines", 1, 1, "")
    await _add(services, "s", call, result)  # the same ids and output id store again
    page = await services.tool_outputs.read("s", "out.r1.0", "lines", 3000, 1, "")
    assert page.content == "line 2999\n"
    await _assert_counters_rebuild(services, "s")
