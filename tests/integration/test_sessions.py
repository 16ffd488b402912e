"""Sessions and AddMessages through a real server on loopback and a real SQLite file."""

from __future__ import annotations

import grpc
import pytest

from support import builders as b
from support import commit_flow, wm_names
from support.errors import details
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

Stub = service_grpc.WorkingMemoryServiceStub


async def _error(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value


async def test_create_get_and_duplicate_session(stub: Stub) -> None:
    created = await stub.CreateSession(api.CreateSessionRequest(session_id="alpha"))
    assert created.name == "sessions/alpha"
    assert created.create_time.seconds > 0
    got = await stub.GetSession(api.GetSessionRequest(name=wm_names.session("alpha")))
    assert got.name == "sessions/alpha" and got.message_count == 0 and got.pending_tokens == 0
    error = await _error(stub.CreateSession(api.CreateSessionRequest(session_id="alpha")))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
    assert details(error)[0].reason == "SESSION_EXISTS"


async def test_create_with_same_request_id_returns_the_session(stub: Stub) -> None:
    first = await stub.CreateSession(api.CreateSessionRequest(session_id="s1", request_id="r1"))
    again = await stub.CreateSession(api.CreateSessionRequest(session_id="s1", request_id="r1"))
    assert again.create_time == first.create_time


async def test_server_makes_an_id_when_none_is_given(stub: Stub) -> None:
    a = await stub.CreateSession(api.CreateSessionRequest())
    c = await stub.CreateSession(api.CreateSessionRequest())
    assert a.name.startswith("sessions/") and c.name.startswith("sessions/") and a.name != c.name


@pytest.mark.parametrize("bad", ["has space", "x" * 129, "slash/no", "ü"])
async def test_invalid_session_id_is_a_field_violation(stub: Stub, bad: str) -> None:
    error = await _error(stub.CreateSession(api.CreateSessionRequest(session_id=bad)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    info, fields = details(error)
    assert info.reason == "INVALID_REQUEST" and fields == ["session_id"]


async def test_unknown_session_is_not_found(stub: Stub) -> None:
    error = await _error(stub.GetSession(api.GetSessionRequest(name=wm_names.session("ghost"))))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    info, _ = details(error)
    assert info.reason == "SESSION_NOT_FOUND" and info.metadata["session_id"] == "ghost"
    error = await _error(
        stub.AddMessages(
            api.AddMessagesRequest(parent=wm_names.session("ghost"), messages=[b.user("hi")])
        )
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_list_sessions_pages_newest_first(stub: Stub) -> None:
    for i in range(5):
        await stub.CreateSession(api.CreateSessionRequest(session_id=f"p{i}"))
    seen: list[str] = []
    token = ""
    while True:
        page = await stub.ListSessions(api.ListSessionsRequest(page_size=2, page_token=token))
        assert len(page.sessions) <= 2
        seen.extend(wm_names.last_segment(s.name) for s in page.sessions)
        token = page.next_page_token
        if not token:
            break
    assert seen == ["p4", "p3", "p2", "p1", "p0"]
    error = await _error(stub.ListSessions(api.ListSessionsRequest(page_token="forged")))
    assert details(error)[1] == ["page_token"]
    error = await _error(stub.ListSessions(api.ListSessionsRequest(page_size=-1)))
    assert details(error)[1] == ["page_size"]


async def test_delete_removes_the_session_and_is_idempotent_by_request_id(stub: Stub) -> None:
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("d"), messages=[b.user("x")], create_session_if_missing=True
        )
    )
    await stub.DeleteSession(
        api.DeleteSessionRequest(name=wm_names.session("d"), request_id="del-1")
    )
    await stub.DeleteSession(
        api.DeleteSessionRequest(name=wm_names.session("d"), request_id="del-1")
    )
    error = await _error(stub.GetSession(api.GetSessionRequest(name=wm_names.session("d"))))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    error = await _error(stub.DeleteSession(api.DeleteSessionRequest(name=wm_names.session("d"))))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    recreated = await stub.CreateSession(api.CreateSessionRequest(session_id="d"))
    assert recreated.total_message_count == 0


async def test_add_messages_creates_on_request_and_counts(stub: Stub) -> None:
    reply = await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("new"),
            messages=[b.sized(100), b.sized(200), b.sized(300)],
            create_session_if_missing=True,
        )
    )
    assert reply.session_created
    assert reply.message_count == 3
    assert reply.pending_tokens == 600  # keep 0: every live message is outside the window
    assert len(reply.added_message_ids) == 3 and not reply.duplicate_message_ids
    session = await stub.GetSession(api.GetSessionRequest(name=wm_names.session("new")))
    assert (session.message_count, session.pending_tokens, session.live_tokens) == (3, 600, 600)


async def test_resent_message_ids_are_duplicates_not_stored_twice(stub: Stub) -> None:
    await stub.CreateSession(api.CreateSessionRequest(session_id="dup"))
    first = await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("dup"), messages=[b.user("a", "m1"), b.user("b", "m2")]
        )
    )
    assert list(first.added_message_ids) == ["m1", "m2"]
    second = await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("dup"),
            messages=[b.user("b", "m2"), b.user("c", "m3"), b.user("c", "m3")],
        )
    )
    assert list(second.added_message_ids) == ["m3"]
    assert list(second.duplicate_message_ids) == ["m2", "m3"]
    assert second.message_count == 3


async def test_retry_with_same_request_id_stores_nothing_new(stub: Stub) -> None:
    request = api.AddMessagesRequest(parent=wm_names.session("rq"), messages=[b.user("no id here")], create_session_if_missing=True, request_id="batch-7")  # fmt: skip
    first = await stub.AddMessages(request)
    second = await stub.AddMessages(request)
    assert second.added_message_ids == first.added_message_ids
    assert second.message_count == 1


def _tool_use(input_json: str) -> pb.Message:
    return pb.Message(
        role=pb.ROLE_ASSISTANT,
        parts=[pb.Part(tool_use=pb.ToolUse(id="t1", name="bash", input_json=input_json))],
    )


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (pb.Message(role=pb.ROLE_USER), "messages[1].parts"),
        (pb.Message(role=99, parts=[pb.Part(text="x")]), "messages[1].role"),
        (pb.Message(role=pb.ROLE_UNSPECIFIED, parts=[pb.Part(text="x")]), "messages[1].role"),
        # The contract's rule: one member of the oneof "kind" is required.
        (pb.Message(role=pb.ROLE_USER, parts=[pb.Part()]), "messages[1].parts[0].kind"),
        (_tool_use("{not json"), "messages[1].parts[0].tool_use.input_json"),
        (_tool_use("[1, 2]"), "messages[1].parts[0].tool_use.input_json"),
        (b.user("x", message_id="bad id!"), "messages[1].id"),
        (b.text(pb.ROLE_USER, "x" * (1024 * 1024 + 1)), "messages[1]"),
    ],
)
async def test_invalid_message_rejects_the_whole_batch(
    stub: Stub, message: pb.Message, field: str
) -> None:
    await stub.CreateSession(api.CreateSessionRequest(session_id="v"))
    error = await _error(
        stub.AddMessages(
            api.AddMessagesRequest(parent=wm_names.session("v"), messages=[b.user("ok"), message])
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(error)[1] == [field]
    session = await stub.GetSession(api.GetSessionRequest(name=wm_names.session("v")))
    assert session.total_message_count == 0  # all or nothing


async def test_batch_size_limits(stub: Stub) -> None:
    await stub.CreateSession(api.CreateSessionRequest(session_id="lim"))
    error = await _error(stub.AddMessages(api.AddMessagesRequest(parent=wm_names.session("lim"))))
    assert details(error)[1] == ["messages"]
    too_many = [b.user(str(i)) for i in range(1001)]
    error = await _error(
        stub.AddMessages(api.AddMessagesRequest(parent=wm_names.session("lim"), messages=too_many))
    )
    assert details(error)[1] == ["messages"]
    ok = await stub.AddMessages(
        api.AddMessagesRequest(parent=wm_names.session("lim"), messages=too_many[:1000])
    )
    assert ok.message_count == 1000


async def test_tool_message_tokens_follow_the_reference_rule(stub: Stub) -> None:
    reply = await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("tok"),
            create_session_if_missing=True,
            messages=[b.tool_call("id12", "bash", {"cmd": "ls"}), b.tool_result("id12", "a.py")],
        )
    )
    # "id12" + "bash" + '{"cmd": "ls"}' = 21 chars → 6; "id12" + "a.py" = 8 chars → 2
    assert reply.pending_tokens == 6 + 2


async def test_list_messages_pages_the_live_messages(stub: Stub) -> None:
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("live"),
            create_session_if_missing=True,
            messages=[b.user(f"note {n}", f"m{n}") for n in range(6)],
        )
    )
    first = await stub.ListMessages(
        api.ListMessagesRequest(parent=wm_names.session("live"), page_size=4)
    )
    assert [m.id for m in first.messages] == ["m0", "m1", "m2", "m3"]
    assert [m.position for m in first.messages] == [1, 2, 3, 4]
    assert first.messages[0].create_time.seconds > 0 and first.next_page_token
    _, events = await commit_flow.commit(stub, "live", 1)
    assert events[0].phase1.archived_message_count == 5
    # The token was issued before m4 was archived: the next page starts at the first live one.
    rest = await stub.ListMessages(
        api.ListMessagesRequest(parent=wm_names.session("live"), page_token=first.next_page_token)
    )
    assert [m.id for m in rest.messages] == ["m5"] and not rest.next_page_token
    for request, code in (
        (api.ListMessagesRequest(parent=wm_names.session("absent")), grpc.StatusCode.NOT_FOUND),
        (
            api.ListMessagesRequest(parent=wm_names.session("live"), page_size=-1),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            api.ListMessagesRequest(parent=wm_names.session("live"), page_token="forged"),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ):
        error = await _error(stub.ListMessages(request))
        assert error.code() == code
