"""The typed Python client against a real server on loopback."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from support import builders as b
from support.production import settings_for
from support.providers import ProgrammableProvider
from wm_client import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    ResumePolicy,
    WmClient,
    WmError,
)
from wm_client.errors import ResourceExhaustedError, error_class
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_server.app import Application, start_application


class RecordingInterceptor(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Keeps every unary request the client sends (method, request)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        self.sent.append((method.rsplit("/", 1)[-1], request))
        return await continuation(details, request)


@pytest.fixture
async def recorded(app: Application) -> AsyncIterator[tuple[WmClient, RecordingInterceptor]]:
    recorder = RecordingInterceptor()
    async with grpc.aio.insecure_channel(app.address, interceptors=[recorder]) as channel:
        yield WmClient(channel=channel), recorder


async def test_every_mutating_call_carries_its_own_request_id(
    recorded: tuple[WmClient, RecordingInterceptor],
) -> None:
    client, recorder = recorded
    await client.create_session("rid")
    await client.add_messages("rid", [b.user("hello", "m1")])
    await client.add_messages("rid", [b.user("again", "m2")])
    stored = await client.apply_working_memory_ops(
        "rid", [pb.SectionOp(section="Session Title", kind=pb.SECTION_OP_KIND_UPDATE, content="T")]
    )
    assert stored.working_memory.version == 1
    await client.delete_session("rid")
    mutating = {"CreateSession", "AddMessages", "ApplyWorkingMemoryOps", "DeleteSession"}
    ids = [request.request_id for method, request in recorder.sent if method in mutating]
    assert len(ids) == 5
    assert all(str(uuid.UUID(i)) == i for i in ids)  # UUIDs, as the contract recommends
    assert len(set(ids)) == 5  # one per call


async def test_the_same_request_id_stores_once(client: WmClient) -> None:
    first = await client.add_messages(
        "same", [b.user("one"), b.user("two")], create_session_if_missing=True, request_id="r-1"
    )
    again = await client.add_messages(
        "same", [b.user("one"), b.user("two")], create_session_if_missing=True, request_id="r-1"
    )
    assert list(again.added_message_ids) == list(first.added_message_ids)
    assert (await client.get_session("same")).total_message_count == 2


async def test_errors_carry_the_code_and_the_decoded_details(client: WmClient) -> None:
    with pytest.raises(NotFoundError) as missing:
        await client.get_session("nobody")
    error = missing.value
    assert isinstance(error, WmError) and error.code == grpc.StatusCode.NOT_FOUND
    assert error.reason == "SESSION_NOT_FOUND" and error.domain == "wm"
    assert error.metadata == {"session_id": "nobody"}
    assert error.from_service
    assert isinstance(error.__cause__, grpc.aio.AioRpcError)
    # the server's id of the call, from the trailers: one per call
    assert re.fullmatch(r"[0-9a-f]{32}", error.request_id), error.request_id
    with pytest.raises(NotFoundError) as again:
        await client.get_session("nobody")
    assert again.value.request_id != error.request_id

    with pytest.raises(InvalidArgumentError) as invalid:
        await client.add_messages("bad", [pb.Message(role=pb.ROLE_USER), b.user("ok", "x y")])
    fields = [v.field for v in invalid.value.field_violations]
    assert "messages[0].parts" in fields and "messages[1].id" in fields
    assert all(v.description for v in invalid.value.field_violations)
    assert invalid.value.reason == "INVALID_REQUEST"

    await client.create_session("taken")
    with pytest.raises(AlreadyExistsError) as taken:
        await client.create_session("taken")
    assert taken.value.reason == "SESSION_EXISTS"
    assert "ALREADY_EXISTS" in str(taken.value)


async def test_a_spent_rate_is_an_error_with_the_servers_retry_delay(tmp_path: Path) -> None:
    app = await start_application(
        settings_for(tmp_path, tenant_mutations_per_second=2.0, tenant_mutation_burst=1),
        provider=ProgrammableProvider(),
    )
    try:
        async with WmClient(app.address) as wm:
            await wm.create_session("first")
            with pytest.raises(ResourceExhaustedError) as limited:
                await wm.create_session("second")
            error = limited.value
            assert error.reason == "RATE_LIMITED" and error.metadata["limit"] == "2"
            assert error.retry_delay is not None and 0 < error.retry_delay <= 0.5
            await asyncio.sleep(error.retry_delay)
            await wm.create_session("second")
            assert (await wm.get_session("second")).name == "sessions/second"
            missing = await _not_found(wm)
            assert missing.retry_delay is None
    finally:
        await app.stop(grace=0.5)


async def _not_found(wm: WmClient) -> WmError:
    with pytest.raises(NotFoundError) as missing:
        await wm.get_session("nobody")
    return missing.value


async def test_error_classes_cover_every_failure_code() -> None:
    for code in grpc.StatusCode:
        if code is not grpc.StatusCode.OK:
            assert issubclass(error_class(code), WmError)
    assert error_class(grpc.StatusCode.NOT_FOUND) is NotFoundError


async def test_sessions_pages_are_followed_to_the_end(client: WmClient) -> None:
    for index in range(5):
        await client.create_session(f"page-{index}")
    first = await client.list_sessions(page_size=2)
    assert len(first.sessions) == 2 and first.next_page_token
    every = [s.name async for s in client.iter_sessions(page_size=2)]
    assert sorted(every) == [f"sessions/page-{i}" for i in range(5)]


async def test_a_session_is_addressed_by_its_id_or_its_name(client: WmClient) -> None:
    made = await client.create_session("named")
    assert made.name == "sessions/named"
    await client.add_messages("sessions/named", [b.user("by name", "m-1")])
    assert (await client.get_session("named")).message_count == 1
    page = await client.list_messages("sessions/named")
    assert [m.name for m in page.messages] == ["sessions/named/messages/m-1"]


async def test_commit_stream_is_ordered_and_ends_with_one_terminal_event(
    client: WmClient,
) -> None:
    await client.add_messages(
        "c1", [b.user("fix app/db.py"), b.assistant("done")], create_session_if_missing=True
    )
    stream = client.commit("c1", 0)
    events = await stream.collect()
    sequences = [e.sequence for e in events]
    assert sequences == list(range(1, len(events) + 1))
    assert events[0].stage == pb.COMMIT_STAGE_ARCHIVED and events[0].phase1.archived
    assert [e.terminal for e in events].count(True) == 1 and events[-1].terminal
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    assert stream.terminal is events[-1] and stream.commit == events[0].commit
    assert stream.commit.startswith("sessions/c1/commits/") and stream.commit_id
    assert stream.started is not None and stream.started.name == stream.commit
    assert stream.resumes == 0
    memory = await client.get_working_memory("c1")
    assert memory.version == events[-1].completed.working_memory_version == 1


async def test_phase1_only_then_watch_from_a_sequence(
    client: WmClient, provider: ProgrammableProvider
) -> None:
    provider.gate = asyncio.Event()  # Phase 2 waits
    await client.add_messages("w1", [b.user("a"), b.user("b")], create_session_if_missing=True)
    stream = client.commit("w1", 1)
    first = await stream.phase1()
    assert first.phase1.archived and first.phase1.kept_message_count == 1
    await stream.aclose()  # leaving never cancels Phase 2
    commit = await client.get_commit(first.commit)  # the name alone
    assert commit.state in (pb.COMMIT_STATE_PENDING, pb.COMMIT_STATE_RUNNING)
    by_id = await client.get_commit("w1", commit.name.rsplit("/", 1)[-1])
    assert by_id.name == commit.name
    provider.gate.set()
    commit_id = first.commit.rsplit("/", 1)[-1]
    rest = await client.watch_commit("w1", commit_id, after_sequence=1).collect()
    assert rest[0].sequence == 2 and rest[-1].stage == pb.COMMIT_STAGE_COMPLETED
    replay = await client.watch_commit(first.commit).collect()
    assert [e.sequence for e in replay] == list(range(1, len(rest) + 2))


async def test_watching_after_the_last_sequence_ends_at_once(client: WmClient) -> None:
    await client.add_messages("late", [b.user("x")], create_session_if_missing=True)
    events = await client.commit("late", 0).collect()
    last = events[-1]
    stream = client.watch_commit(last.commit, after_sequence=last.sequence)
    assert await asyncio.wait_for(stream.collect(), 5) == []
    assert stream.terminal is None
    with pytest.raises(RuntimeError, match="no terminal event"):
        await stream.wait()


async def test_skipped_commit_is_a_single_terminal_event(client: WmClient) -> None:
    await client.create_session("empty")
    events = await client.commit("empty", 0).collect()
    assert len(events) == 1 and events[0].terminal
    assert events[0].stage == pb.COMMIT_STAGE_SKIPPED
    assert events[0].phase1.skip_reason == pb.SKIP_REASON_NO_MESSAGES


async def test_heartbeats_only_when_asked(client: WmClient, provider: ProgrammableProvider) -> None:
    provider.gate = asyncio.Event()
    await client.add_messages("hb", [b.user("x")], create_session_if_missing=True)
    stream = client.commit("hb", 0, heartbeats=True)
    seen: list[pb.CommitEvent] = []
    async for event in stream:
        seen.append(event)
        if event.stage == pb.COMMIT_STAGE_HEARTBEAT:
            provider.gate.set()
    beats = [e for e in seen if e.stage == pb.COMMIT_STAGE_HEARTBEAT]
    assert beats and all(e.sequence == e.heartbeat.last_sequence for e in beats)
    quiet = await client.watch_commit(seen[0].commit).collect()
    assert all(e.stage != pb.COMMIT_STAGE_HEARTBEAT for e in quiet)
    assert [e.sequence for e in quiet] == [e.sequence for e in seen if e not in beats]


async def test_a_silent_stream_is_reattached_without_duplicates(
    app: Application, provider: ProgrammableProvider
) -> None:
    """No event within the idle timeout: the client takes the stream for dead, re-attaches
    with WatchCommit from its last sequence, and still delivers each event once."""
    provider.gate = asyncio.Event()
    async with WmClient(app.address, resume_policy=ResumePolicy(idle_timeout=0.2)) as client:
        await client.add_messages("idle", [b.user("x")], create_session_if_missing=True)
        stream = client.commit("idle", 0)
        reader = asyncio.create_task(stream.collect())
        await asyncio.sleep(1.5)  # heartbeats every 0.5 s: several re-attachments by then
        assert not reader.done()
        provider.gate.set()
        events = await asyncio.wait_for(reader, 10)
    assert stream.resumes >= 2
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert sum(e.terminal for e in events) == 1 and events[-1].stage == pb.COMMIT_STAGE_COMPLETED


async def test_a_stream_error_from_the_service_is_raised_not_resumed(client: WmClient) -> None:
    stream = client.watch_commit("nobody", "c-0")
    with pytest.raises(NotFoundError):
        await stream.collect()
    assert stream.resumes == 0
    with pytest.raises(NotFoundError):
        await client.commit("nobody", 0).phase1()


async def test_reads_and_recall(client: WmClient) -> None:
    await client.add_messages(
        "r1",
        [b.user("The deploy failed with ERR_QUOTA on eu-west"), b.assistant("noted")],
        create_session_if_missing=True,
    )
    await client.commit("r1", 0).wait()
    archives = await client.list_archives("r1")
    assert [a.name for a in archives.archives] == ["sessions/r1/archives/archive_001"]
    archive = await client.get_archive("r1", "archive_001")
    assert archive == await client.get_archive(archive.name)
    assert archive.message_count == 2 and archive.working_memory.version == 1
    messages = [m async for m in client.iter_archive_messages("r1", "archive_001", page_size=1)]
    assert [m.name.rsplit("/", 1)[0] for m in messages] == ["sessions/r1/messages"] * 2
    assert "ERR_QUOTA" in messages[0].parts[0].text
    page = await client.list_messages("r1", archive_id="archive_001")
    assert list(page.messages) == messages and not page.next_page_token
    hits = await client.search_archives("err_quota", session_id="r1")
    assert hits.total_matches == 1 and "ERR_QUOTA" in hits.hits[0].snippet
    assert hits.hits[0].archive == archive.name and hits.hits[0].message == messages[0].name
    context = await client.assemble_context(
        "r1", 50_000, context_format=api.CONTEXT_FORMAT_ANTHROPIC_MESSAGES
    )
    assert context.working_memory_version == 1 and context.rendered_json
    commits = await client.list_commits("r1")
    assert commits.commits[0].state == pb.COMMIT_STATE_COMPLETED
    assert commits.commits[0].archive == archive.name
    tools = await client.get_tool_definitions(api.TOOL_FORMAT_ANTHROPIC_MESSAGES)
    assert {t.name for t in tools.tools} >= {"archive_expand", "archive_search"}
    assert all(json.loads(t.rendered_json)["name"] == t.name for t in tools.tools)
    plain = await client.get_tool_definitions()
    assert all(t.input_schema_json and not t.rendered_json for t in plain.tools)


# --- retries through the service config ------------------------------------------------------------
class FlakyProxy:
    """A real gRPC server in front of the service (what a mesh sidecar is while an upstream
    restarts): it answers UNAVAILABLE to the first ``failures`` attempts of each unary method
    but CreateCommit, and answers UNAVAILABLE to the first ``cut_commits`` CreateCommit calls
    after the server ran them (Phase 1 done, its answer lost). Everything else is forwarded
    byte for byte."""

    def __init__(self, upstream: str, failures: int = 2, cut_commits: int = 0) -> None:
        self.failures = failures
        self.cut_commits = cut_commits
        self.attempts: dict[str, list[bytes]] = {}
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((self,))  # type: ignore[arg-type]
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.channel = grpc.aio.insecure_channel(upstream)

    def _seen(self, method: str, request: bytes) -> int:
        attempts = self.attempts.setdefault(method.rsplit("/", 1)[-1], [])
        attempts.append(request)
        return len(attempts)

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = details.method
        if method.endswith("/WatchCommit"):

            async def stream(
                request: bytes, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[bytes]:
                self._seen(method, request)
                async for event in self.channel.unary_stream(method)(request):
                    yield event

            return grpc.unary_stream_rpc_method_handler(stream)

        async def unary(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            attempt = self._seen(method, request)
            forward = self.channel.unary_unary(method)
            if method.endswith("/CreateCommit"):
                answer = await forward(request)
                if attempt <= self.cut_commits:  # Phase 1 is done upstream; the answer is lost
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")
                return answer  # type: ignore[no-any-return]
            if attempt <= self.failures:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "upstream restarting")
            return await forward(request)  # type: ignore[no-any-return]

        return grpc.unary_unary_rpc_method_handler(unary)


@pytest.fixture
async def proxy(app: Application) -> AsyncIterator[FlakyProxy]:
    # Five cut CreateCommit attempts: the service config's retries (five attempts) all fail,
    # and the commit stream itself asks again.
    flaky = FlakyProxy(app.address, failures=2, cut_commits=5)
    await flaky.server.start()
    yield flaky
    await flaky.server.stop(0)
    await flaky.channel.close()


async def test_unavailable_is_retried_with_the_same_request_id(proxy: FlakyProxy) -> None:
    async with WmClient(f"127.0.0.1:{proxy.port}") as client:
        reply = await client.add_messages(
            "retry", [b.user("once", "m-1")], create_session_if_missing=True
        )
        session = await client.get_session("retry")
        assert (await client.list_sessions()).sessions[0].name == "sessions/retry"
    attempts = proxy.attempts["AddMessages"]
    assert len(attempts) == 3  # two UNAVAILABLE, then through
    assert len(set(attempts)) == 1  # byte-identical retries: the same request_id
    assert api.AddMessagesRequest.FromString(attempts[0]).request_id
    assert list(reply.added_message_ids) == ["m-1"]
    assert session.total_message_count == 1
    assert len(proxy.attempts["GetSession"]) == 3


async def test_without_the_service_config_unavailable_is_not_retried(proxy: FlakyProxy) -> None:
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{proxy.port}", options=[("grpc.enable_retries", 0)]
    ) as channel:
        client = WmClient(channel=channel)
        with pytest.raises(WmError) as failed:
            await client.get_session("x")
    assert failed.value.code == grpc.StatusCode.UNAVAILABLE
    assert not failed.value.from_service
    assert len(proxy.attempts["GetSession"]) == 1


async def test_a_commit_cut_before_its_first_event_is_asked_again_not_done_twice(
    proxy: FlakyProxy, client: WmClient
) -> None:
    """Phase 1 ran but its answer was lost, again and again: CreateCommit is asked again
    with the same request_id (by the service config's retries, then by the stream itself
    when they are spent), and the server answers with the same commit instead of archiving
    again."""
    await client.add_messages("cut", [b.user("a"), b.user("b")], create_session_if_missing=True)
    async with WmClient(f"127.0.0.1:{proxy.port}") as through_proxy:
        stream = through_proxy.commit("cut", 1)
        events = await stream.collect()
    attempts = proxy.attempts["CreateCommit"]
    assert len(attempts) == 6 and len(set(attempts)) == 1  # the same request_id
    assert api.CreateCommitRequest.FromString(attempts[0]).parent == "sessions/cut"
    assert stream.resumes == 1 and stream.errors[0].code == grpc.StatusCode.UNAVAILABLE
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[0].phase1.archived_message_count == 1 and events[-1].terminal
    commits = (await client.list_commits("cut")).commits
    assert len(commits) == 1 and commits[0].name == events[0].commit == stream.commit
    session = await client.get_session("cut")
    assert session.archive_count == 1 and session.message_count == 1
