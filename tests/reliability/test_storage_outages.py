"""The database goes away, the disk fills up, someone else holds the lock: a real server
process must answer each with a retryable status and recover by itself when the cause goes.

An environmental failure is not a bug in the request, so it is never INTERNAL: an
unreachable database or a lock that is not granted is UNAVAILABLE (ErrorInfo reason
``STORAGE_UNAVAILABLE``), which the clients' service config retries; a full disk is
RESOURCE_EXHAUSTED (``STORAGE_FULL``). Either way nothing is half-written, every call ends
within its deadline (none hangs on a dead pool), the process stays up, and once the cause is
gone the same calls succeed with nothing acknowledged lost.
"""

from __future__ import annotations

import asyncio
import errno
import json
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from reliability_support import FRESH, Stub, assert_well_formed, wait_terminal

from support import builders as b
from support import commit_flow, wm_names
from support.errors import details, outcome
from support.postgres import PostgresServer, missing_prerequisite, private_postgres_server
from support.providers import creation
from support.server_process import ServerProcess
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

pytestmark = pytest.mark.slow


# A call during an outage must answer within this; DEADLINE_EXCEEDED means it hung.
OUTAGE_DEADLINE = 5.0
# Once the cause is gone, calls must succeed again within this.
RECOVERY = 10.0


async def _refused(call: Awaitable[Any], code: grpc.StatusCode, reason: str) -> str | None:
    """None when the call fails with ``code`` and ``reason``; else what happened instead."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        if error.code() == code and details(error)[0].reason == reason:
            return None
        return outcome(error)
    return "OK (it succeeded)"


def _commit(stub: Stub, sid: str, keep: int = 0, timeout: float = 10.0) -> Awaitable[Any]:
    """CreateCommit: Phase 1, answered with the commit (Phase 2 runs on its own)."""
    return stub.CreateCommit(commit_flow.create_request(sid, keep), timeout=timeout)


async def _until_llm_call(stub: Stub, sid: str) -> tuple[str, int]:
    """Commit ``sid`` and watch it until Phase 2 has sent its model request; the commit's
    name and the last sequence seen."""
    started = await _commit(stub, sid, timeout=30)
    call = stub.WatchCommit(api.WatchCommitRequest(name=started.name), timeout=30)
    last = 0
    async for event in call:
        last = event.sequence
        if event.stage == pb.COMMIT_STAGE_LLM_REQUEST_SENT:
            break
    call.cancel()
    return started.name, last


async def _until_ok(
    call: Any, *, allowed: set[grpc.StatusCode], within: float = RECOVERY
) -> tuple[Any, list[str]]:
    """Repeat ``call()`` until it succeeds; return its result and the errors seen before.
    An error with a code outside ``allowed`` (INTERNAL, say) fails at once."""
    seen: list[str] = []
    deadline = time.monotonic() + within
    while True:
        try:
            return await call(), seen
        except grpc.aio.AioRpcError as error:
            seen.append(outcome(error))
            assert error.code() in allowed, f"while recovering: {seen}"
            assert time.monotonic() < deadline, f"no recovery within {within}s: {seen[-5:]}"
            await asyncio.sleep(0.1)


async def _stored_ids(stub: Stub, sid: str) -> list[str]:
    """Every message id of the session's archives, in order (call after a keep-0 commit)."""
    ids: list[str] = []
    listed = await stub.ListArchives(
        api.ListArchivesRequest(parent=wm_names.session(sid), page_size=1000)
    )
    for archive in listed.archives:
        token = ""
        while True:
            page = await stub.ListMessages(
                api.ListMessagesRequest(parent=archive.name, page_size=1000, page_token=token)
            )
            ids.extend(m.id for m in page.messages)
            token = page.next_page_token
            if not token:
                break
    return ids


async def _serving(channel: grpc.aio.Channel) -> int:
    health = health_pb2_grpc.HealthStub(channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    return int(reply.status)


def _script(path: Path) -> Path:
    """Every model call creates a working memory (each commit here is its session's first)."""
    answer = {"tool_input": creation(session_title="Outage test", current_state="working")}
    path.write_text(json.dumps({"loop": True, "responses": [answer]}), encoding="utf-8")
    return path


# --- PostgreSQL restarted under a running server ---------------------------------------------


async def test_postgres_restart_answers_unavailable_then_recovers(tmp_path: Path) -> None:
    with private_postgres_server() as postgres:
        url = postgres.create_database("wm_outage")
        server = ServerProcess(
            tmp_path,
            WM_DATABASE_URL=url,
            WM_LLM_PROVIDER="scripted",
            WM_SCRIPTED_RESPONSES=str(_script(tmp_path / "model.json")),
            WM_SCRIPTED_DELAY="1.0",  # a Phase 2 is in flight when the database goes
            WM_PHASE2_MAX_ATTEMPTS="10",
            WM_PHASE2_RETRY_BASE_DELAY="0.2",
            WM_PHASE2_LEASE_SECONDS="2",
            WM_HEARTBEAT_SECONDS="1",
            WM_LOG_LEVEL="warning",
        )
        with server.start(60):
            async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
                stub = service_grpc.WorkingMemoryServiceStub(channel)
                await _postgres_outage(stub, channel, server, postgres)


async def _postgres_outage(
    stub: Stub, channel: grpc.aio.Channel, server: ServerProcess, postgres: PostgresServer
) -> None:
    acked: list[str] = [f"kept-{i}" for i in range(5)]
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("kept"),
            messages=[
                b.user(f"Please fix bug {i} in src/app_{i}.py", mid) for i, mid in enumerate(acked)
            ],
            create_session_if_missing=True,
            request_id="kept-batch",
        ),
        timeout=10,
    )
    done = await wait_terminal(stub, (await _commit(stub, "kept", keep=1)).name)
    assert done[-1].stage == pb.COMMIT_STAGE_COMPLETED
    # A second session's Phase 2 waits on its (slow) model when the database goes.
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("inflight"),
            messages=[b.user(f"Please rename module {i}", f"in-{i}") for i in range(3)],
            create_session_if_missing=True,
        ),
        timeout=10,
    )
    inflight, _ = await _until_llm_call(stub, "inflight")

    await asyncio.to_thread(postgres.halt)
    down = grpc.StatusCode.UNAVAILABLE
    during = {
        "GetSession": await _refused(
            stub.GetSession(
                api.GetSessionRequest(name=wm_names.session("kept")), timeout=OUTAGE_DEADLINE
            ),
            down,
            "STORAGE_UNAVAILABLE",
        ),
        "AddMessages": await _refused(
            stub.AddMessages(
                api.AddMessagesRequest(
                    parent=wm_names.session("kept"),
                    messages=[b.user("sent while the database is down", "kept-during")],
                    request_id="kept-during",
                ),
                timeout=OUTAGE_DEADLINE,
            ),
            down,
            "STORAGE_UNAVAILABLE",
        ),
        "CreateCommit": await _refused(
            _commit(stub, "kept", timeout=OUTAGE_DEADLINE), down, "STORAGE_UNAVAILABLE"
        ),
    }
    assert server.proc is not None and server.proc.poll() is None, "the server died"
    await asyncio.to_thread(postgres.resume)
    assert not {k: v for k, v in during.items() if v}, (
        f"during the outage, instead of UNAVAILABLE (STORAGE_UNAVAILABLE): {during}"
    )

    # The client retries what was refused, with the same request_id, until it is accepted.
    reply, errors = await _until_ok(
        lambda: stub.AddMessages(
            api.AddMessagesRequest(
                parent=wm_names.session("kept"),
                messages=[b.user("sent while the database is down", "kept-during")],
                request_id="kept-during",
            ),
            timeout=3,
        ),
        allowed={down},
    )
    assert list(reply.added_message_ids) == ["kept-during"], (reply, errors)
    acked.append("kept-during")

    assert await _serving(channel) == health_pb2.HealthCheckResponse.SERVING
    # The commit whose Phase 2 the outage interrupted ends COMPLETED, its log without gaps.
    events = await wait_terminal(stub, inflight, within=30)
    assert assert_well_formed(events).stage == pb.COMMIT_STAGE_COMPLETED
    # Nothing acknowledged before the outage is lost; a commit after it completes.
    memory = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name=wm_names.working_memory("kept"))
    )
    assert memory.version == 1 and "Outage test" in memory.document
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("after"),
            messages=[b.user("back again", "a-1")],
            create_session_if_missing=True,
        ),
        timeout=10,
    )
    after = await wait_terminal(stub, (await _commit(stub, "after")).name)
    assert assert_well_formed(after).stage == pb.COMMIT_STAGE_COMPLETED
    session = await stub.GetSession(api.GetSessionRequest(name=wm_names.session("kept")))
    assert session.total_message_count == len(acked)
    assert (session.archive_count, session.message_count) == (1, 2)  # kept-4, kept-during
    archived = await _stored_ids(stub, "kept")
    assert archived == acked[:4]
    assert server.proc is not None and server.proc.poll() is None


# --- a full disk under SQLite ----------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs for the server's data folder, unmounted afterwards."""
    if shutil.which("mount") is None or shutil.which("umount") is None:
        missing_prerequisite("a full disk needs a small tmpfs: `mount` is not installed")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        missing_prerequisite(
            f"a full disk needs a small tmpfs (mount as root): {result.stderr.strip()}"
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def _fill(folder: Path) -> Path:
    """Write a filler file until the file system refuses another byte; return it."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as out:
        for size in (1 << 20, 1 << 12, 1 << 9, 1):
            chunk = b"\0" * size
            while True:
                try:
                    out.write(chunk)
                except OSError as error:
                    assert error.errno == errno.ENOSPC, error
                    break
    return filler


def _truncate_wal(db: Path) -> None:
    """Checkpoint the database and empty its write-ahead log, so that the next write must
    take new space: a WAL keeps its size after a checkpoint, and a write that fits into
    that old space would not meet the full disk at all."""
    with sqlite3.connect(db, timeout=10) as conn:
        deadline = time.monotonic() + 10
        while conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] != 0:
            assert time.monotonic() < deadline, "the server never let the checkpoint run"
            time.sleep(0.05)
    conn.close()


async def test_full_disk_answers_resource_exhausted_then_recovers(
    tmp_path: Path, small_disk: Path
) -> None:
    server = ServerProcess(
        tmp_path / "process", WM_DATA_DIR=str(small_disk), WM_LOG_LEVEL="warning"
    )
    with server.start(60):
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            await _full_disk(stub, server, small_disk)


async def _full_disk(stub: Stub, server: ServerProcess, disk: Path) -> None:
    acked = [f"m{i}" for i in range(20)]
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("full"),
            messages=[
                b.user(f"Please fix bug {i} in src/app_{i}.py", m) for i, m in enumerate(acked)
            ],
            create_session_if_missing=True,
        ),
        timeout=10,
    )
    done = await wait_terminal(stub, (await _commit(stub, "full", keep=5)).name)
    assert done[-1].stage == pb.COMMIT_STAGE_COMPLETED
    before = await stub.GetSession(api.GetSessionRequest(name=wm_names.session("full")), timeout=5)

    _truncate_wal(disk / "wm.sqlite3")
    filler = _fill(disk)
    # Large enough that no page cache or preallocation can absorb it (4 x 256 KiB).
    big = api.AddMessagesRequest(
        parent=wm_names.session("full"),
        messages=[b.user(f"big {i} " + "y" * (256 * 1024), f"big-{i}") for i in range(4)],
        request_id="big-batch",
    )
    full, reason = grpc.StatusCode.RESOURCE_EXHAUSTED, "STORAGE_FULL"
    during = {
        "AddMessages (big)": await _refused(stub.AddMessages(big, timeout=10), full, reason),
        "AddMessages (one)": await _refused(
            stub.AddMessages(
                api.AddMessagesRequest(
                    parent=wm_names.session("full"), messages=[b.user("one more", "one")]
                ),
                timeout=10,
            ),
            full,
            reason,
        ),
        "CreateCommit": await _refused(_commit(stub, "full"), full, reason),
    }
    # Nothing half-written: the session reads as before, its counters unchanged.
    still = await stub.GetSession(api.GetSessionRequest(name=wm_names.session("full")), timeout=5)
    assert server.proc is not None and server.proc.poll() is None, "the server died"
    filler.unlink()
    assert not {k: v for k, v in during.items() if v}, (
        f"on a full disk, instead of RESOURCE_EXHAUSTED (STORAGE_FULL): {during}"
    )
    assert still.SerializeToString(deterministic=True) == before.SerializeToString(
        deterministic=True
    )

    reply, _ = await _until_ok(
        lambda: stub.AddMessages(big, timeout=10), allowed={full, grpc.StatusCode.UNAVAILABLE}
    )
    assert list(reply.added_message_ids) == [m.id for m in big.messages]
    acked += [m.id for m in big.messages]
    final = await wait_terminal(stub, (await _commit(stub, "full")).name)
    assert assert_well_formed(final).stage == pb.COMMIT_STAGE_COMPLETED
    # Every acknowledged message is stored exactly once (all archived by the keep-0 commit).
    assert await _stored_ids(stub, "full") == acked
    session = await stub.GetSession(api.GetSessionRequest(name=wm_names.session("full")))
    assert (session.total_message_count, session.message_count) == (len(acked), 0)
    assert (session.pending_tokens, session.live_tokens) == (0, 0)


# --- a foreign lock holder on the SQLite file ------------------------------------------------


class LockHolder:
    """Another process's writer (here: a thread's own connection) holding the write lock."""

    def __init__(self, db: Path, seconds: float) -> None:
        self._db = db
        self._seconds = seconds
        self.holding = threading.Event()
        self.released = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = sqlite3.connect(self._db, isolation_level=None, timeout=10)
        try:
            conn.execute("BEGIN IMMEDIATE")
            self.holding.set()
            time.sleep(self._seconds)
            conn.execute("ROLLBACK")
        finally:
            conn.close()
            self.released.set()

    def __enter__(self) -> LockHolder:
        self._thread.start()
        assert self.holding.wait(10), "could not take the write lock"
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(30)


async def test_foreign_lock_holder_does_not_stall_reads_and_writes_never_hang(
    tmp_path: Path,
) -> None:
    server = ServerProcess(
        tmp_path,
        WM_LLM_PROVIDER="scripted",
        WM_SCRIPTED_RESPONSES=str(_script(tmp_path / "model.json")),
        WM_SCRIPTED_DELAY="60",  # Phase 2 stays running: its watch sends heartbeats
        WM_HEARTBEAT_SECONDS="0.5",
        WM_LOG_LEVEL="warning",
    )
    with server.start(60):
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            await _foreign_lock(stub, channel, tmp_path / "wm.sqlite3")


async def _foreign_lock(stub: Stub, channel: grpc.aio.Channel, db: Path) -> None:
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("locked"),
            messages=[b.user("Please fix src/a.py", "m0")],
            create_session_if_missing=True,
        ),
        timeout=10,
    )
    commit, last = await _until_llm_call(stub, "locked")
    watch = stub.WatchCommit(
        api.WatchCommitRequest(name=commit, after_sequence=last),
        timeout=30,
    )
    health = health_pb2_grpc.HealthStub(channel)
    stalls: list[str] = []
    with LockHolder(db, seconds=3.0) as holder:
        write = asyncio.ensure_future(
            stub.AddMessages(
                api.AddMessagesRequest(
                    parent=wm_names.session("locked"),
                    messages=[b.user("written under a foreign lock", "w1")],
                    request_id="w1",
                ),
                timeout=10,
            )
        )
        # While the lock is held (and the write waits for it), everything else answers.
        while not holder.released.is_set():
            probes: dict[str, Callable[[], Awaitable[object]]] = {
                "GetSession": lambda: stub.GetSession(
                    api.GetSessionRequest(name=wm_names.session("locked")), timeout=1.0
                ),
                "health Check": lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=1.0),
                "WatchCommit heartbeat": lambda: asyncio.wait_for(watch.read(), 1.5),
            }
            for name, probe in probes.items():
                started = time.monotonic()
                try:
                    await probe()
                except (grpc.aio.AioRpcError, TimeoutError) as error:
                    waited = time.monotonic() - started
                    stalls.append(f"{name}: {outcome(error)} after {waited:.1f}s")
            if stalls:
                break
        written = await asyncio.gather(write, return_exceptions=True)
    watch.cancel()
    assert not stalls, f"while another connection held the write lock: {stalls}"
    result = written[0]
    if isinstance(result, grpc.aio.AioRpcError):
        # Refused while the lock was held: retryable, and the retry is stored once.
        assert result.code() == grpc.StatusCode.UNAVAILABLE, outcome(result)
        assert details(result)[0].reason == "STORAGE_UNAVAILABLE", outcome(result)
        result = await stub.AddMessages(
            api.AddMessagesRequest(
                parent=wm_names.session("locked"),
                messages=[b.user("written under a foreign lock", "w1")],
                request_id="w1",
            ),
            timeout=10,
        )
    assert isinstance(result, api.AddMessagesResponse), outcome(result)
    session = await stub.GetSession(
        api.GetSessionRequest(name=wm_names.session("locked")), timeout=5
    )
    assert session.total_message_count == 2
