"""The rules the services no longer repeat are refused at the edge, by a real server.

The id patterns (a session's, an owner's), SearchArchives' one owner, CreateCommit's keep
ranges and its one keep, and every search query's length and blankness are the proto's
protovalidate rules only: each request breaking one answers INVALID_ARGUMENT with a BadRequest
violation naming the field and the rule's id, and changes nothing. The one case the edge cannot
see (a query of only U+001C-U+001F, blank to the service's ``str.strip`` but not to CEL's
``trim()``) is refused by the service with the same field and rule id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from support.production import settings_for
from support.providers import ProgrammableProvider
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application

S = "sessions/edge"
ALL = "sessions/-"
# The owner ids may hold these, session ids not (rules.proto's owner_id, session_name).
BAD_ID = "not valid!"

CASES: list[tuple[str, Message, str, str]] = [
    # SearchArchives: one owner at most, each an owner id
    (
        "SearchArchives",
        api.SearchArchivesRequest(parent=ALL, query="x", user_id="u1", agent_id="a1"),
        "request",
        "owner.one_of",
    ),
    (
        "SearchArchives",
        api.SearchArchivesRequest(parent=ALL, query="x", user_id=BAD_ID),
        "user_id",
        "string.owner_id",
    ),
    (
        "SearchArchives",
        api.SearchArchivesRequest(parent=ALL, query="x", agent_id="a" * 129),
        "agent_id",
        "string.owner_id",
    ),
    # CreateCommit: the keep ranges, and one keep
    (
        "CreateCommit",
        api.CreateCommitRequest(parent=S, keep_recent_count=-1),
        "keep_recent_count",
        "int32.gte_lte",
    ),
    (
        "CreateCommit",
        api.CreateCommitRequest(parent=S, keep_recent_count=10_001),
        "keep_recent_count",
        "int32.gte_lte",
    ),
    (
        "CreateCommit",
        api.CreateCommitRequest(parent=S, keep_recent_turns=-1),
        "keep_recent_turns",
        "int32.gte_lte",
    ),
    (
        "CreateCommit",
        api.CreateCommitRequest(parent=S, keep_recent_turns=1_001),
        "keep_recent_turns",
        "int32.gte_lte",
    ),
    (
        "CreateCommit",
        api.CreateCommitRequest(parent=S, keep_recent_count=2, keep_recent_turns=1),
        "request",
        "keep.one_of",
    ),
    # the queries of every search: not blank, at most 1000 characters
    (
        "SearchArchives",
        api.SearchArchivesRequest(parent=S, query=" \t\u3000"),
        "query",
        "query.not_blank",
    ),
    (
        "SearchArchives",
        api.SearchArchivesRequest(parent=S, query="x" * 1_001),
        "query",
        "string.max_len",
    ),
    (
        "SearchToolOutputs",
        api.SearchToolOutputsRequest(parent=S, query=""),
        "query",
        "query.not_blank",
    ),
    (
        "SearchToolOutputs",
        api.SearchToolOutputsRequest(parent=S, query="x" * 1_001),
        "query",
        "string.max_len",
    ),
    (
        "SearchMemories",
        api.SearchMemoriesRequest(owner="users/u1", query="\n"),
        "query",
        "query.not_blank",
    ),
    (
        "SearchMemories",
        api.SearchMemoriesRequest(owner="users/u1", query="x" * 1_001),
        "query",
        "string.max_len",
    ),
    # the blanks only str.strip knows: refused by the service, as the rule says
    (
        "SearchArchives",
        api.SearchArchivesRequest(parent=S, query="\x1c\x1d"),
        "query",
        "query.not_blank",
    ),
    (
        "SearchToolOutputs",
        api.SearchToolOutputsRequest(parent=S, query="\x1e"),
        "query",
        "query.not_blank",
    ),
    (
        "SearchMemories",
        api.SearchMemoriesRequest(owner="users/u1", query=" \x1f "),
        "query",
        "query.not_blank",
    ),
    # session ids, given or in a name
    (
        "CreateSession",
        api.CreateSessionRequest(session_id=BAD_ID),
        "session_id",
        "string.pattern",
    ),
    (
        "CreateSession",
        api.CreateSessionRequest(session_id="s" * 129),
        "session_id",
        "string.pattern",
    ),
    ("CreateSession", api.CreateSessionRequest(session_id="-"), "session_id", "string.not_in"),
    ("GetSession", api.GetSessionRequest(name="sessions/" + BAD_ID), "name", "string.session_name"),
    (
        "CreateCommit",
        api.CreateCommitRequest(parent="sessions/" + "s" * 129),
        "parent",
        "string.session_name",
    ),
    # owner ids: a session's owners, a purge, a memory owner
    (
        "CreateSession",
        api.CreateSessionRequest(session_id="edge2", session={"user_id": BAD_ID}),
        "session.user_id",
        "string.owner_id",
    ),
    (
        "CreateSession",
        api.CreateSessionRequest(session_id="edge3", session={"agent_id": "a" * 129}),
        "session.agent_id",
        "string.owner_id",
    ),
    ("PurgeUserData", api.PurgeUserDataRequest(user_id=""), "user_id", "string.owner_id"),
    ("PurgeUserData", api.PurgeUserDataRequest(user_id=BAD_ID), "user_id", "string.owner_id"),
    (
        "SearchMemories",
        api.SearchMemoriesRequest(owner="users/" + BAD_ID, query="x"),
        "owner",
        "string.memory_owner",
    ),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[Any, Application]]:
    settings = settings_for(Path(tmp_path_factory.mktemp("edge")))
    app = await start_application(settings, provider=ProgrammableProvider())
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        await stub.CreateSession(api.CreateSessionRequest(session_id="edge"))
        await stub.AddMessages(
            api.AddMessagesRequest(
                parent=S,
                messages=[{"id": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}],
            )
        )
        yield stub, app
    await app.stop(grace=0.5)


def _violations(error: grpc.aio.AioRpcError) -> list[tuple[str, str]]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    found: list[tuple[str, str]] = []
    for detail in status.details if status else []:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            found += [(v.field, v.reason) for v in bad.field_violations]
    return found


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    "method,request_,field,rule", CASES, ids=[f"{c[0]}-{c[2]}-{c[3]}" for c in CASES]
)
async def test_a_rule_the_services_do_not_repeat_is_refused_with_its_field_and_id(
    served: tuple[Any, Application], method: str, request_: Message, field: str, rule: str
) -> None:
    stub, _app = served
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await getattr(stub, method)(request_, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert (field, rule) in _violations(refused.value), _violations(refused.value)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_refused_request_changes_nothing(served: tuple[Any, Application]) -> None:
    stub, _app = served
    for request in (
        api.CreateCommitRequest(parent=S, keep_recent_count=2, keep_recent_turns=1),
        api.CreateCommitRequest(parent=S, keep_recent_count=10_001),
    ):
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.CreateCommit(request, timeout=30)
    for session_id in (BAD_ID, "-", "edge2", "edge3"):
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.CreateSession(
                api.CreateSessionRequest(session_id=session_id, session={"user_id": BAD_ID}),
                timeout=30,
            )
    commits = await stub.ListCommits(api.ListCommitsRequest(parent=S), timeout=30)
    assert list(commits.commits) == []
    sessions = await stub.ListSessions(api.ListSessionsRequest(), timeout=30)
    assert [s.name for s in sessions.sessions] == [S]
    session = await stub.GetSession(api.GetSessionRequest(name=S), timeout=30)
    assert session.message_count == 1
