"""One request_id, one effect, one outcome: retries of every mutating RPC, raced.

Clients re-send a request with the same request_id when they saw no answer (UNAVAILABLE,
DEADLINE_EXCEEDED), and the retry may reach another replica while the first attempt still
runs. The contract (working_memory_service.proto) promises that a retry with the same id
returns the same outcome and never stores twice. So here 8 callers send one request at once,
spread over two server processes sharing one PostgreSQL database (and, on SQLite, all to
one server), for several rounds: a race that a check-then-act split over transactions loses
only now and then must lose in one of them.

A request_id names one request: the same id with a different request is a client bug, refused
with FAILED_PRECONDITION (REQUEST_ID_REUSED) without changing anything, and an id does not
outlive its session: after DeleteSession and a new session of the same name it matches
nothing.

Phase 2 always fails here (a scripted model that answers with a non-retryable error, one
attempt), so that every commit ends FAILED quickly and RetryCommit has something to retry.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf.message import Message as ProtoMessage

from support import builders as b
from support import commit_flow, wm_names
from support.errors import details, outcome
from support.postgres import PostgresServer, postgres_server  # noqa: F401 (fixture)
from support.server_process import ServerProcess
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

Stub = service_grpc.WorkingMemoryServiceStub
T = TypeVar("T")

CALLERS = 8
ROUNDS = 10
DEADLINE = 10.0  # per call: a caller that waits this long has hung

BACKENDS = [
    pytest.param("sqlite", id="sqlite-1-server"),
    pytest.param("postgres", id="postgres-2-replicas", marks=pytest.mark.postgres),
]


# Tests that fail for a known, open defect, by name (with its method parameter, if any):
# (reason, backends). Strict, so that a listed test which passes fails the run. Issue 16's
# defects are fixed; the mechanism stays for the next one.
OPEN_DEFECTS: dict[str, tuple[str, tuple[str, ...]]] = {}


@dataclass
class Cluster:
    backend: str
    servers: list[ServerProcess]


@pytest.fixture(scope="module", params=BACKENDS)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The servers of one backend, shared by the module's tests (each test uses new sessions):
    starting processes costs seconds, a round costs milliseconds."""
    backend: str = request.param
    base = tmp_path_factory.mktemp(f"request-ids-{backend}")
    script = base / "model.json"
    failure = {"error": {"message": "scripted model outage", "retryable": False}}
    script.write_text(json.dumps({"loop": True, "responses": [failure]}), encoding="utf-8")
    env = {
        "WM_LLM_PROVIDER": "scripted",
        "WM_SCRIPTED_RESPONSES": str(script),
        "WM_PHASE2_MAX_ATTEMPTS": "1",
        "WM_PHASE2_RETRY_BASE_DELAY": "0.05",
        "WM_HEARTBEAT_SECONDS": "1",
        "WM_LOG_LEVEL": "warning",
    }
    pg: PostgresServer | None = None
    url = ""
    replicas = 1
    if backend == "postgres":
        pg = request.getfixturevalue("postgres_server")
        url = pg.create_database("wm_request_ids")
        env["WM_DATABASE_URL"] = url
        replicas = 2
    servers = [ServerProcess(base / f"replica-{n}", **env) for n in range(replicas)]
    try:
        with ThreadPoolExecutor(replicas) as pool:
            list(pool.map(lambda server: server.start(60), servers))
        yield Cluster(backend, servers)
    finally:
        for server in servers:
            server.kill()
        if pg is not None:
            pg.drop_database(url)


@pytest.fixture(autouse=True)
def _open_defect(request: pytest.FixtureRequest, cluster: Cluster) -> None:
    name = request.node.originalname
    method = getattr(request.node, "callspec", None) and request.node.callspec.params.get("method")
    reason, backends = OPEN_DEFECTS.get(f"{name}[{method}]" if method else name, ("", ()))
    if cluster.backend in backends:
        # The stale Apply record makes today's server fail an assertion: INTERNAL.
        raises = (AssertionError, grpc.aio.AioRpcError)
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True, raises=raises))


class Callers:
    """Stubs on every replica of the cluster; caller ``n`` talks to replica ``n % replicas``."""

    def __init__(self, stubs: list[Stub]) -> None:
        self.stubs = stubs
        self.first = stubs[0]
        self.other = stubs[-1]  # another replica when there are two

    async def race(self, call: Callable[[Stub], Awaitable[T]]) -> list[T | BaseException]:
        """The same call by CALLERS callers at once; every result or error, in caller order."""
        calls = [call(self.stubs[n % len(self.stubs)]) for n in range(CALLERS)]
        return list(await asyncio.gather(*calls, return_exceptions=True))


@pytest.fixture
async def callers(cluster: Cluster) -> AsyncIterator[Callers]:
    channels = [grpc.aio.insecure_channel(server.address) for server in cluster.servers]
    try:
        # Connected before the race, so that the calls leave together.
        for channel in channels:
            await asyncio.wait_for(channel.channel_ready(), DEADLINE)
        yield Callers([service_grpc.WorkingMemoryServiceStub(channel) for channel in channels])
    finally:
        for channel in channels:
            await channel.close()


def _unique(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:10]}"


def _failed_callers(results: list[Any]) -> list[str]:
    """Problems for the callers that did not succeed (empty when all did)."""
    errors = [outcome(r) for r in results if isinstance(r, BaseException)]
    if not errors:
        return []
    return [f"{len(errors)} of {len(results)} callers failed: {sorted(set(errors))}"]


def _distinct(replies: list[ProtoMessage]) -> int:
    return len({reply.SerializeToString(deterministic=True) for reply in replies})


async def _rounds(round_: Callable[[int], Awaitable[list[str]]], rounds: int = ROUNDS) -> None:
    """Run every round (a race lost only now and then must show), then report them all."""
    failures: list[str] = []
    for number in range(1, rounds + 1):
        problems = await round_(number)
        if problems:
            failures.append(f"round {number}: " + "; ".join(problems))
    assert not failures, f"{len(failures)} of {rounds} rounds failed:\n" + "\n".join(failures)


async def _session(stub: Stub, label: str, messages: int = 0) -> str:
    sid = _unique(label)
    await stub.CreateSession(api.CreateSessionRequest(session_id=sid), timeout=DEADLINE)
    if messages:
        await stub.AddMessages(
            api.AddMessagesRequest(
                parent=wm_names.session(sid),
                messages=[b.user(f"Please fix bug {i} in src/app_{i}.py") for i in range(messages)],
            ),
            timeout=DEADLINE,
        )
    return sid


async def _session_count(stub: Stub) -> int:
    count, token = 0, ""
    while True:
        page = await stub.ListSessions(
            api.ListSessionsRequest(page_size=1000, page_token=token), timeout=DEADLINE
        )
        count += len(page.sessions)
        token = page.next_page_token
        if not token:
            return count


async def _get_session(stub: Stub, sid: str) -> pb.Session:
    return await stub.GetSession(
        api.GetSessionRequest(name=wm_names.session(sid)), timeout=DEADLINE
    )


async def _commit_first(stub: Stub, sid: str, keep: int, rid: str) -> pb.Commit:
    """CreateCommit: Phase 1's outcome (Phase 2 goes on in the background)."""
    request = commit_flow.create_request(sid, keep, rid)
    return await stub.CreateCommit(request, timeout=DEADLINE)


def _phase1(commit: pb.Commit) -> tuple[object, ...]:
    """What Phase 1 decided for a commit: the same for every answer about it, whenever asked
    (its state moves on with Phase 2)."""
    return (
        commit.name,
        commit.archive,
        commit.archived_message_count,
        commit.kept_message_count,
        commit.keep_recent_count,
        commit.create_time.ToNanoseconds(),
    )


async def _terminal(stub: Stub, sid: str, commit_id: str) -> pb.Commit:
    """Poll until the commit is terminal (Phase 2 runs in the background)."""
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while True:
        commit = await stub.GetCommit(
            api.GetCommitRequest(name=wm_names.commit(sid, commit_id)), timeout=DEADLINE
        )
        if commit.state in (
            pb.COMMIT_STATE_COMPLETED,
            pb.COMMIT_STATE_FAILED,
            pb.COMMIT_STATE_SKIPPED,
        ):
            return commit
        assert asyncio.get_running_loop().time() < deadline, f"commit never ended: {commit}"
        await asyncio.sleep(0.02)


async def _events(stub: Stub, sid: str, commit_id: str) -> list[pb.CommitEvent]:
    """The stored events of a terminal commit (the watch replays them and ends)."""
    call = stub.WatchCommit(
        api.WatchCommitRequest(name=wm_names.commit(sid, commit_id)), timeout=DEADLINE
    )
    return [e async for e in call if e.stage != pb.COMMIT_STAGE_HEARTBEAT]


def _retry_requests(events: list[pb.CommitEvent]) -> int:
    """How many times RetryCommit reopened the commit (its event is attempt 0)."""
    return sum(
        1
        for e in events
        if e.stage == pb.COMMIT_STAGE_RETRY_SCHEDULED and e.retry_scheduled.attempt == 0
    )


def _phase2_runs(events: list[pb.CommitEvent]) -> int:
    """Phase 2 attempts (one per reopening here: one attempt each, never retried)."""
    return sum(1 for e in events if e.stage == pb.COMMIT_STAGE_PHASE2_STARTED)


def _ops(number: int) -> list[pb.SectionOp]:
    return [
        pb.SectionOp(
            section="Session Title", kind=pb.SECTION_OP_KIND_UPDATE, content=f"Round {number}"
        ),
        pb.SectionOp(
            section="Key Facts & Decisions",
            kind=pb.SECTION_OP_KIND_APPEND,
            items=[f"Fact number {number} was decided by the client model"],
        ),
    ]


# --- 8 concurrent retries of one request, for every mutating RPC ---------------------------


async def test_create_session_retries_create_one_session(callers: Callers) -> None:
    async def round_(number: int) -> list[str]:
        request = api.CreateSessionRequest(session_id=_unique("create"), request_id=_unique("r"))
        before = await _session_count(callers.first)
        results = await callers.race(lambda stub: stub.CreateSession(request, timeout=DEADLINE))
        problems = _failed_callers(results)
        replies = [r for r in results if isinstance(r, pb.Session)]
        if replies and _distinct(replies) > 1:
            problems.append(f"{_distinct(replies)} different sessions answered")
        created = await _session_count(callers.first) - before
        if created != 1:
            problems.append(f"{created} sessions created")
        return problems

    await _rounds(round_)


async def test_create_session_without_id_retries_create_one_session(callers: Callers) -> None:
    """The server makes the id: only the request_id can tell a retry from a new session."""

    async def round_(number: int) -> list[str]:
        request = api.CreateSessionRequest(request_id=_unique("r"))
        before = await _session_count(callers.first)
        results = await callers.race(lambda stub: stub.CreateSession(request, timeout=DEADLINE))
        problems = _failed_callers(results)
        ids = {r.name for r in results if isinstance(r, pb.Session)}
        if len(ids) > 1:
            problems.append(f"callers got {len(ids)} different session ids")
        created = await _session_count(callers.first) - before
        if created != 1:
            problems.append(f"{created} sessions created")
        return problems

    await _rounds(round_)


async def test_delete_session_retries_all_succeed(callers: Callers) -> None:
    async def round_(number: int) -> list[str]:
        sid = await _session(callers.first, "delete", messages=3)
        request = api.DeleteSessionRequest(name=wm_names.session(sid), request_id=_unique("r"))
        results = await callers.race(lambda stub: stub.DeleteSession(request, timeout=DEADLINE))
        problems = _failed_callers(results)
        try:
            await _get_session(callers.other, sid)
            problems.append("the session still exists")
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                problems.append(f"GetSession after the delete: {outcome(error)}")
        # A retry that comes after all of them is answered like them.
        late = await callers.race(lambda stub: stub.DeleteSession(request, timeout=DEADLINE))
        problems += [f"late retry: {p}" for p in _failed_callers(late)]
        return problems

    await _rounds(round_)


async def test_add_messages_retries_store_the_batch_once(callers: Callers) -> None:
    async def round_(number: int) -> list[str]:
        sid = await _session(callers.first, "add")
        # No message ids: the server makes them, so only the request_id prevents a second copy.
        request = api.AddMessagesRequest(
            parent=wm_names.session(sid),
            messages=[b.user(f"message {i} of round {number}") for i in range(3)],
            request_id=_unique("r"),
        )
        results = await callers.race(lambda stub: stub.AddMessages(request, timeout=DEADLINE))
        problems = _failed_callers(results)
        replies = [r for r in results if isinstance(r, api.AddMessagesResponse)]
        if replies and _distinct(replies) > 1:
            problems.append(f"{_distinct(replies)} different replies")
        session = await _get_session(callers.other, sid)
        if (session.message_count, session.total_message_count) != (3, 3):
            problems.append(f"{session.total_message_count} messages stored, not 3")
        return problems

    await _rounds(round_)


async def test_add_messages_creating_the_session_retries_store_once(callers: Callers) -> None:
    """As agent runtimes call it: every caller hears that the request created the session."""

    async def round_(number: int) -> list[str]:
        sid = _unique("add-create")
        request = api.AddMessagesRequest(
            parent=wm_names.session(sid),
            messages=[b.user(f"message {i} of round {number}") for i in range(3)],
            create_session_if_missing=True,
            request_id=_unique("r"),
        )
        results = await callers.race(lambda stub: stub.AddMessages(request, timeout=DEADLINE))
        problems = _failed_callers(results)
        replies = [r for r in results if isinstance(r, api.AddMessagesResponse)]
        if replies and _distinct(replies) > 1:
            created = sorted(r.session_created for r in replies)
            problems.append(f"{_distinct(replies)} different replies (session_created {created})")
        session = await _get_session(callers.other, sid)
        if (session.message_count, session.total_message_count) != (3, 3):
            problems.append(f"{session.total_message_count} messages stored, not 3")
        return problems

    await _rounds(round_)


async def _one_commit_problems(
    callers: Callers,
    sid: str,
    results: list[Any],
    retry: Callable[[Stub], Awaitable[pb.Commit]],
    *,
    live_after: int,
) -> list[str]:
    """What is wrong after raced CreateCommit or CompactSession retries: every caller got the
    same commit, one commit and one archive exist, ``live_after`` messages stayed live, and a
    retry after the commit ended (on the other replica) still answers that commit and
    archives nothing more."""
    problems = _failed_callers(results)
    commits = [r for r in results if isinstance(r, pb.Commit)]
    if len({_phase1(c) for c in commits}) > 1:
        names = {c.name for c in commits}
        problems.append(f"{len({_phase1(c) for c in commits})} different commits ({names})")
    if commits:
        await _terminal(callers.first, sid, commits[0].name)
        late = await retry(callers.other)
        if _phase1(late) != _phase1(commits[0]):
            problems.append(f"a late retry answered {late.name}, not {commits[0].name}")
    listed = await callers.other.ListCommits(
        api.ListCommitsRequest(parent=wm_names.session(sid)), timeout=DEADLINE
    )
    if len(listed.commits) != 1:
        problems.append(f"{len(listed.commits)} commits stored")
    session = await _get_session(callers.other, sid)
    if (session.archive_count, session.message_count) != (1, live_after):
        problems.append(
            f"archives {session.archive_count} and live messages {session.message_count},"
            f" not 1 and {live_after}"
        )
    return problems


async def test_commit_retries_make_one_commit(callers: Callers) -> None:
    async def round_(number: int) -> list[str]:
        sid = await _session(callers.first, "commit", messages=4)
        rid = _unique("r")
        results = await callers.race(lambda stub: _commit_first(stub, sid, 1, rid))
        return await _one_commit_problems(
            callers, sid, results, lambda stub: _commit_first(stub, sid, 1, rid), live_after=1
        )

    await _rounds(round_)


async def test_compact_retries_make_one_commit(callers: Callers) -> None:
    async def round_(number: int) -> list[str]:
        sid = await _session(callers.first, "compact", messages=4)
        request = api.CompactSessionRequest(name=wm_names.session(sid), request_id=_unique("r"))
        results = await callers.race(lambda stub: stub.CompactSession(request, timeout=DEADLINE))
        return await _one_commit_problems(
            callers,
            sid,
            results,
            lambda stub: stub.CompactSession(request, timeout=DEADLINE),
            live_after=0,
        )

    await _rounds(round_)


async def test_retry_commit_retries_reopen_the_commit_once(callers: Callers) -> None:
    async def round_(number: int) -> list[str]:
        sid = await _session(callers.first, "retry", messages=3)
        commit_id = (await _commit_first(callers.first, sid, 0, "")).name
        failed = await _terminal(callers.first, sid, commit_id)
        assert failed.state == pb.COMMIT_STATE_FAILED, failed  # the scripted model failed it
        runs = _phase2_runs(await _events(callers.first, sid, commit_id))
        request = api.RetryCommitRequest(
            name=wm_names.commit(sid, commit_id), request_id=_unique("r")
        )
        results = await callers.race(lambda stub: stub.RetryCommit(request, timeout=DEADLINE))
        problems = _failed_callers(results)
        ids = {r.name for r in results if isinstance(r, pb.Commit)}
        if ids - {commit_id}:
            problems.append(f"callers got commits {sorted(ids)}")
        # Every caller has its answer: whatever was recorded is in the event log by now.
        await _terminal(callers.other, sid, commit_id)
        events = await _events(callers.other, sid, commit_id)
        if _retry_requests(events) != 1:
            problems.append(f"the commit was reopened {_retry_requests(events)} times")
        if _phase2_runs(events) != runs + 1:
            problems.append(f"Phase 2 ran {_phase2_runs(events) - runs} more times, not once")
        return problems

    await _rounds(round_)


async def test_apply_working_memory_ops_retries_apply_once(callers: Callers) -> None:
    async def round_(number: int) -> list[str]:
        sid = await _session(callers.first, "apply")
        request = api.ApplyWorkingMemoryOpsRequest(
            parent=wm_names.session(sid), ops=_ops(number), request_id=_unique("r")
        )
        results = await callers.race(
            lambda stub: stub.ApplyWorkingMemoryOps(request, timeout=DEADLINE)
        )
        problems = _failed_callers(results)
        replies = [r for r in results if isinstance(r, api.ApplyWorkingMemoryOpsResponse)]
        versions = sorted({r.working_memory.version for r in replies})
        if replies and _distinct(replies) > 1:
            problems.append(f"{_distinct(replies)} different replies (versions {versions})")
        latest = await callers.other.GetWorkingMemory(
            api.GetWorkingMemoryRequest(name=wm_names.working_memory(sid)), timeout=DEADLINE
        )
        if latest.version != 1:
            problems.append(f"the working memory is at version {latest.version}, not 1")
        return problems

    await _rounds(round_)


# --- the same request_id with a different request ------------------------------------------


async def _state(stub: Stub, sid: str) -> list[bytes]:
    """Everything a client can read about a session (and how many sessions there are)."""
    session = await _get_session(stub, sid)
    commits = await stub.ListCommits(
        api.ListCommitsRequest(parent=wm_names.session(sid)), timeout=DEADLINE
    )
    archives = await stub.ListArchives(
        api.ListArchivesRequest(parent=wm_names.session(sid)), timeout=DEADLINE
    )
    try:
        memory: ProtoMessage = await stub.GetWorkingMemory(
            api.GetWorkingMemoryRequest(name=wm_names.working_memory(sid)), timeout=DEADLINE
        )
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.NOT_FOUND, outcome(error)
        memory = pb.WorkingMemory()
    count = await _session_count(stub)
    return [
        m.SerializeToString(deterministic=True) for m in (session, commits, archives, memory)
    ] + [str(count).encode()]


# The first request, then the second one (same request_id, other request) not sent yet: a
# gRPC call starts on creation, and the state must be read before it.
Reuse = Callable[[], Awaitable[object]]


async def _refused_as_reused(call: Awaitable[object]) -> None:
    try:
        result = await call
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, outcome(error)
        assert details(error)[0].reason == "REQUEST_ID_REUSED", outcome(error)
        return
    raise AssertionError(f"the reused request_id was accepted; the answer: {result!r}")


async def _reuse_add_messages(callers: Callers, sid: str, rid: str) -> Reuse:
    first = api.AddMessagesRequest(
        parent=wm_names.session(sid),
        messages=[b.user("first", "m1"), b.user("second", "m2")],
        request_id=rid,
    )
    reply = await callers.first.AddMessages(first, timeout=DEADLINE)
    assert list(reply.added_message_ids) == ["m1", "m2"]
    return lambda: callers.other.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session(sid), messages=[b.user("other", "m3")], request_id=rid
        ),
        timeout=DEADLINE,
    )


async def _reuse_commit(callers: Callers, sid: str, rid: str) -> Reuse:
    first = await _commit_first(callers.first, sid, 1, rid)
    assert first.archive
    await _terminal(callers.first, sid, first.name)  # nothing moves while we compare
    return lambda: _commit_first(callers.other, sid, 0, rid)


async def _reuse_compact(callers: Callers, sid: str, rid: str) -> Reuse:
    """A compaction is the keep-0 commit of the whole session; a keep-1 commit is another
    request."""
    first = await callers.first.CompactSession(
        api.CompactSessionRequest(name=wm_names.session(sid), request_id=rid), timeout=DEADLINE
    )
    assert first.archive
    await _terminal(callers.first, sid, first.name)
    return lambda: _commit_first(callers.other, sid, 1, rid)


async def _reuse_apply(callers: Callers, sid: str, rid: str) -> Reuse:
    reply = await callers.first.ApplyWorkingMemoryOps(
        api.ApplyWorkingMemoryOpsRequest(parent=wm_names.session(sid), ops=_ops(1), request_id=rid),
        timeout=DEADLINE,
    )
    assert reply.working_memory.version == 1
    return lambda: callers.other.ApplyWorkingMemoryOps(
        api.ApplyWorkingMemoryOpsRequest(parent=wm_names.session(sid), ops=_ops(2), request_id=rid),
        timeout=DEADLINE,
    )


async def _reuse_create(callers: Callers, sid: str, rid: str) -> Reuse:
    named = _unique("created")
    await callers.first.CreateSession(
        api.CreateSessionRequest(session_id=named, request_id=rid), timeout=DEADLINE
    )
    return lambda: callers.other.CreateSession(
        api.CreateSessionRequest(session_id=_unique("another"), request_id=rid),
        timeout=DEADLINE,
    )


REUSES = {
    "AddMessages": _reuse_add_messages,
    "CreateCommit": _reuse_commit,
    "CompactSession": _reuse_compact,
    "ApplyWorkingMemoryOps": _reuse_apply,
    "CreateSession": _reuse_create,
}


@pytest.mark.parametrize("method", list(REUSES))
async def test_same_request_id_with_a_different_request_is_refused(
    callers: Callers, method: str
) -> None:
    sid = await _session(callers.first, "reuse", messages=3)
    rid = _unique("r")
    second = await REUSES[method](callers, sid, rid)
    before = await _state(callers.first, sid)
    await _refused_as_reused(second())
    assert await _state(callers.first, sid) == before, "the refused request changed the session"


# --- request_ids do not outlive their session -----------------------------------------------


async def _recreate(callers: Callers, sid: str) -> None:
    await callers.first.DeleteSession(
        api.DeleteSessionRequest(name=wm_names.session(sid)), timeout=DEADLINE
    )
    await callers.other.CreateSession(api.CreateSessionRequest(session_id=sid), timeout=DEADLINE)


async def test_add_messages_request_id_does_not_match_a_recreated_session(
    callers: Callers,
) -> None:
    sid = await _session(callers.first, "again")
    request = api.AddMessagesRequest(
        parent=wm_names.session(sid),
        messages=[b.user("one", "m1"), b.user("two", "m2")],
        request_id="rid-1",
    )
    first = await callers.first.AddMessages(request, timeout=DEADLINE)
    assert list(first.added_message_ids) == ["m1", "m2"]
    await _recreate(callers, sid)
    again = await callers.other.AddMessages(request, timeout=DEADLINE)
    assert list(again.added_message_ids) == ["m1", "m2"], again
    session = await _get_session(callers.first, sid)
    assert (session.message_count, session.total_message_count) == (2, 2)


async def test_apply_ops_request_id_does_not_match_a_recreated_session(
    callers: Callers,
) -> None:
    sid = await _session(callers.first, "again")
    request = api.ApplyWorkingMemoryOpsRequest(
        parent=wm_names.session(sid), ops=_ops(1), request_id="rid-1"
    )
    first = await callers.first.ApplyWorkingMemoryOps(request, timeout=DEADLINE)
    assert first.working_memory.version == 1
    await _recreate(callers, sid)
    again = await callers.other.ApplyWorkingMemoryOps(request, timeout=DEADLINE)
    assert again.working_memory.version == 1
    latest = await callers.first.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name=wm_names.working_memory(sid)), timeout=DEADLINE
    )
    assert latest.version == 1 and "Round 1" in latest.document


async def test_commit_request_id_does_not_match_a_recreated_session(callers: Callers) -> None:
    sid = await _session(callers.first, "again", messages=2)
    first = await _commit_first(callers.first, sid, 0, "rid-1")
    assert first.archive
    await _recreate(callers, sid)
    await callers.first.AddMessages(
        api.AddMessagesRequest(parent=wm_names.session(sid), messages=[b.user("new life")]),
        timeout=DEADLINE,
    )
    again = await _commit_first(callers.other, sid, 0, "rid-1")
    assert again.name != first.name
    assert again.archive and again.archived_message_count == 1
    session = await _get_session(callers.first, sid)
    assert (session.archive_count, session.message_count) == (1, 0)


# --- DeleteSession retried after it succeeded -----------------------------------------------


async def test_delete_session_retried_after_success_succeeds_again(callers: Callers) -> None:
    sid = await _session(callers.first, "gone", messages=2)
    request = api.DeleteSessionRequest(name=wm_names.session(sid), request_id=_unique("r"))
    await callers.first.DeleteSession(request, timeout=DEADLINE)
    await callers.other.DeleteSession(request, timeout=DEADLINE)  # the retry: no error
    await callers.first.DeleteSession(request, timeout=DEADLINE)
    # Without the request_id it is a new request, about a session that does not exist.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await callers.other.DeleteSession(
            api.DeleteSessionRequest(name=wm_names.session(sid)), timeout=DEADLINE
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND, outcome(caught.value)
    assert details(caught.value)[0].reason == "SESSION_NOT_FOUND"
