"""Several server replicas on one PostgreSQL database, end to end.

Two real ``python -m wm_server`` processes share a throwaway database; clients talk gRPC to
either. What must hold: any replica sees every commit event (LISTEN/NOTIFY wakes the streams,
the stored events are the truth), commits of one session are serialized by the database,
ingest from several replicas loses nothing (and a page token of one replica is good on
another), and a replica killed during Phase 2 leaves its
job to another one once the lease expires, which finishes it exactly once.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from support import builders as b
from support import commit_flow, wm_names
from support.errors import outcome
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.providers import creation
from support.server_process import ServerProcess
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

pytestmark = pytest.mark.postgres

Stub = service_grpc.WorkingMemoryServiceStub
# Without a wake-up a tailing stream only re-reads the store on its heartbeat (at most 15 s);
# events arriving much sooner than that on a replica that did not write them came by NOTIFY.
HEARTBEAT = "15"


@pytest.fixture
def base_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """Settings every replica of a test shares: one fresh database, short leases."""
    return {
        "WM_DATABASE_URL": request.getfixturevalue("postgres_url"),
        "WM_HEARTBEAT_SECONDS": HEARTBEAT,
        "WM_PHASE2_LEASE_SECONDS": "2",
        "WM_LOG_LEVEL": "info",
    }


@pytest.fixture
def processes() -> Iterator[list[ServerProcess]]:
    """Servers started by a test; every one is killed at the end, whatever happened."""
    started: list[ServerProcess] = []
    yield started
    for process in started:
        process.kill()


async def _start(
    processes: list[ServerProcess], *specs: tuple[Path, dict[str, str]]
) -> list[ServerProcess]:
    """Start one server per (data folder, environment), side by side (each takes seconds)."""
    started: list[ServerProcess] = []
    for data_dir, env in specs:
        data_dir.mkdir(parents=True, exist_ok=True)
        started.append(ServerProcess(data_dir, **env))
    processes.extend(started)
    await asyncio.gather(*(asyncio.to_thread(p.start, 60) for p in started))
    return started


@pytest.fixture
async def channels() -> AsyncIterator[list[grpc.aio.Channel]]:
    opened: list[grpc.aio.Channel] = []
    yield opened
    for channel in opened:
        await channel.close()


def _stub(channels: list[grpc.aio.Channel], server: ServerProcess) -> Stub:
    channel = grpc.aio.insecure_channel(server.address)
    channels.append(channel)
    return service_grpc.WorkingMemoryServiceStub(channel)


def _script(path: Path) -> Path:
    """A scripted model answering every call with a valid WM (WM_SCRIPTED_DELAY slows it)."""
    answer = {"tool_input": creation(session_title="Replica test", current_state="working")}
    path.write_text(json.dumps({"loop": True, "responses": [answer]}), encoding="utf-8")
    return path


async def _watch(stub: Stub, session: str, commit_id: str) -> list[pb.CommitEvent]:
    call = stub.WatchCommit(
        api.WatchCommitRequest(name=wm_names.commit(session, commit_id)), timeout=60
    )
    return [e async for e in call if e.stage != pb.COMMIT_STAGE_HEARTBEAT]


async def _rest(call: grpc.aio.UnaryStreamCall) -> list[pb.CommitEvent]:  # type: ignore[type-arg]
    """The remaining events of a stream already read with ``read()``, heartbeats left out."""
    out: list[pb.CommitEvent] = []
    while True:
        event = await call.read()
        if event is grpc.aio.EOF:
            return out
        assert isinstance(event, pb.CommitEvent)
        if event.stage != pb.COMMIT_STAGE_HEARTBEAT:
            out.append(event)


async def _first_event(stub: Stub, session: str, keep: int) -> pb.Commit:
    """CreateCommit: the commit as Phase 1 stored it (Phase 2 goes on, unwatched)."""
    commit: pb.Commit = await stub.CreateCommit(
        commit_flow.create_request(session, keep), timeout=30
    )
    return commit


async def _archived_ids(stub: Stub, archive: str) -> list[str]:
    """The ids of the messages of the archive named ``archive``, in order."""
    ids: list[str] = []
    token = ""
    while True:
        page = await stub.ListMessages(
            api.ListMessagesRequest(parent=archive, page_size=1000, page_token=token)
        )
        ids.extend(m.id for m in page.messages)
        token = page.next_page_token
        if not token:
            return ids


async def _completions(*servers: ServerProcess, commit_id: str) -> tuple[int, ...]:
    """How many times each server logged finishing Phase 2 of the commit. The log line comes
    just after the transaction that streams already saw, so wait briefly for it."""

    def count(server: ServerProcess) -> int:
        return sum(
            1
            for e in server.log_events()
            if e.get("event") == "phase2_completed" and e.get("commit_id") == commit_id
        )

    deadline = time.monotonic() + 10
    while True:
        counts = tuple(count(server) for server in servers)
        if sum(counts) or time.monotonic() > deadline:
            await asyncio.sleep(0.5)  # a second, wrong completion would show up by now
            return tuple(count(server) for server in servers)
        await asyncio.sleep(0.05)


async def test_watch_on_one_replica_sees_every_event_of_a_commit_made_on_another(
    tmp_path: Path,
    base_env: dict[str, str],
    processes: list[ServerProcess],
    channels: list[grpc.aio.Channel],
) -> None:
    env = {
        **base_env,
        "WM_LLM_PROVIDER": "scripted",
        "WM_SCRIPTED_RESPONSES": str(_script(tmp_path / "model.json")),
        "WM_SCRIPTED_DELAY": "1.0",  # Phase 2 outlives the moment the watch attaches
    }
    server_a, server_b = await _start(processes, (tmp_path / "a", env), (tmp_path / "b", env))
    a, b_ = _stub(channels, server_a), _stub(channels, server_b)
    await a.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("s"),
            messages=[b.user(f"message {i}", f"m{i}") for i in range(6)],
            create_session_if_missing=True,
        )
    )
    started = time.monotonic()
    created = await b_.CreateCommit(commit_flow.create_request("s", 2), timeout=60)
    assert created.archive == "sessions/s/archives/archive_001"
    call = b_.WatchCommit(api.WatchCommitRequest(name=created.name), timeout=60)
    first = await call.read()
    assert isinstance(first, pb.CommitEvent) and first.phase1.archive == created.archive
    watch = asyncio.create_task(_watch(a, "s", created.name))
    on_b = [first] + await _rest(call)
    on_a = await watch
    elapsed = time.monotonic() - started

    def summary(events: list[pb.CommitEvent]) -> list[tuple[int, int, bool]]:
        return [(e.sequence, e.stage, e.terminal) for e in events]

    assert summary(on_a) == summary(on_b)
    assert [e.sequence for e in on_a] == list(range(1, len(on_a) + 1))
    assert [e.SerializeToString() for e in on_a] == [e.SerializeToString() for e in on_b]
    stages = [e.stage for e in on_a]
    assert stages[0] == pb.COMMIT_STAGE_ARCHIVED and pb.COMMIT_STAGE_PHASE2_STARTED in stages
    assert stages[-1] == pb.COMMIT_STAGE_COMPLETED and on_a[-1].terminal
    assert sum(e.terminal for e in on_a) == 1
    # One replica ran Phase 2; the stream on the other one was woken by NOTIFY, not by its
    # 15 s heartbeat re-read.
    commit_id = wm_names.last_segment(created.name)
    assert sum(await _completions(server_a, server_b, commit_id=commit_id)) == 1
    assert elapsed < 10, f"events reached the other replica only after {elapsed:.1f}s"


async def test_concurrent_commits_from_two_replicas_number_archives_without_gaps(
    tmp_path: Path,
    base_env: dict[str, str],
    processes: list[ServerProcess],
    channels: list[grpc.aio.Channel],
) -> None:
    env = {**base_env, "WM_LLM_PROVIDER": "offline"}
    server_a, server_b = await _start(processes, (tmp_path / "a", env), (tmp_path / "b", env))
    stubs = [_stub(channels, server_a), _stub(channels, server_b)]
    await stubs[0].CreateSession(api.CreateSessionRequest(session_id="s"))
    added: list[str] = []

    async def add_and_commit(replica: int, round_: int) -> pb.Commit:
        ids = [f"r{replica}-{round_}-{i}" for i in range(3)]
        await stubs[replica].AddMessages(
            api.AddMessagesRequest(
                parent=wm_names.session("s"),
                messages=[
                    b.user(f"Please fix bug {i} in src/app_{n}.py", i) for n, i in enumerate(ids)
                ],
            )
        )
        added.extend(ids)
        return await _first_event(stubs[replica], "s", keep=1)

    firsts = await asyncio.gather(
        *(add_and_commit(replica, n) for n in range(5) for replica in (0, 1))
    )
    final = await _first_event(stubs[0], "s", keep=0)  # archive whatever the window kept
    commits = [c for c in [*firsts, final] if c.archive]
    archives = sorted(c.archive for c in commits)
    assert archives == [f"sessions/s/archives/archive_{n:03d}" for n in range(1, len(commits) + 1)]
    assert len(commits) >= 2
    # Every commit completes, watched through either replica.
    for index, commit in enumerate(commits):
        events = await _watch(stubs[(index + 1) % 2], "s", commit.name)
        assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    archived: list[str] = []
    for number, name in enumerate(archives, start=1):
        archive = await stubs[number % 2].GetArchive(api.GetArchiveRequest(name=name))
        archived.extend(await _archived_ids(stubs[(number + 1) % 2], name))
        # Phase 2 ran strictly in archive order across both replicas, each archive once.
        assert archive.working_memory.version == number
    assert sorted(archived) == sorted(added) and len(archived) == len(added)
    session = await stubs[1].GetSession(api.GetSessionRequest(name=wm_names.session("s")))
    assert (session.archive_count, session.working_memory_version) == (len(commits),) * 2
    assert (session.message_count, session.pending_tokens) == (0, 0)


async def test_ingest_from_several_replicas_loses_nothing_and_counts_pending_exactly(
    tmp_path: Path,
    base_env: dict[str, str],
    processes: list[ServerProcess],
    channels: list[grpc.aio.Channel],
) -> None:
    env = {**base_env, "WM_LLM_PROVIDER": "offline"}
    server_a, server_b = await _start(processes, (tmp_path / "a", env), (tmp_path / "b", env))
    stubs = [_stub(channels, server_a), _stub(channels, server_b)]
    await stubs[0].CreateSession(api.CreateSessionRequest(session_id="s"))
    keep = 3
    skipped = await _first_event(stubs[1], "s", keep=keep)  # remembers keep 3
    assert skipped.state == pb.COMMIT_STATE_SKIPPED
    rng = random.Random(3)
    tokens: dict[str, int] = {}

    async def ingest(replica: int, writer: int) -> None:
        for batch in range(12):
            sizes = [rng.randint(1, 60) for _ in range(rng.randint(1, 4))]
            ids = [f"w{replica}{writer}-{batch}-{i}" for i in range(len(sizes))]
            request = api.AddMessagesRequest(
                parent=wm_names.session("s"),
                messages=[b.sized(t, i) for t, i in zip(sizes, ids, strict=True)],
                request_id=f"req-{replica}{writer}-{batch}",
            )
            reply = await stubs[replica].AddMessages(request)
            assert list(reply.added_message_ids) == ids
            # A retry of the same request through the other replica changes nothing.
            again = await stubs[1 - replica].AddMessages(request)
            assert list(again.added_message_ids) == ids
            tokens.update(zip(ids, sizes, strict=True))

    await asyncio.gather(*(ingest(replica, w) for replica in (0, 1) for w in range(2)))
    session = await stubs[0].GetSession(api.GetSessionRequest(name=wm_names.session("s")))
    assert session.total_message_count == session.message_count == len(tokens)
    assert session.live_tokens == sum(tokens.values())
    # pending_tokens is exactly what a keep-3 commit archives now: everything but the newest 3.
    first = await _first_event(stubs[1], "s", keep=keep)
    assert first.archived_message_count == len(tokens) - keep
    assert first.archived_tokens == session.pending_tokens
    archived = await _archived_ids(stubs[0], first.archive)
    assert sum(tokens[m] for m in archived) == session.pending_tokens
    after = await stubs[1].GetSession(api.GetSessionRequest(name=wm_names.session("s")))
    assert (after.message_count, after.pending_tokens) == (keep, 0)
    # A page token of one replica is valid on the other: both sign with the key kept in the
    # shared database (WM_PAGE_TOKEN_KEY unset).
    await stubs[1].CreateSession(api.CreateSessionRequest(session_id="t"))
    page = await stubs[0].ListSessions(api.ListSessionsRequest(page_size=1))
    rest = await stubs[1].ListSessions(
        api.ListSessionsRequest(page_size=1, page_token=page.next_page_token)
    )
    assert [x.name for x in (*page.sessions, *rest.sessions)] == ["sessions/t", "sessions/s"]


@pytest.mark.slow
async def test_replica_killed_during_phase2_is_taken_over_once_the_lease_expires(
    tmp_path: Path,
    base_env: dict[str, str],
    processes: list[ServerProcess],
    channels: list[grpc.aio.Channel],
) -> None:
    # B's model never answers in time: B is inside Phase 2 when it dies.
    stuck = {
        **base_env,
        "WM_LLM_PROVIDER": "scripted",
        "WM_SCRIPTED_RESPONSES": str(_script(tmp_path / "stuck.json")),
        "WM_SCRIPTED_DELAY": "300",
    }
    (server_b,) = await _start(processes, (tmp_path / "b", stuck))
    stub_b = _stub(channels, server_b)
    await stub_b.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("s"),
            messages=[b.user(f"message {i}", f"m{i}") for i in range(4)],
            create_session_if_missing=True,
        )
    )
    created = await stub_b.CreateCommit(commit_flow.create_request("s"), timeout=60)
    commit_id = wm_names.last_segment(created.name)
    call = stub_b.WatchCommit(api.WatchCommitRequest(name=created.name), timeout=60)
    while True:  # B has claimed the job and is waiting on its model
        event = await call.read()
        assert isinstance(event, pb.CommitEvent)
        if event.stage == pb.COMMIT_STAGE_LLM_REQUEST_SENT:
            break
    call.cancel()

    (server_a,) = await _start(
        processes, (tmp_path / "a", {**base_env, "WM_LLM_PROVIDER": "offline"})
    )
    stub_a = _stub(channels, server_a)
    watch = asyncio.create_task(_watch(stub_a, "s", commit_id))
    await asyncio.sleep(3)  # longer than a lease: B renews it, so A must not take the job
    running = await stub_a.GetCommit(api.GetCommitRequest(name=wm_names.commit("s", commit_id)))
    assert running.state == pb.COMMIT_STATE_RUNNING and running.attempt_count == 1
    assert not watch.done()

    server_b.kill()
    killed = time.monotonic()
    events = await asyncio.wait_for(watch, 60)
    took_over_after = time.monotonic() - killed

    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    starts = [e.phase2_started.attempt for e in events if e.stage == pb.COMMIT_STAGE_PHASE2_STARTED]
    assert starts == [1, 2]  # B's attempt, then A's after the takeover
    assert sum(e.terminal for e in events) == 1 and events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    # B renewed its 2 s lease every 2/3 s, so it outlived B by at least 4/3 s.
    assert took_over_after >= 1.0
    done = await stub_a.GetCommit(api.GetCommitRequest(name=wm_names.commit("s", commit_id)))
    assert done.state == pb.COMMIT_STATE_COMPLETED and done.attempt_count == 2
    assert done.working_memory_version == 1
    memory = await stub_a.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name=wm_names.working_memory("s"))
    )
    assert memory.version == 1 and memory.archive == "sessions/s/archives/archive_001"  # once
    listed = await stub_a.ListCommits(api.ListCommitsRequest(parent=wm_names.session("s")))
    assert [c.name for c in listed.commits] == [created.name]
    assert await _completions(server_a, server_b, commit_id=commit_id) == (1, 0)


async def test_concurrent_memory_writes_on_two_replicas_never_answer_internal(
    tmp_path: Path,
    base_env: dict[str, str],
    processes: list[ServerProcess],
    channels: list[grpc.aio.Channel],
) -> None:
    """8 concurrent CreateMemory of one text (different request ids) and 8 concurrent
    UpdateMemory of one memory, spread over two replicas: each caller gets success, ABORTED
    (retryable, with RetryInfo) or ALREADY_EXISTS, never INTERNAL; the data stays whole."""
    one, two = await _start(
        processes, (tmp_path / "a", dict(base_env)), (tmp_path / "b", dict(base_env))
    )
    stubs = [_stub(channels, one), _stub(channels, two)]
    await stubs[0].CreateSession(
        api.CreateSessionRequest(session_id="m", session=pb.Session(user_id="u1"))
    )
    owner = wm_names.user("u1")

    def create(n: int) -> object:
        return stubs[n % 2].CreateMemory(
            api.CreateMemoryRequest(
                owner=owner,
                memory=pb.Memory(type=pb.MEMORY_TYPE_PREFERENCE, text="Prefers tabs"),
                request_id=f"create-{n}",
            )
        )

    def update(n: int, memory: str) -> object:
        return stubs[n % 2].UpdateMemory(
            api.UpdateMemoryRequest(
                memory=pb.Memory(name=memory, text=f"Prefers tabs, take {n}"),
                request_id=f"update-{n}",
            )
        )

    allowed = {
        grpc.StatusCode.OK,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.ALREADY_EXISTS,
    }
    for round_ in range(3):
        created = await asyncio.gather(
            *(create(n + 10 * round_) for n in range(8)), return_exceptions=True
        )  # type: ignore[arg-type]
        codes = [
            r.code() if isinstance(r, grpc.aio.AioRpcError) else grpc.StatusCode.OK for r in created
        ]
        assert set(codes) <= allowed, [outcome(r) for r in created]
        for result in created:
            if (
                isinstance(result, grpc.aio.AioRpcError)
                and result.code() == grpc.StatusCode.ABORTED
            ):
                assert _retry_info(result), outcome(result)
    listed = await stubs[1].ListMemories(api.ListMemoriesRequest(owner=owner))
    assert len(listed.memories) == 1  # one memory, however many callers raced
    memory = listed.memories[0].name
    updated = await asyncio.gather(*(update(n, memory) for n in range(8)), return_exceptions=True)  # type: ignore[arg-type]
    codes = [
        r.code() if isinstance(r, grpc.aio.AioRpcError) else grpc.StatusCode.OK for r in updated
    ]
    assert set(codes) <= allowed, [outcome(r) for r in updated]
    assert grpc.StatusCode.OK in codes
    got = await stubs[0].GetMemory(api.GetMemoryRequest(name=memory))
    # Every successful update added one version, contiguous, the old texts in the history.
    assert got.version == 1 + codes.count(grpc.StatusCode.OK)
    assert sorted(v.version for v in got.history) == list(range(1, got.version))


def _retry_info(error: grpc.aio.AioRpcError) -> bool:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    return status is not None and any(
        d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in status.details
    )


async def _commit_on(stub: Stub, session: str, first: int, texts: list[str]) -> None:
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session(session),
            messages=[
                pb.Message(id=f"m{first + n}", role=pb.ROLE_USER, parts=[pb.Part(text=t)])
                for n, t in enumerate(texts)
            ],
        )
    )
    _, events = await commit_flow.commit(stub, session, within=60)
    stages = [e.stage for e in events]
    assert stages[-1] == pb.COMMIT_STAGE_COMPLETED


async def test_a_replica_searches_what_another_one_embedded_at_its_next_query(
    tmp_path: Path,
    base_env: dict[str, str],
    processes: list[ServerProcess],
    channels: list[grpc.aio.Channel],
) -> None:
    """Replica B holds a session's vectors once it searched it; the next commit, embedded by
    replica A's Phase 2 (A's worker is woken by its own commit, B's polls), is found by
    meaning on B at once (its cache compares the archives' vector versions), not after an
    expiry; a memory A writes and embeds is found by meaning on B at once too."""
    one, two = await _start(
        processes, (tmp_path / "a", dict(base_env)), (tmp_path / "b", dict(base_env))
    )
    a, b = _stub(channels, one), _stub(channels, two)
    await a.CreateSession(
        api.CreateSessionRequest(session_id="r", session=pb.Session(user_id="u1"))
    )
    await _commit_on(a, "r", 0, ["We settled on PostgreSQL for the ledger service."])

    def hybrid(query: str) -> api.SearchArchivesRequest:
        return api.SearchArchivesRequest(
            parent=wm_names.session("r"), query=query, mode=api.SEARCH_MODE_HYBRID
        )

    held = await b.SearchArchives(hybrid("which database for the ledger"))
    assert (
        held.hits and held.hits[0].message == "sessions/r/messages/m0"
    )  # B holds the session's vectors now
    await _commit_on(a, "r", 1, ["My sister just started a pottery class on Tuesdays."])
    answer = await b.SearchArchives(hybrid("when did she begin ceramics lessons"))
    assert answer.semantic_recall == api.SEMANTIC_RECALL_FULL and answer.unembedded_rows == 0
    assert answer.hits[0].message == "sessions/r/messages/m1"  # no word in common: by meaning
    assert answer.hits[0].dense_score > 0 and answer.hits[0].lexical_score == 0

    owner = wm_names.user("u1")
    await b.SearchMemories(api.SearchMemoriesRequest(owner=owner, query="ledger"))  # held
    await a.CreateMemory(
        api.CreateMemoryRequest(
            owner=owner, memory=pb.Memory(type=pb.MEMORY_TYPE_EVENT, text="Started pottery")
        )
    )
    request = api.SearchMemoriesRequest(owner=owner, query="ceramics", page_size=1)
    for _ in range(200):  # A's embedding loop stores the vector just after the write
        found = await b.SearchMemories(request)
        if found.semantic_recall == api.SEMANTIC_RECALL_FULL:
            break
        await asyncio.sleep(0.05)
    assert found.semantic_recall == api.SEMANTIC_RECALL_FULL
    assert found.hits[0].memory.text == "Started pottery" and found.hits[0].dense_score > 0
