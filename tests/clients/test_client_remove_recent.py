"""RemoveRecentMessages through the Python client and a real server: the removed messages come
back whole, a retry with the same request id answers the same, and refusals carry their
details (FAILED_PRECONDITION with ErrorInfo, INVALID_ARGUMENT with a field violation)."""

from __future__ import annotations

import pytest

from wm_client import FailedPreconditionError, InvalidArgumentError, WmClient
from wm_proto.v1 import resources_pb2 as pb


def _text(mid: str, value: str) -> pb.Message:
    return pb.Message(id=mid, role=pb.ROLE_USER, parts=[pb.Part(text=value)])


async def test_the_newest_live_messages_are_taken_back_over_the_wire(client: WmClient) -> None:
    await client.add_messages(
        "rr", [_text("m1", "one"), _text("m2", "two two"), _text("m3", "three three three")],
        create_session_if_missing=True,
    )  # fmt: skip
    before = await client.get_session("rr")
    removed = await client.remove_recent_messages("rr", 2, request_id="pop-1")
    assert [(m.id, m.position, m.parts[0].text) for m in removed.messages] == [
        ("m2", 2, "two two"), ("m3", 3, "three three three"),
    ]  # fmt: skip
    assert all(m.HasField("create_time") and m.estimated_tokens > 0 for m in removed.messages)
    after = await client.get_session("rr")
    assert removed.message_count == after.message_count == 1
    assert (
        removed.live_tokens
        == after.live_tokens
        == before.live_tokens - sum(m.estimated_tokens for m in removed.messages)
    )
    again = await client.remove_recent_messages("rr", 2, request_id="pop-1")
    assert (
        again.messages == removed.messages and (await client.get_session("rr")).message_count == 1
    )
    added = await client.add_messages("rr", [_text("m4", "four")])
    assert added.message_count == 2
    live = await client.list_messages("rr")
    assert [(m.id, m.position) for m in live.messages] == [("m1", 1), ("m4", 2)]


async def test_refusals_carry_their_details_and_change_nothing(client: WmClient) -> None:
    await client.add_messages("rr2", [_text("m1", "one"), _text("m2", "two")],
                              create_session_if_missing=True)  # fmt: skip
    async for _ in client.commit("rr2", 1):
        pass
    with pytest.raises(FailedPreconditionError) as refused:
        await client.remove_recent_messages("rr2", 2)
    assert refused.value.reason == "MESSAGES_NOT_LIVE"
    assert refused.value.metadata == {"session_id": "rr2", "live_message_count": "1", "count": "2"}
    with pytest.raises(InvalidArgumentError) as bad:
        await client.remove_recent_messages("rr2", 0)
    assert [v.field for v in bad.value.field_violations] == ["count"]
    assert (await client.get_session("rr2")).message_count == 1
