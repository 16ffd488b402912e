"""API keys: UNAUTHENTICATED without a valid key, one tenant per key, tenants isolated, and
the refusal to serve unauthenticated beyond loopback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from support import builders as b
from support import commit_flow
from support import wm_names as names
from support.errors import details
from support.production import code_of, reflected_services
from support.production import settings_for as make_settings
from support.providers import ProgrammableProvider
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.config import ConfigurationError

Stub = service_grpc.WorkingMemoryServiceStub
Metadata = tuple[tuple[str, str], ...]

ALPHA_KEY = "alpha-0123456789abcdef-key"
BETA_KEY = "beta-fedcba9876543210-key"
ALPHA: Metadata = (("authorization", f"Bearer {ALPHA_KEY}"),)
BETA: Metadata = (("authorization", f"Bearer {BETA_KEY}"),)


@pytest.fixture
async def keyed_app(tmp_path: Path) -> AsyncIterator[Application]:
    settings = make_settings(
        tmp_path,
        api_keys=f"alpha:{ALPHA_KEY}, beta:{BETA_KEY}",
        phase2_retry_base_delay=0.05,
        heartbeat_seconds=0.5,
    )
    application = await start_application(settings, provider=ProgrammableProvider())
    yield application
    await application.stop(grace=0.5)


@pytest.fixture
async def stub(keyed_app: Application) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(keyed_app.address) as channel:
        yield Stub(channel)


# --- no key, wrong key, right key ------------------------------------------------------------
async def test_no_key_is_unauthenticated_on_unary_and_streaming_rpcs(stub: Stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ListSessions(api.ListSessionsRequest())
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert details(caught.value)[0].reason == "API_KEY_MISSING"
    stream = stub.WatchCommit(api.WatchCommitRequest(name="sessions/s/commits/c"))
    assert await code_of(stream) == grpc.StatusCode.UNAUTHENTICATED
    tools = stub.GetToolDefinitions(api.GetToolDefinitionsRequest())
    assert await code_of(tools) == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    "header",
    [
        "Bearer not-a-configured-key-at-all",
        f"Basic {ALPHA_KEY}",  # right key, wrong scheme
        "Bearer",
        f"Bearer {ALPHA_KEY}x",
        "",
    ],
)
async def test_wrong_key_is_unauthenticated(stub: Stub, header: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateSession(
            api.CreateSessionRequest(session_id="nope"), metadata=(("authorization", header),)
        )
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert details(caught.value)[0].reason == "API_KEY_INVALID"
    assert ALPHA_KEY not in (caught.value.details() or "")


async def test_right_key_is_served_and_the_request_id_comes_back(stub: Stub) -> None:
    call = stub.CreateSession(
        api.CreateSessionRequest(session_id="mine"),
        metadata=(*ALPHA, ("x-request-id", "req-42")),
    )
    session = await call
    assert session.name == "sessions/mine"
    # A unary call returns the id in its trailers (with the status), not in extra headers.
    assert ("x-request-id", "req-42") in tuple(await call.trailing_metadata())
    assert "x-request-id" not in dict(await call.initial_metadata())
    # Case of the scheme does not matter; a made-up request id is returned when none is sent.
    lower = stub.GetSession(
        api.GetSessionRequest(name="sessions/mine"),
        metadata=(("authorization", f"bearer {ALPHA_KEY}"),),
    )
    assert (await lower).name == "sessions/mine"
    made = dict(await lower.trailing_metadata())["x-request-id"]
    assert isinstance(made, str) and len(made) == 32
    again = stub.GetSession(api.GetSessionRequest(name="sessions/mine"), metadata=ALPHA)
    await again
    assert dict(await again.trailing_metadata())["x-request-id"] != made  # one per call


async def test_the_request_id_comes_back_with_errors_and_on_streams(stub: Stub) -> None:
    """Refusals and service errors carry their details in the trailers: the id is kept
    beside them; a stream sends it in its headers before the first event as well."""
    for metadata, code in (
        ((("x-request-id", "refused-1"),), grpc.StatusCode.UNAUTHENTICATED),
        ((*ALPHA, ("x-request-id", "absent-1")), grpc.StatusCode.NOT_FOUND),
    ):
        call = stub.GetSession(api.GetSessionRequest(name="sessions/absent"), metadata=metadata)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == code
        trailers = dict(caught.value.trailing_metadata() or ())
        assert trailers["x-request-id"] == dict(metadata)["x-request-id"]
        assert details(caught.value)[0].reason  # the rich status is still there
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent="sessions/streamed", messages=[b.user("hello")], create_session_if_missing=True
        ),
        metadata=ALPHA,
    )
    started = await stub.CreateCommit(
        commit_flow.create_request("streamed"), metadata=ALPHA, timeout=30
    )
    stream = stub.WatchCommit(
        api.WatchCommitRequest(name=started.name),
        metadata=(*ALPHA, ("x-request-id", "stream-1")),
        timeout=30,
    )
    assert dict(await stream.initial_metadata())["x-request-id"] == "stream-1"
    events = [e async for e in stream if e.stage != pb.COMMIT_STAGE_HEARTBEAT]
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    assert dict(await stream.trailing_metadata())["x-request-id"] == "stream-1"


async def test_health_and_reflection_need_no_key(keyed_app: Application) -> None:
    async with grpc.aio.insecure_channel(keyed_app.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "wm.v1.WorkingMemoryService"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(keyed_app.address) as sync_channel:
        services = await asyncio.to_thread(reflected_services, sync_channel)
    assert "wm.v1.WorkingMemoryService" in services


# --- tenants ---------------------------------------------------------------------------------
async def _finish_commit(stub: Stub, md: Metadata, session: str) -> pb.CommitEvent:
    _, events = await commit_flow.commit(stub, session, metadata=md)
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED, events[-1]
    return events[0]


async def test_two_tenants_with_the_same_session_id_do_not_see_each_other(stub: Stub) -> None:
    for md, word in ((ALPHA, "aardvark"), (BETA, "bumblebee")):
        await stub.CreateSession(api.CreateSessionRequest(session_id="shared"), metadata=md)
        await stub.AddMessages(
            api.AddMessagesRequest(parent="sessions/shared", messages=[b.user(f"about {word}")]),
            metadata=md,
        )
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent="sessions/shared", messages=[b.user("more"), b.user("again")]
        ),
        metadata=ALPHA,
    )
    alpha = await stub.GetSession(api.GetSessionRequest(name="sessions/shared"), metadata=ALPHA)
    beta = await stub.GetSession(api.GetSessionRequest(name="sessions/shared"), metadata=BETA)
    assert (alpha.message_count, beta.message_count) == (3, 1)

    alpha_first = await _finish_commit(stub, ALPHA, "shared")
    beta_first = await _finish_commit(stub, BETA, "shared")
    assert alpha_first.commit != beta_first.commit
    # Each tenant's archive_001 of "shared" holds its own messages only.
    for md, mine, theirs in ((ALPHA, "aardvark", "bumblebee"), (BETA, "bumblebee", "aardvark")):
        archive = await stub.ListMessages(
            api.ListMessagesRequest(parent="sessions/shared/archives/archive_001"), metadata=md
        )
        text = " ".join(p.text for m in archive.messages for p in m.parts)
        assert mine in text and theirs not in text
        hits = await stub.SearchArchives(
            api.SearchArchivesRequest(query=theirs, parent="sessions/-"), metadata=md
        )
        assert list(hits.hits) == []
    # A commit id of the other tenant is unknown even under the same session id.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetCommit(
            api.GetCommitRequest(name=alpha_first.commit),
            metadata=BETA,
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    listed = await stub.ListSessions(api.ListSessionsRequest(), metadata=BETA)
    assert [s.name for s in listed.sessions] == ["sessions/shared"]


async def test_another_tenants_session_is_not_found_on_every_rpc(stub: Stub) -> None:
    sid = "alpha-only"
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=names.session(sid),
            messages=[b.user("secret plans of alpha"), b.assistant("noted")],
            create_session_if_missing=True,
        ),
        metadata=ALPHA,
    )
    first = await _finish_commit(stub, ALPHA, sid)
    commit, archive = first.commit, first.phase1.archive
    op = pb.SectionOp(section="Session Title", kind=pb.SECTION_OP_KIND_UPDATE, content="Stolen")

    calls: dict[str, Callable[[], Awaitable[Any] | AsyncIterator[Any]]] = {
        "GetSession": lambda: stub.GetSession(
            api.GetSessionRequest(name=names.session(sid)), metadata=BETA
        ),
        "DeleteSession": lambda: stub.DeleteSession(
            api.DeleteSessionRequest(name=names.session(sid)), metadata=BETA
        ),
        "AddMessages": lambda: stub.AddMessages(
            api.AddMessagesRequest(parent=names.session(sid), messages=[b.user("hi")]),
            metadata=BETA,
        ),
        "CreateCommit": lambda: stub.CreateCommit(commit_flow.create_request(sid), metadata=BETA),
        "WatchCommit": lambda: stub.WatchCommit(api.WatchCommitRequest(name=commit), metadata=BETA),
        "GetCommit": lambda: stub.GetCommit(api.GetCommitRequest(name=commit), metadata=BETA),
        "ListCommits": lambda: stub.ListCommits(
            api.ListCommitsRequest(parent=names.session(sid)), metadata=BETA
        ),
        "RetryCommit": lambda: stub.RetryCommit(api.RetryCommitRequest(name=commit), metadata=BETA),
        "CompactSession": lambda: stub.CompactSession(
            api.CompactSessionRequest(name=names.session(sid)), metadata=BETA
        ),
        "GetWorkingMemory": lambda: stub.GetWorkingMemory(
            api.GetWorkingMemoryRequest(name=names.working_memory(sid)), metadata=BETA
        ),
        "ApplyWorkingMemoryOps": lambda: stub.ApplyWorkingMemoryOps(
            api.ApplyWorkingMemoryOpsRequest(parent=names.session(sid), ops=[op]), metadata=BETA
        ),
        "AssembleContext": lambda: stub.AssembleContext(
            api.AssembleContextRequest(name=names.session(sid), token_budget=10_000), metadata=BETA
        ),
        "ListArchives": lambda: stub.ListArchives(
            api.ListArchivesRequest(parent=names.session(sid)), metadata=BETA
        ),
        "GetArchive": lambda: stub.GetArchive(api.GetArchiveRequest(name=archive), metadata=BETA),
        "ListMessages": lambda: stub.ListMessages(
            api.ListMessagesRequest(parent=archive), metadata=BETA
        ),
        "SearchArchives": lambda: stub.SearchArchives(
            api.SearchArchivesRequest(parent=names.session(sid), query="secret"), metadata=BETA
        ),
    }
    codes = {name: await code_of(make()) for name, make in calls.items()}
    assert codes == dict.fromkeys(calls, grpc.StatusCode.NOT_FOUND)
    everywhere = await stub.SearchArchives(
        api.SearchArchivesRequest(query="secret", parent="sessions/-"), metadata=BETA
    )
    assert list(everywhere.hits) == []
    assert not (await stub.ListSessions(api.ListSessionsRequest(), metadata=BETA)).sessions
    # Nothing of beta's attempts touched alpha's session.
    session = await stub.GetSession(api.GetSessionRequest(name=names.session(sid)), metadata=ALPHA)
    assert (session.total_message_count, session.archive_count) == (2, 1)
    wm = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name=names.working_memory(sid)), metadata=ALPHA
    )
    assert "Stolen" not in wm.document


async def test_keys_from_a_file_map_to_their_tenants(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# tenant:key\n\nalpha:{ALPHA_KEY}\n  beta : {BETA_KEY}  \n")
    app = await start_application(
        make_settings(tmp_path, api_keys_file=keys), provider=ProgrammableProvider()
    )
    try:
        async with grpc.aio.insecure_channel(app.address) as channel:
            stub = Stub(channel)
            await stub.CreateSession(api.CreateSessionRequest(session_id="f"), metadata=BETA)
            assert (
                await code_of(
                    stub.GetSession(api.GetSessionRequest(name="sessions/f"), metadata=ALPHA)
                )
                == grpc.StatusCode.NOT_FOUND
            )
            assert (
                await code_of(stub.GetSession(api.GetSessionRequest(name="sessions/f")))
                == grpc.StatusCode.UNAUTHENTICATED
            )
    finally:
        await app.stop(grace=0.5)


async def test_without_keys_every_caller_is_the_default_tenant(app: Application) -> None:
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await stub.CreateSession(api.CreateSessionRequest(session_id="open"))
        # A stray authorization header is ignored when authentication is off.
        got = await stub.GetSession(api.GetSessionRequest(name="sessions/open"), metadata=ALPHA)
        assert got.name == "sessions/open"


# --- bad key configuration -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ("alpha", "WM_API_KEYS entry 1: expected tenant:key"),
        (f"alpha:{ALPHA_KEY},beta:short", "WM_API_KEYS entry 2: the key of tenant 'beta'"),
        (f"al pha:{ALPHA_KEY}", "WM_API_KEYS entry 1: tenant 'al pha'"),
        (f"alpha:{ALPHA_KEY},beta:{ALPHA_KEY}", "already configured at WM_API_KEYS entry 1"),
    ],
)
async def test_bad_keys_stop_the_start_naming_the_variable_not_the_key(
    tmp_path: Path, keys: str, message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        await start_application(make_settings(tmp_path, api_keys=keys))
    assert message in str(caught.value)
    assert ALPHA_KEY not in str(caught.value)
    assert not (tmp_path / "wm.sqlite3").exists()  # refused before opening anything


# --- the insecure-bind refusal ---------------------------------------------------------------
# 192.0.2.1 (TEST-NET-1, RFC 5737) is a non-loopback address no interface of this machine has:
# the refusal must come before any bind, and if it did not, the bind would fail rather than
# expose a port beyond loopback.
NON_LOOPBACK = "192.0.2.1"


async def test_non_loopback_without_keys_is_refused_and_says_why(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        await start_application(make_settings(tmp_path, address=f"{NON_LOOPBACK}:0"))
    text = str(caught.value)
    assert f"refusing to listen on {NON_LOOPBACK}:0 without authentication" in text
    for variable in ("WM_API_KEYS", "WM_API_KEYS_FILE", "WM_ALLOW_INSECURE=1"):
        assert variable in text
    assert not (tmp_path / "wm.sqlite3").exists()


async def test_an_inspector_beyond_loopback_without_keys_is_refused(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, inspector_address=f"{NON_LOOPBACK}:0")
    with pytest.raises(ConfigurationError) as caught:
        await start_application(settings)
    assert f"refusing to listen on {NON_LOOPBACK}:0 without authentication" in str(caught.value)
    assert not (tmp_path / "wm.sqlite3").exists()


async def test_the_inspector_is_off_by_default_and_on_when_asked(tmp_path: Path) -> None:
    off = await start_application(make_settings(tmp_path / "off"))
    try:
        assert off.inspector is None
    finally:
        await off.stop(0)
    on = await start_application(make_settings(tmp_path / "on", inspector_address="127.0.0.1:0"))
    try:
        assert on.inspector is not None and on.inspector.port > 0
    finally:
        await on.stop(0)


def test_wm_server_refuses_at_start_with_exit_code_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WM_", "ANTHROPIC_"))}
    env.update(WM_ADDRESS=f"{NON_LOOPBACK}:50051", WM_DATA_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "wm_server"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "refusing to listen on 192.0.2.1:50051 without authentication" in done.stderr
    assert "WM_ALLOW_INSECURE=1" in done.stderr


@pytest.mark.parametrize(
    ("address", "overrides"),
    [
        ("127.0.0.1:0", {}),
        ("localhost:0", {}),
        ("[::1]:0", {}),
        (f"{NON_LOOPBACK}:0", {"api_keys": f"alpha:{ALPHA_KEY}"}),
        (f"{NON_LOOPBACK}:0", {"allow_insecure": True}),
        ("0.0.0.0:0", {"allow_insecure": True}),
    ],
)
def test_loopback_keys_or_the_explicit_flag_pass_the_check(
    tmp_path: Path, address: str, overrides: dict[str, object]
) -> None:
    from wm_server.security.auth import check_bind_safety, load_keyring

    settings = make_settings(tmp_path, address=address, **overrides)
    check_bind_safety(settings, load_keyring(settings))  # does not raise


def test_allow_insecure_reads_1_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from wm_server.config import load_settings

    monkeypatch.setenv("WM_ALLOW_INSECURE", "1")
    assert load_settings().allow_insecure is True
