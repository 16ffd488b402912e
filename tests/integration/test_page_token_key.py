"""Every paged list signs its tokens with the deployment's key, as the composition root wires it.

Two servers on one database (replicas, here on one SQLite file) must accept each other's page
tokens on every list, and a server signing with another key must refuse them all: a service
wired with a key of its own process would pass the first half on one server and fail it across
two. Real servers on loopback, a real SQLite file, real gRPC clients.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import grpc
import pytest
from integration.conftest import make_settings

from support import builders as b
from support import commit_flow, wm_names
from support.errors import details
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import start_application

Stub = service_grpc.WorkingMemoryServiceStub
OWNER = wm_names.user("u1")
# Stored whole (past the inline limit), and past one page of lines (10,000).
OUTPUT = "\n".join(f"line {i}" for i in range(10_050))


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Stub]]]:
    """Start servers over one data directory; each answer is a stub to it."""
    async with AsyncExitStack() as stack:

        async def start(**overrides: object) -> Stub:
            settings = make_settings(tmp_path, tool_output_inline_chars=500, **overrides)
            app = await start_application(settings)
            stack.push_async_callback(app.stop, 0.5)
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(app.address))
            return Stub(channel)

        yield start


async def _commit(stub: Stub, session: str) -> None:
    _, events = await commit_flow.commit(stub, session, within=60)
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED, events[-1]


async def _fill(stub: Stub) -> None:
    """Two of everything a list pages over: sessions, live messages, commits, archives (of
    several messages), lines of a stored tool output, memories."""
    await stub.CreateSession(api.CreateSessionRequest(session_id="other"))
    for turn in range(2):
        await stub.AddMessages(
            api.AddMessagesRequest(
                parent=wm_names.session("s"),
                messages=[
                    b.user(f"question {turn}", f"q{turn}"),
                    b.tool_call(f"call{turn}", "run", {"n": turn}, f"c{turn}"),
                    b.tool_result(f"call{turn}", OUTPUT, message_id=f"r{turn}"),
                    b.assistant(f"answer {turn}", f"a{turn}"),
                ],
                create_session_if_missing=True,
            )
        )
        await _commit(stub, "s")
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("s"), messages=[b.user("later"), b.user("latest")]
        )
    )
    for text in ("Ledger runs on PostgreSQL", "Deploys go out on Tuesdays"):
        memory = pb.Memory(type=pb.MEMORY_TYPE_DECISION, text=text)
        await stub.CreateMemory(api.CreateMemoryRequest(owner=OWNER, memory=memory))


async def _first_pages(stub: Stub) -> dict[str, str]:
    """The token after the first item of every paged list."""
    archive = (
        (await stub.ListArchives(api.ListArchivesRequest(parent=wm_names.session("s"))))
        .archives[0]
        .name
    )
    tokens = {
        "sessions": (await stub.ListSessions(api.ListSessionsRequest(page_size=1))).next_page_token,
        "messages": (
            await stub.ListMessages(
                api.ListMessagesRequest(parent=wm_names.session("s"), page_size=1)
            )
        ).next_page_token,
        "commits": (
            await stub.ListCommits(
                api.ListCommitsRequest(parent=wm_names.session("s"), page_size=1)
            )
        ).next_page_token,
        "archives": (
            await stub.ListArchives(
                api.ListArchivesRequest(parent=wm_names.session("s"), page_size=1)
            )
        ).next_page_token,
        "archive": (
            await stub.ListMessages(api.ListMessagesRequest(parent=archive, page_size=1))
        ).next_page_token,
        "tool_output": (
            await stub.GetToolOutput(
                api.GetToolOutputRequest(name=wm_names.tool_output("s", "out.r0.0"))
            )
        ).next_page_token,
        "memories": (
            await stub.ListMemories(api.ListMemoriesRequest(owner=OWNER, page_size=1))
        ).next_page_token,
    }
    assert all(tokens.values()), tokens  # every list has a second page
    return tokens


async def _next_pages(stub: Stub, tokens: dict[str, str]) -> dict[str, int]:
    """How many items the page after each token holds (raises what the server refuses)."""
    archive = (
        (await stub.ListArchives(api.ListArchivesRequest(parent=wm_names.session("s"))))
        .archives[0]
        .name
    )
    return {
        "sessions": len(
            (
                await stub.ListSessions(api.ListSessionsRequest(page_token=tokens["sessions"]))
            ).sessions
        ),
        "messages": len(
            (
                await stub.ListMessages(
                    api.ListMessagesRequest(
                        parent=wm_names.session("s"), page_token=tokens["messages"]
                    )
                )
            ).messages
        ),
        "commits": len(
            (
                await stub.ListCommits(
                    api.ListCommitsRequest(
                        parent=wm_names.session("s"), page_token=tokens["commits"]
                    )
                )
            ).commits
        ),
        "archives": len(
            (
                await stub.ListArchives(
                    api.ListArchivesRequest(
                        parent=wm_names.session("s"), page_token=tokens["archives"]
                    )
                )
            ).archives
        ),
        "archive": len(
            (
                await stub.ListMessages(
                    api.ListMessagesRequest(parent=archive, page_token=tokens["archive"])
                )
            ).messages
        ),
        "tool_output": (
            await stub.GetToolOutput(
                api.GetToolOutputRequest(
                    name=wm_names.tool_output("s", "out.r0.0"), page_token=tokens["tool_output"]
                )
            )
        ).line_count,
        "memories": len(
            (
                await stub.ListMemories(
                    api.ListMemoriesRequest(owner=OWNER, page_token=tokens["memories"])
                )
            ).memories
        ),
    }


async def test_replicas_of_one_database_accept_each_others_page_tokens_on_every_list(
    servers: Callable[..., Awaitable[Stub]],
) -> None:
    first, second = await servers(), await servers()  # the key: kept in the shared database
    await _fill(first)
    tokens = await _first_pages(first)
    assert await _next_pages(second, tokens) == await _next_pages(first, tokens)
    rest = await _next_pages(second, tokens)
    assert all(rest.values()), rest  # every second page holds what follows the first


async def test_a_server_signing_with_another_key_refuses_every_lists_tokens(
    servers: Callable[..., Awaitable[Stub]],
) -> None:
    first = await servers()
    await _fill(first)
    tokens = await _first_pages(first)
    keyed = await servers(page_token_key="an-operator-chosen-key-0123456789")
    for name, token in tokens.items():
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _next_pages(keyed, {**tokens, **{other: "" for other in tokens}, name: token})
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert details(refused.value)[0].reason == "PAGE_TOKEN_INVALID", name
