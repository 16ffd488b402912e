"""A throwaway PostgreSQL server for the tests, built from the binaries on this machine.

Why not a container or a shared server: the suite must run offline on a plain machine and
leave nothing behind. ``initdb`` and ``pg_ctl`` create a cluster in a temporary folder that
listens on a free loopback port (plus a unix socket in that folder) with trust
authentication, tuned for speed (no fsync: nothing here must survive a power cut), and stop
it at the end of the test session.

A test run that is killed (SIGKILL, a CI timeout) cannot stop its clusters: ``pg_ctl`` starts
each server as a daemon that outlives the run. So every cluster folder records its owner (the
pytest process and its start time, since a pid alone may be reused), and the next run's start
(``remove_orphans``, called from tests/conftest.py) stops the servers and removes the folders
whose owner is gone. Clusters of live runs, including other checkouts' runs on this machine,
are left alone.

Without the binaries the tests that need them are skipped with a message saying how to
install them, except under ``CI=true`` where a missing prerequisite is a failure.

``initdb`` refuses to run as root, so as root the cluster belongs to the ``postgres`` system
user (created by the Debian/Ubuntu package) and both tools run through ``runuser``.

A test's database (``postgres_url``) comes already migrated, copied from a template database
that ``PostgresDatabase.open`` migrated once per cluster: the migrations of every test's
database cost about 0.16 CPU s (PostgreSQL's and the test's), 205 databases a run. A test of
the migrations themselves asks for an empty one (``empty_postgres_url``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import glob
import itertools
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found: install them with "
    "`apt-get install postgresql` (Debian/Ubuntu) or put their folder on PATH"
)


def missing_prerequisite(reason: str) -> None:
    """Skip the test, or fail it under CI=true, where nothing may be silently left out."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: a missing prerequisite is a failure)", pytrace=False)
    pytest.skip(reason)


def find_bindir() -> Path | None:
    """The folder holding initdb and pg_ctl: pg_config, then the Debian layout, then PATH."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(out.stdout.strip()))

    def version(path: str) -> float:
        try:
            return float(Path(path).parent.name)
        except ValueError:
            return 0.0

    for found in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        candidates.append(Path(found))
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(os.path.realpath(initdb)).parent)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


PREFIX = "wm-pg-"
OWNER_FILE = "owner.json"
# A folder without an owner record (made before the record existed) is removed only when no
# server runs in it and nobody has touched it for this long: until then it may be a cluster
# still being created.
LEGACY_AGE_SECONDS = 3600.0


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux ``/proc``), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_alive(record: dict[str, object]) -> bool:
    pid = record.get("pid")
    if not isinstance(pid, int) or not _alive(pid):
        return False
    started = record.get("start")
    return started is None or _process_start(pid) in (None, started)


def _postmaster(data: Path) -> int | None:
    """The pid of the server running on ``data``, checked against the process's working
    folder (the postmaster runs in its data folder), so a reused pid is never signalled."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except (OSError, ValueError):
        return None
    return pid if Path(cwd) == data.resolve() else None


def _stop_postmaster(pid: int, timeout: float = 10.0) -> None:
    """Immediate shutdown (SIGQUIT: the server's children exit, nothing is flushed: the
    cluster is thrown away), then SIGKILL if it is still there."""
    for sig in (signal.SIGQUIT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _alive(pid):
            return


def remove_orphans(tmp: Path | None = None) -> list[Path]:
    """Stop and remove the test clusters left by runs that were killed; returns their folders.

    A folder is an orphan when the process named in its owner record is gone (or its pid now
    belongs to a later process). A folder without a record is removed only when no server
    runs in it and it is older than ``LEGACY_AGE_SECONDS``."""
    removed: list[Path] = []
    for base in sorted(Path(tmp or tempfile.gettempdir()).glob(f"{PREFIX}*")):
        if not base.is_dir():
            continue
        data = base / "data"
        try:
            record = json.loads((base / OWNER_FILE).read_text())
        except FileNotFoundError:
            record = None
        except (OSError, ValueError):
            record = {}  # a record cut short by the kill: its owner died writing it
        if record is not None and _owner_alive(record):
            continue
        postmaster = _postmaster(data)
        if record is None:
            try:
                age = time.time() - base.stat().st_mtime
            except OSError:
                continue
            if postmaster is not None or age < LEGACY_AGE_SECONDS:
                continue
        if postmaster is not None:
            _stop_postmaster(postmaster)
        shutil.rmtree(base, ignore_errors=True)
        removed.append(base)
    return removed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder, reachable on 127.0.0.1:<port>."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = 0
        self._owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self._owner = pwd.getpwnam("postgres")
            except KeyError:
                self._owner = pwd.getpwnam("nobody")
        self.base = Path(tempfile.mkdtemp(prefix=PREFIX))
        owner = {"pid": os.getpid(), "start": _process_start(os.getpid())}
        partial = self.base / f"{OWNER_FILE}.partial"  # renamed whole: never read half-written
        partial.write_text(json.dumps(owner))
        partial.replace(self.base / OWNER_FILE)
        if self._owner is not None:
            os.chown(self.base, self._owner.pw_uid, self._owner.pw_gid)
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self._names = itertools.count(1)
        self._template: str | None = None  # the migrated database (``create_database``)

    def _run(self, *args: str, timeout: float = 120.0) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._owner is not None:
            command = ["runuser", "-u", self._owner.pw_name, "--", *command]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=self.base
        )
        if result.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(command)} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}\n{log}"
            )

    def start(self) -> PostgresServer:
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
            "-E", "UTF8", "--no-locale", "--no-sync",
        )  # fmt: skip
        last_error: Exception | None = None
        for _ in range(5):  # the free port may be taken between the probe and the bind
            self.port = _free_port()
            try:
                self._pg_ctl_start()
                break
            except RuntimeError as error:
                last_error = error
        else:
            raise RuntimeError(f"PostgreSQL did not start: {last_error}")
        self._wait_ready()
        return self

    def _pg_ctl_start(self) -> None:
        options = " ".join(
            [
                "-c listen_addresses=127.0.0.1",
                f"-k {self.base}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=300",
                "-c shared_buffers=64MB",
            ]
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
            "-o", f"-p {self.port} {options}", "start",
        )  # fmt: skip

    def halt(self) -> None:
        """Stop the cluster as an operator's restart does (``pg_ctl stop -m fast``: open
        connections are cut, transactions in flight roll back) and keep its files."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", timeout=60)

    def resume(self) -> None:
        """Start a halted cluster again on the same port, so clients reconnect to the same URL."""
        self._pg_ctl_start()
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", timeout=60)
        shutil.rmtree(self.base, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "wm", *, migrated: bool = False) -> str:
        """A new database, empty or (``migrated``) at this checkout's schema; its URL."""
        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        template = f' TEMPLATE "{self._migrated()}"' if migrated else ""
        deadline = time.monotonic() + 10
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            while True:
                try:
                    conn.execute(f'CREATE DATABASE "{name}"{template}')
                    return self.url(name)
                except psycopg.errors.ObjectInUse:  # the template's last backend still exits
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

    def _migrated(self) -> str:
        """The template: a database ``PostgresDatabase.open`` migrated (on a thread of its
        own, for the caller may be inside an event loop), closed again before it is used."""
        if self._template is None:
            from wm_server.storage.postgres import PostgresDatabase

            url = self.create_database("wm_template")
            database = PostgresDatabase(url, min_connections=1)

            async def migrate() -> None:
                await database.open()
                await database.close()

            with concurrent.futures.ThreadPoolExecutor(1) as thread:
                thread.submit(asyncio.run, migrate()).result()
            self._template = url.rsplit("/", 1)[-1]
        return self._template

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _required_bindir() -> Path:
    """The binaries' folder; without them (or runuser, as root) the test is skipped/failed."""
    bindir = find_bindir()
    if bindir is None:
        missing_prerequisite(INSTALL_HINT)
        raise AssertionError("unreachable")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        missing_prerequisite("as root, starting PostgreSQL needs `runuser` (util-linux)")
    return bindir


@contextlib.contextmanager
def private_postgres_server() -> Iterator[PostgresServer]:
    """A cluster of the caller's own, for a test that stops and starts it: the shared one
    must stay up for everyone else. Skipped (failed under CI=true) without the binaries."""
    bindir = _required_bindir()
    server = PostgresServer(bindir)
    try:
        yield server.start()
    finally:
        server.stop()


# Test modules and conftests import the fixture below, which gives each importer its own
# session-scoped instance; they all share this one server, stopped when the last one ends.
_shared: PostgresServer | None = None
_users = 0


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One throwaway server for the whole test session (skipped or failed when missing)."""
    global _shared, _users
    if _shared is None:
        server = PostgresServer(_required_bindir())
        try:
            server.start()
        except BaseException:
            server.stop()
            raise
        _shared = server
    _users += 1
    try:
        yield _shared
    finally:
        _users -= 1
        if _users == 0:
            _shared.stop()
            _shared = None


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database at this checkout's schema for one test, dropped afterwards."""
    url = postgres_server.create_database(migrated=True)
    try:
        yield url
    finally:
        postgres_server.drop_database(url)


@pytest.fixture
def empty_postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database for one test (of the migrations), dropped afterwards."""
    url = postgres_server.create_database()
    try:
        yield url
    finally:
        postgres_server.drop_database(url)
