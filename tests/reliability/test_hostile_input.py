"""Hostile callers against a real server: bytes that are no message, forged page tokens, one
tenant (or anonymous health watchers) taking every slot it can, resume points past the end,
lone surrogates and non-finite numbers, huge headers, guessed commit ids, a compaction whose
watch is cancelled and a session deleted under its running Phase 2.

The promise checked throughout: each hostile call gets a documented answer at once (never
UNKNOWN or INTERNAL, never a hang), it costs the server nothing it keeps, and every other
tenant goes on working as if nothing happened.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_status import rpc_status
from reliability_support import FRESH

from support import builders as b
from support import commit_flow, wm_names
from support.production import sample, scrape, settings_for
from support.providers import ProgrammableProvider
from support.server_process import ServerProcess, free_port
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application

Stub = service_grpc.WorkingMemoryServiceStub
Metadata = tuple[tuple[str, str], ...]
Serve = Callable[..., Awaitable[Application]]

ALPHA_KEY = "alpha-0123456789abcdef-key"
BETA_KEY = "beta-fedcba9876543210-key"
KEYS = f"alpha:{ALPHA_KEY},beta:{BETA_KEY}"
ALPHA: Metadata = (("authorization", f"Bearer {ALPHA_KEY}"),)
BETA: Metadata = (("authorization", f"Bearer {BETA_KEY}"),)
SERVICE = api.DESCRIPTOR.services_by_name["WorkingMemoryService"]
HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"]
REFLECTION = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]
# Bytes that no request message of any method decodes: an overlong varint tag, a truncated
# length-delimited field, a tag without its value, a truncated tag, and wire types 7 and 3 (an
# unclosed group).
GARBAGE = (b"\xff" * 11, b"\x0a\x05ab", b"\x08", b"\x80", b"\x0f", b"\x0b")
CESU_SURROGATE = b"\xed\xa0\x80"  # U+D800 as if it were UTF-8: not valid UTF-8
MALFORMED_TEXT = (
    "the request message could not be decoded (not the protobuf message this method takes)"
)


# --- helpers ------------------------------------------------------------------------------------
def error_info(error: grpc.aio.AioRpcError) -> tuple[error_details_pb2.ErrorInfo, float | None]:
    """The ErrorInfo of a failed call and its RetryInfo delay in seconds (None without)."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, f"no rich status: {error.code()} {error.details()}"
    info = error_details_pb2.ErrorInfo()
    delay: float | None = None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            delay = retry.retry_delay.ToTimedelta().total_seconds()
    assert info.domain == "wm", status
    return info, delay


async def refusal(call: Any) -> grpc.aio.AioRpcError:
    """The error a unary call or a whole stream ends with (fails when it succeeds)."""
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError("the call succeeded")


def raw_call(channel: grpc.aio.Channel, full_name: str, method: MethodDescriptor) -> Any:
    """A generic call of ``method`` that sends bytes as they are (identity serializers)."""
    path = f"/{full_name}/{method.name}"
    if method.client_streaming and method.server_streaming:
        return channel.stream_stream(path, request_serializer=None, response_deserializer=None)
    if method.server_streaming:
        return channel.unary_stream(path, request_serializer=None, response_deserializer=None)
    if method.client_streaming:
        return channel.stream_unary(path, request_serializer=None, response_deserializer=None)
    return channel.unary_unary(path, request_serializer=None, response_deserializer=None)


def invoke_raw(callable_: Any, method: MethodDescriptor, payload: bytes, **kwargs: Any) -> Any:
    if method.client_streaming:
        return callable_(iter([payload]), **kwargs)
    return callable_(payload, **kwargs)


async def start_commit(stub: Stub, session_id: str, metadata: Metadata) -> str:
    """CreateCommit: Phase 1 is stored when it answers; the commit's id."""
    started = await stub.CreateCommit(
        commit_flow.create_request(session_id), metadata=metadata, timeout=10
    )
    return wm_names.last_segment(started.name)


async def first_event(call: Any) -> pb.CommitEvent:
    async for event in call:
        return event  # type: ignore[no-any-return]
    raise AssertionError("the stream ended without an event")


async def until(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def add(stub: Stub, session_id: str, metadata: Metadata, *texts: str) -> None:
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session(session_id),
            messages=[b.user(t) if i % 2 == 0 else b.assistant(t) for i, t in enumerate(texts)],
            create_session_if_missing=True,
        ),
        metadata=metadata,
        timeout=10,
    )


async def metric(app: Application, name: str, **labels: str) -> float:
    assert app.metrics_port is not None
    return sample(await asyncio.to_thread(scrape, app.metrics_port), name, **labels)


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Serve]:
    """Start in-process servers (real gRPC on loopback, a real SQLite file) with settings
    overrides; the programmable provider lets a test hold Phase 2 at its model call."""
    started: list[Application] = []

    async def start(provider: ProgrammableProvider | None = None, **overrides: Any) -> Application:
        values: dict[str, Any] = {
            "api_keys": KEYS,
            "metrics_address": "127.0.0.1:0",
            "heartbeat_seconds": 0.3,
            "phase2_retry_base_delay": 0.05,
        }
        values.update(overrides)
        app = await start_application(
            settings_for(tmp_path, **values), provider=provider or ProgrammableProvider()
        )
        started.append(app)
        return app

    yield start
    for app in started:
        await app.stop(grace=0.5)


@pytest.fixture
def gated() -> ProgrammableProvider:
    """A provider whose every model call waits until the test opens ``gate``."""
    return ProgrammableProvider(gate=asyncio.Event())


# --- malformed bytes ----------------------------------------------------------------------------
def _every_method() -> list[tuple[str, MethodDescriptor]]:
    return [
        (service.full_name, method)
        for service in (SERVICE, HEALTH, REFLECTION)
        for method in service.methods
    ]


async def test_malformed_bytes_on_every_method_are_invalid_argument_without_a_traceback(
    tmp_path: Path,
) -> None:
    """A real server process, API keys on. Without a key the bytes of a wm.v1 method are not
    even decoded (UNAUTHENTICATED, nothing counted); with a key, and on the open health and
    reflection methods, every method answers INVALID_ARGUMENT (MALFORMED_REQUEST) with one
    fixed message, logs one warning access line per call and no traceback, and counts it."""
    metrics_port = free_port()
    server = ServerProcess(
        tmp_path, WM_API_KEYS=KEYS, WM_METRICS_ADDRESS=f"127.0.0.1:{metrics_port}"
    )
    with server.start():
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            for full_name, method in _every_method():
                if full_name != SERVICE.full_name:
                    continue
                call = raw_call(channel, full_name, method)
                error = await refusal(invoke_raw(call, method, GARBAGE[0], timeout=10))
                assert error.code() == grpc.StatusCode.UNAUTHENTICATED, method.name
            exposition = await asyncio.to_thread(scrape, metrics_port)
            assert "wm_undecodable_requests_total{" not in exposition

            sent = 0
            for full_name, method in _every_method():
                call = raw_call(channel, full_name, method)
                for payload in GARBAGE:
                    error = await refusal(
                        invoke_raw(call, method, payload, metadata=ALPHA, timeout=10)
                    )
                    where = f"{method.name} {payload!r}"
                    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, where
                    assert error.details() == MALFORMED_TEXT, where
                    assert error_info(error)[0].reason == "MALFORMED_REQUEST", where
                    sent += 1
            stub = Stub(channel)
            await add(stub, "after-garbage", ALPHA, "Please fix src/a.py", "Fixed it.")
            _, events = await commit_flow.commit(stub, "after-garbage", metadata=ALPHA)
            assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
            exposition = await asyncio.to_thread(scrape, metrics_port)
        counted = sum(
            sample(exposition, "wm_undecodable_requests_total", method=f"{name}/{m.name}")
            for name, m in _every_method()
        )
        assert counted == sent
        log = server.log_path.read_text()
    assert "Traceback" not in log and "rpc_failed" not in log
    lines = server.log_events()
    malformed = [e for e in lines if e.get("event") == "rpc" and e.get("malformed_request")]
    assert len(malformed) == sent
    assert {e["level"] for e in malformed} == {"warning"}
    assert {e["code"] for e in malformed} == {"INVALID_ARGUMENT"}
    assert not [e for e in lines if e.get("level") in ("error", "critical")]


def _with_surrogate(message: Any, marker: str = "QQQ") -> bytes:
    """``message`` serialized with the UTF-8 of ``marker`` (3 bytes) swapped for a lone
    surrogate: what a client with a broken encoder puts on the wire."""
    data = message.SerializeToString()
    assert data.count(marker.encode()) == 1
    return data.replace(marker.encode(), CESU_SURROGATE)


async def test_lone_surrogates_in_any_text_field_are_refused_before_the_service(
    serve: Serve,
) -> None:
    """A lone surrogate cannot be valid UTF-8, so in every string field (message text, tool
    input and output, tool names, working-memory ops, prompts, queries, ids) the request does
    not decode and is refused as malformed; nothing is stored."""
    app = await serve()
    tool = pb.Part(tool_use=pb.ToolUse(id="t1", name="read", input_json='{"path": "QQQ"}'))
    cases: list[tuple[str, Any]] = [
        (
            "AddMessages",
            api.AddMessagesRequest(
                parent=wm_names.session("s"),
                create_session_if_missing=True,
                messages=[b.user("fix QQQ")],
            ),
        ),
        (
            "AddMessages",
            api.AddMessagesRequest(
                parent=wm_names.session("s"),
                create_session_if_missing=True,
                messages=[pb.Message(role=pb.ROLE_ASSISTANT, parts=[tool])],
            ),
        ),
        (
            "AddMessages",
            api.AddMessagesRequest(
                parent=wm_names.session("s"),
                create_session_if_missing=True,
                messages=[b.tool_result("t1", "out QQQ")],
            ),
        ),
        (
            "ApplyWorkingMemoryOps",
            api.ApplyWorkingMemoryOpsRequest(
                parent=wm_names.session("s"),
                ops=[
                    pb.SectionOp(
                        section="Key Facts & Decisions",
                        kind=pb.SECTION_OP_KIND_APPEND,
                        items=["QQQ"],
                    )
                ],
            ),
        ),
        (
            "AssembleContext",
            api.AssembleContextRequest(
                name=wm_names.session("s"), token_budget=1000, system_prompt="be QQQ"
            ),
        ),
        ("SearchArchives", api.SearchArchivesRequest(parent=wm_names.session("s"), query="QQQ")),
        ("CreateSession", api.CreateSessionRequest(session_id="QQQ")),
    ]
    async with grpc.aio.insecure_channel(app.address) as channel:
        for name, message in cases:
            method = SERVICE.methods_by_name[name]
            call = raw_call(channel, SERVICE.full_name, method)
            error = await refusal(
                invoke_raw(call, method, _with_surrogate(message), metadata=ALPHA, timeout=10)
            )
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            assert error_info(error)[0].reason == "MALFORMED_REQUEST", name
        listed = await Stub(channel).ListSessions(api.ListSessionsRequest(), metadata=ALPHA)
        assert not listed.sessions


@pytest.mark.parametrize(
    "input_json",
    ['{"path": "\\ud800"}', '{"path": "a\\udfffb"}', '{"n": NaN}', '{"n": [Infinity]}'],
)
async def test_tool_input_json_with_lone_surrogate_escapes_or_non_finite_numbers_is_refused(
    serve: Serve, input_json: str
) -> None:
    app = await serve()
    tool = pb.Part(tool_use=pb.ToolUse(id="t1", name="read", input_json=input_json))
    async with grpc.aio.insecure_channel(app.address) as channel:
        error = await refusal(
            Stub(channel).AddMessages(
                api.AddMessagesRequest(
                    parent=wm_names.session("s"),
                    create_session_if_missing=True,
                    messages=[pb.Message(role=pb.ROLE_ASSISTANT, parts=[tool])],
                ),
                metadata=ALPHA,
            )
        )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- fair shares --------------------------------------------------------------------------------
async def test_a_tenant_holding_every_stream_slot_leaves_other_tenants_untouched(
    serve: Serve, gated: ProgrammableProvider
) -> None:
    app = await serve(gated, tenant_max_streams=3)
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await add(stub, "a", ALPHA, "Please fix src/a.py", "Fixed src/a.py.")
        commit_id = await start_commit(stub, "a", ALPHA)  # Phase 2 now waits at the gate
        watch = api.WatchCommitRequest(name=wm_names.commit("a", commit_id))
        held = [stub.WatchCommit(watch, metadata=ALPHA, timeout=60) for _ in range(3)]
        for call in held:  # three open streams: the tenant's whole budget
            await first_event(call)
        error = await refusal(stub.WatchCommit(watch, metadata=ALPHA, timeout=10))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        info, delay = error_info(error)
        assert (info.reason, info.metadata["limit"], delay) == ("TOO_MANY_OPEN_STREAMS", "3", 1.0)
        # the same tenant's unary calls have their own budget
        assert (await stub.GetSession(api.GetSessionRequest(name=wm_names.session("a")),
                                      metadata=ALPHA)).message_count == 0  # fmt: skip
        # another tenant streams and calls as usual
        await add(stub, "b", BETA, "Please fix src/b.py", "Fixed src/b.py.")
        beta_id = await start_commit(stub, "b", BETA)
        beta_watches = [
            stub.WatchCommit(
                api.WatchCommitRequest(name=wm_names.commit("b", beta_id)),
                metadata=BETA,
                timeout=60,
            )
            for _ in range(2)
        ]
        for call in beta_watches:
            await first_event(call)
        assert await metric(app, "wm_tenant_active_calls", tenant="alpha", kind="stream") == 3
        assert await metric(app, "wm_tenant_active_calls", tenant="beta", kind="stream") == 2
        rejected = await metric(
            app, "wm_tenant_rejected_total", tenant="alpha", reason="TOO_MANY_OPEN_STREAMS"
        )
        assert rejected == 1
        assert await metric(app, "wm_tenant_rejected_total", tenant="beta",
                            reason="TOO_MANY_OPEN_STREAMS") == 0  # fmt: skip
        # a stream that ends gives its slot back
        held.pop(0).cancel()

        async def admitted() -> bool:
            return await metric(app, "wm_tenant_active_calls", tenant="alpha", kind="stream") == 2

        await until(admitted)
        another = stub.WatchCommit(watch, metadata=ALPHA, timeout=60)
        await first_event(another)
        assert gated.gate is not None
        gated.gate.set()
        for call in [*held, another, *beta_watches]:
            events = [e async for e in call]
            assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
        assert await metric(app, "wm_tenant_active_calls", tenant="alpha", kind="stream") == 0


async def test_a_tenant_holding_every_unary_slot_leaves_other_tenants_untouched(
    serve: Serve, tmp_path: Path
) -> None:
    """Alpha's writes wait on a write lock another process holds; once its budget of three
    calls is in flight its next call is refused at once, while beta reads as usual."""
    app = await serve(tenant_max_concurrent_rpcs=3, sqlite_lock_timeout=20.0)
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await add(stub, "b", BETA, "Please fix src/b.py", "Fixed src/b.py.")
        foreign = sqlite3.connect(tmp_path / "wm.sqlite3", isolation_level=None)
        foreign.execute("BEGIN IMMEDIATE")
        try:
            waiting = [
                asyncio.ensure_future(add(stub, f"a{i}", ALPHA, "Please fix src/a.py"))
                for i in range(3)
            ]

            async def full() -> bool:
                active = await metric(app, "wm_tenant_active_calls", tenant="alpha", kind="unary")
                return active == 3

            await until(full)
            started = time.monotonic()
            error = await refusal(
                stub.GetSession(api.GetSessionRequest(name=wm_names.session("a0")), metadata=ALPHA)
            )
            assert time.monotonic() - started < 2.0
            info, delay = error_info(error)
            assert (error.code(), info.reason, info.metadata["limit"]) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "TOO_MANY_CONCURRENT_RPCS",
                "3",
            )
            assert delay == 1.0
            session = await stub.GetSession(
                api.GetSessionRequest(name=wm_names.session("b")), metadata=BETA
            )
            assert session.message_count == 2
            context = await stub.AssembleContext(
                api.AssembleContextRequest(name=wm_names.session("b"), token_budget=100_000),
                metadata=BETA,
            )
            assert len(context.messages) == 2
            assert not any(task.done() for task in waiting)
        finally:
            foreign.execute("ROLLBACK")
            foreign.close()
        await asyncio.gather(*waiting)
        listed = await stub.ListSessions(api.ListSessionsRequest(), metadata=ALPHA)
        assert sorted(s.name for s in listed.sessions) == [f"sessions/a{i}" for i in range(3)]
        assert await metric(app, "wm_tenant_rejected_total", tenant="alpha",
                            reason="TOO_MANY_CONCURRENT_RPCS") == 1  # fmt: skip


async def test_anonymous_health_watches_cannot_starve_tenants(serve: Serve) -> None:
    """Health and reflection need no key, so their callers share one small budget of their
    own: filling it with Health/Watch streams refuses more anonymous calls and nobody else's."""
    app = await serve(anonymous_max_concurrent_rpcs=3)
    async with grpc.aio.insecure_channel(app.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        watches = [health.Watch(health_pb2.HealthCheckRequest(), timeout=60) for _ in range(3)]
        for watch in watches:
            async for reply in watch:
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
                break
        for extra in (
            health.Check(health_pb2.HealthCheckRequest(), timeout=10),
            health.Watch(health_pb2.HealthCheckRequest(), timeout=10),
        ):
            error = await refusal(extra)
            info, delay = error_info(error)
            assert (error.code(), info.reason, info.metadata["limit"], delay) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "TOO_MANY_ANONYMOUS_RPCS",
                "3",
                1.0,
            )
        stub = Stub(channel)
        for key in (ALPHA, BETA):
            await add(stub, "s", key, "Please fix src/a.py", "Fixed src/a.py.")
            _, events = await commit_flow.commit(stub, "s", metadata=key)
            assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
        assert await metric(app, "wm_tenant_active_calls", tenant="(anonymous)",
                            kind="unary") == 3  # fmt: skip
        assert await metric(app, "wm_tenant_rejected_total", tenant="(anonymous)",
                            reason="TOO_MANY_ANONYMOUS_RPCS") == 2  # fmt: skip
        for watch in watches:
            watch.cancel()

        async def serving() -> bool:
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            except grpc.aio.AioRpcError:
                return False
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

        await until(serving)


async def test_mutations_over_a_tenants_rate_are_refused_with_a_retry_delay(
    serve: Serve,
) -> None:
    app = await serve(tenant_mutations_per_second=5.0, tenant_mutation_burst=3)
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        for i in range(3):
            await stub.CreateSession(api.CreateSessionRequest(session_id=f"a{i}"), metadata=ALPHA)
        error = await refusal(
            stub.CreateSession(api.CreateSessionRequest(session_id="a3"), metadata=ALPHA)
        )
        info, delay = error_info(error)
        assert (error.code(), info.reason, info.metadata["limit"], info.metadata["burst"]) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "RATE_LIMITED",
            "5",
            "3",
        )
        assert delay is not None and 0 < delay <= 0.2
        # reads are not rate-limited, and the other tenant has its own bucket
        await stub.GetSession(api.GetSessionRequest(name=wm_names.session("a0")), metadata=ALPHA)
        for i in range(3):
            await stub.CreateSession(api.CreateSessionRequest(session_id=f"b{i}"), metadata=BETA)
        await asyncio.sleep(delay)
        await stub.CreateSession(api.CreateSessionRequest(session_id="a3"), metadata=ALPHA)
        listed = await stub.ListSessions(api.ListSessionsRequest(), metadata=ALPHA)
        assert len(listed.sessions) == 4
        assert await metric(app, "wm_tenant_rejected_total", tenant="alpha",
                            reason="RATE_LIMITED") == 1  # fmt: skip
        assert await metric(app, "wm_tenant_rpcs_total", tenant="alpha",
                            code="RESOURCE_EXHAUSTED") == 1  # fmt: skip
        assert await metric(app, "wm_tenant_rpcs_total", tenant="beta", code="OK") == 3


# --- page tokens --------------------------------------------------------------------------------
def _old_style_token(cursor: int) -> str:
    """A token as the previous release made them, signed with the key its source published:
    anyone could make one, with any cursor."""
    body = json.dumps({"k": "sessions", "c": cursor}, separators=(",", ":")).encode()
    mac = hmac.new(b"wm.v1.page-token", body, hashlib.sha256).digest()[:8]
    return base64.urlsafe_b64encode(mac + body).decode().rstrip("=")


async def test_forged_foreign_and_out_of_range_page_tokens_are_invalid_argument(
    serve: Serve,
) -> None:
    app = await serve()
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        for i in range(3):
            await stub.CreateSession(api.CreateSessionRequest(session_id=f"s{i}"), metadata=ALPHA)
            await stub.CreateSession(api.CreateSessionRequest(session_id=f"s{i}"), metadata=BETA)
        for i in range(3):
            await add(stub, "s0", ALPHA, f"Please fix src/m{i}.py", "Done.")
            await commit_flow.commit(stub, "s0", metadata=ALPHA)
        token = (
            await stub.ListSessions(api.ListSessionsRequest(page_size=1), metadata=ALPHA)
        ).next_page_token
        commits_token = (
            await stub.ListCommits(
                api.ListCommitsRequest(parent=wm_names.session("s0"), page_size=1), metadata=ALPHA
            )
        ).next_page_token
        assert token and commits_token
        forged = [
            _old_style_token(2**63),
            _old_style_token(2**64),
            _old_style_token(1),
            token[:10] + ("A" if token[10] != "A" else "B") + token[11:],
            token + "AAAA",
            "%%%%",
            "\u00e9" * 10,
        ]
        for bad in forged:
            for list_call, request in (
                (stub.ListSessions, api.ListSessionsRequest(page_token=bad)),
                (
                    stub.ListCommits,
                    api.ListCommitsRequest(parent=wm_names.session("s0"), page_token=bad),
                ),
                (
                    stub.ListArchives,
                    api.ListArchivesRequest(parent=wm_names.session("s0"), page_token=bad),
                ),
            ):
                error = await refusal(list_call(request, metadata=ALPHA))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
                assert error_info(error)[0].reason == "PAGE_TOKEN_INVALID", bad
        foreign = [
            (stub.ListSessions(api.ListSessionsRequest(page_token=token), metadata=BETA)),
            stub.ListCommits(
                api.ListCommitsRequest(parent=wm_names.session("s0"), page_token=commits_token),
                metadata=BETA,
            ),
            stub.ListCommits(
                api.ListCommitsRequest(parent=wm_names.session("s1"), page_token=commits_token),
                metadata=ALPHA,
            ),
            stub.ListArchives(
                api.ListArchivesRequest(parent=wm_names.session("s0"), page_token=commits_token),
                metadata=ALPHA,
            ),
        ]
        for call in foreign:
            error = await refusal(call)
            assert error_info(error)[0].reason == "PAGE_TOKEN_INVALID"
        rest = await stub.ListSessions(api.ListSessionsRequest(page_token=token), metadata=ALPHA)
        assert len(rest.sessions) == 2


async def test_page_tokens_survive_a_restart_and_a_configured_key_replaces_the_stored_one(
    serve: Serve,
) -> None:
    first = await serve()
    async with grpc.aio.insecure_channel(first.address) as channel:
        stub = Stub(channel)
        for i in range(3):
            await stub.CreateSession(api.CreateSessionRequest(session_id=f"s{i}"), metadata=ALPHA)
        token = (
            await stub.ListSessions(api.ListSessionsRequest(page_size=1), metadata=ALPHA)
        ).next_page_token
    await first.stop(grace=0.5)
    again = await serve()  # the same data directory: the stored key
    async with grpc.aio.insecure_channel(again.address) as channel:
        rest = await Stub(channel).ListSessions(
            api.ListSessionsRequest(page_token=token), metadata=ALPHA
        )
        assert [s.name for s in rest.sessions] == ["sessions/s1", "sessions/s0"]
    await again.stop(grace=0.5)
    keyed = await serve(page_token_key="an-operator-chosen-key-0123456789")
    async with grpc.aio.insecure_channel(keyed.address) as channel:
        error = await refusal(
            Stub(channel).ListSessions(api.ListSessionsRequest(page_token=token), metadata=ALPHA)
        )
        assert error_info(error)[0].reason == "PAGE_TOKEN_INVALID"


# --- resume points ------------------------------------------------------------------------------
async def test_resume_points_past_the_end_of_a_commit_never_hang(
    serve: Serve, gated: ProgrammableProvider
) -> None:
    app = await serve(gated)
    assert gated.gate is not None
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await add(stub, "s", ALPHA, "Please fix src/a.py", "Fixed src/a.py.")
        commit_id = await start_commit(stub, "s", ALPHA)
        # running: the stream waits past the log and ends with the commit, not at its deadline
        beyond = stub.WatchCommit(
            api.WatchCommitRequest(name=wm_names.commit("s", commit_id), after_sequence=1000),
            metadata=ALPHA,
            timeout=60,
        )
        waited: list[pb.CommitEvent] = []

        async def read_beyond() -> grpc.aio.AioRpcError:
            try:
                async for event in beyond:
                    waited.append(event)
            except grpc.aio.AioRpcError as error:
                return error
            raise AssertionError("a stream past the log of an ended commit ended OK")

        reader = asyncio.ensure_future(read_beyond())
        await asyncio.sleep(1.0)  # a few heartbeats pass
        assert not reader.done()
        gated.gate.set()
        last = (await commit_flow.events(stub, wm_names.commit("s", commit_id), metadata=ALPHA))[-1]
        assert last.stage == pb.COMMIT_STAGE_COMPLETED
        started = time.monotonic()
        error = await asyncio.wait_for(reader, 5)
        assert time.monotonic() - started < 2.0
        info, _ = error_info(error)
        assert (error.code(), info.reason, info.metadata["last_sequence"]) == (
            grpc.StatusCode.OUT_OF_RANGE,
            "SEQUENCE_OUT_OF_RANGE",
            str(last.sequence),
        )
        assert {e.stage for e in waited} <= {pb.COMMIT_STAGE_HEARTBEAT}
        # ended: OUT_OF_RANGE at once beyond the last event; at the last event, an empty end
        for after in (last.sequence + 1, 2**62, 2**63 - 1):
            started = time.monotonic()
            error = await refusal(
                stub.WatchCommit(
                    api.WatchCommitRequest(name=wm_names.commit("s", commit_id), after_sequence=after),
                    metadata=ALPHA, timeout=10,
                )
            )  # fmt: skip
            assert error.code() == grpc.StatusCode.OUT_OF_RANGE
            assert time.monotonic() - started < 3.0  # at once, not at the 10 s deadline
        tail = stub.WatchCommit(
            api.WatchCommitRequest(
                name=wm_names.commit("s", commit_id), after_sequence=last.sequence
            ),
            metadata=ALPHA,
            timeout=10,
        )
        assert [e async for e in tail] == []


# --- huge headers -------------------------------------------------------------------------------
async def test_huge_headers_are_refused_by_the_transport_and_bounded_by_the_server(
    serve: Serve,
) -> None:
    app = await serve()
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        for size in (20_000, 1_000_000):
            error = await refusal(
                stub.GetToolDefinitions(
                    api.GetToolDefinitionsRequest(),
                    metadata=(*ALPHA, ("x-padding", "a" * size)),
                    timeout=10,
                )
            )
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        error = await refusal(
            stub.GetToolDefinitions(
                api.GetToolDefinitionsRequest(),
                metadata=(("authorization", "Bearer " + "k" * 7000),),
                timeout=10,
            )
        )
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert error_info(error)[0].reason == "API_KEY_INVALID"
        call = stub.GetToolDefinitions(
            api.GetToolDefinitionsRequest(),
            metadata=(*ALPHA, ("x-request-id", "r" * 7000)),
            timeout=10,
        )
        await call
        echoed = dict(await call.trailing_metadata())["x-request-id"]
        assert len(echoed) == 32 and echoed != "r" * 7000
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


# --- guessed ids, a cancelled compaction watch, a deletion under Phase 2 ---------------------------------
async def test_commit_ids_are_scoped_to_their_session_and_tenant(serve: Serve) -> None:
    app = await serve()
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await add(stub, "a", ALPHA, "Please fix src/a.py", "Fixed src/a.py.")
        await add(stub, "other", ALPHA, "Please fix src/b.py", "Fixed src/b.py.")
        await add(stub, "a", BETA, "Please fix src/c.py", "Fixed src/c.py.")
        started, _ = await commit_flow.commit(stub, "a", metadata=ALPHA)
        commit_id = wm_names.last_segment(started.name)
        guesses: list[tuple[str, str, Metadata]] = [
            ("other", commit_id, ALPHA),  # the tenant's own other session
            ("a", commit_id, BETA),  # the same session id of another tenant
            ("a", "c-" + "0" * 32, ALPHA),
            ("a", commit_id[:-1] + ("0" if commit_id[-1] != "0" else "1"), ALPHA),
        ]
        for session_id, guess, key in guesses:
            for call in (
                stub.GetCommit(
                    api.GetCommitRequest(name=wm_names.commit(session_id, guess)), metadata=key
                ),
                stub.WatchCommit(
                    api.WatchCommitRequest(name=wm_names.commit(session_id, guess)), metadata=key
                ),
                stub.RetryCommit(
                    api.RetryCommitRequest(name=wm_names.commit(session_id, guess)), metadata=key
                ),
            ):
                error = await refusal(call)
                assert error.code() == grpc.StatusCode.NOT_FOUND, (session_id, guess)
        listed = await stub.ListCommits(
            api.ListCommitsRequest(parent=wm_names.session("a")), metadata=BETA
        )
        assert not listed.commits
        own = await stub.GetCommit(
            api.GetCommitRequest(name=wm_names.commit("a", commit_id)), metadata=ALPHA
        )
        assert own.state == pb.COMMIT_STATE_COMPLETED


async def test_a_cancelled_compact_still_completes_and_gives_its_stream_slot_back(
    serve: Serve, gated: ProgrammableProvider
) -> None:
    app = await serve(gated, tenant_max_streams=1)
    assert gated.gate is not None
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await add(stub, "s", ALPHA, "Please fix src/a.py", "Fixed src/a.py.")
        started = await stub.CompactSession(
            api.CompactSessionRequest(name=wm_names.session("s")), metadata=ALPHA, timeout=10
        )
        watch = api.WatchCommitRequest(name=started.name)
        watching = stub.WatchCommit(watch, metadata=ALPHA, timeout=60)
        await first_event(watching)
        watching.cancel()

        async def slot_free() -> bool:
            return await metric(app, "wm_tenant_active_calls", tenant="alpha", kind="stream") == 0

        await until(slot_free)
        follower = stub.WatchCommit(watch, metadata=ALPHA, timeout=60)
        await first_event(follower)
        gated.gate.set()
        events = [e async for e in follower]
        assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
        assert await metric(app, "wm_tenant_rpcs_total", tenant="alpha", code="CANCELLED") == 1
        memory = await stub.GetWorkingMemory(
            api.GetWorkingMemoryRequest(name=wm_names.working_memory("s")), metadata=ALPHA
        )
        assert memory.version == 1
        session = await stub.GetSession(
            api.GetSessionRequest(name=wm_names.session("s")), metadata=ALPHA
        )
        assert session.message_count == 0  # keep 0: everything archived


async def test_delete_session_while_its_phase2_runs(
    serve: Serve, gated: ProgrammableProvider
) -> None:
    app = await serve(gated)
    assert gated.gate is not None
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await add(stub, "doomed", ALPHA, "Please fix src/a.py", "Fixed src/a.py.")
        commit_id = await start_commit(stub, "doomed", ALPHA)
        commit = stub.WatchCommit(
            api.WatchCommitRequest(name=wm_names.commit("doomed", commit_id)),
            metadata=ALPHA,
            timeout=60,
        )
        await first_event(commit)

        async def in_model() -> bool:
            return bool(gated.calls)

        await until(in_model)
        await stub.DeleteSession(
            api.DeleteSessionRequest(name=wm_names.session("doomed")), metadata=ALPHA
        )
        # the open stream ends soon (its commit is gone), whatever Phase 2 does next
        started = time.monotonic()
        error = await refusal(commit)
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert time.monotonic() - started < 3.0
        gated.gate.set()
        for call in (
            stub.GetSession(api.GetSessionRequest(name=wm_names.session("doomed")), metadata=ALPHA),
            stub.GetCommit(
                api.GetCommitRequest(name=wm_names.commit("doomed", commit_id)), metadata=ALPHA
            ),
            stub.WatchCommit(
                api.WatchCommitRequest(name=wm_names.commit("doomed", commit_id)), metadata=ALPHA
            ),
        ):
            assert (await refusal(call)).code() == grpc.StatusCode.NOT_FOUND
        # the worker goes on: another session commits, and the id starts afresh
        await add(stub, "doomed", ALPHA, "Please fix src/b.py", "Fixed src/b.py.")
        _, events = await commit_flow.commit(stub, "doomed", metadata=ALPHA)
        assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
        assert events[-1].commit != wm_names.commit("doomed", commit_id)
