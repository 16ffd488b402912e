"""What the storage suite shares: the engines, the services over them, and the record of
which repository and engine methods ran (checked at the end of the session by
support.port_coverage, across xdist workers)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg import pq

from support.port_coverage import EXERCISED, register_expected
from support.sqlite_template import migrated_sqlite
from wm_server.api.commit_event_encoder import encode_event
from wm_server.phase2.store import JobStore
from wm_server.services.archive_search import ArchiveSearchService
from wm_server.services.archives import ArchiveService
from wm_server.services.commit_event_log import EventLog
from wm_server.services.commit_wakeups import EventBus
from wm_server.services.commits import CommitService
from wm_server.services.context_assembly import ContextService
from wm_server.services.maintenance import Maintenance
from wm_server.services.memories import MemoryService
from wm_server.services.paging import PageTokens
from wm_server.services.recall import HybridRecall
from wm_server.services.sessions import SessionService
from wm_server.services.tool_outputs import ToolOutputService
from wm_server.services.working_memory import WorkingMemoryService
from wm_server.storage import unit_of_work
from wm_server.storage.database import Database
from wm_server.storage.postgres import PostgresDatabase
from wm_server.storage.repository import Repository
from wm_server.storage.sqlite import SqliteDatabase

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
# Every repository a unit of work binds (importing unit_of_work imports each one's module),
# but the memory lifecycle's, whose statements its own suites drive through the services
# (tests/integration/test_memory_lifecycle.py, tests/unit/services).
assert unit_of_work.Repositories
REPOSITORIES = sorted(
    (cls for cls in Repository.__subclasses__() if cls.__name__ != "LifecycleRepository"),
    key=lambda cls: cls.__name__,
)
ENGINE_METHODS = (
    "open", "close", "unit_of_work", "statement", "reader", "scanner", "subscribe_events",
)  # fmt: skip


def public_methods() -> set[str]:
    names = {f"Database.{m}" for m in ENGINE_METHODS}
    for cls in REPOSITORIES:
        names.update(
            f"{cls.__name__}.{name}"
            for name, fn in vars(cls).items()
            if inspect.iscoroutinefunction(fn) and not name.startswith("_")
        )
    return names


def _record_repository(cls: type, name: str, fn: Callable[..., Awaitable[Any]]) -> None:
    @functools.wraps(fn)
    async def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        EXERCISED[self._dialect.name].add(f"{cls.__name__}.{name}")
        return await fn(self, *args, **kwargs)

    setattr(cls, name, recorded)


register_expected(public_methods)

for _cls in REPOSITORIES:
    for _name, _fn in list(vars(_cls).items()):
        if inspect.iscoroutinefunction(_fn) and not _name.startswith("_"):
            _record_repository(_cls, _name, _fn)


def _record_engine(cls: type[Database], name: str) -> None:
    original = vars(cls)[name]

    @functools.wraps(original)
    def recorded(self: Database, *args: Any, **kwargs: Any) -> Any:
        EXERCISED[self.dialect.name].add(f"Database.{name}")
        return original(self, *args, **kwargs)

    setattr(cls, name, recorded)


for _engine in (Database, SqliteDatabase, PostgresDatabase):
    for _method in ENGINE_METHODS:
        if _method in vars(_engine):
            _record_engine(_engine, _method)


@dataclass
class Services:
    database: Database
    bus: EventBus
    log: EventLog
    sessions: SessionService
    commits: CommitService
    jobs: JobStore
    memory: WorkingMemoryService
    archives: ArchiveService
    context: ContextService
    archive_search: ArchiveSearchService
    maintenance: Maintenance
    tool_outputs: ToolOutputService
    memories: MemoryService


def build_services(
    database: Database, *, retention: float = 86_400.0, tokens: PageTokens | None = None
) -> Services:
    """The services as the composition root wires them (one key, one recall, one event log),
    over ``database``; without ``tokens``, a key of this test process, chosen explicitly."""
    tokens = PageTokens.random() if tokens is None else tokens
    bus = EventBus()
    log = EventLog(encode_event, bus)
    recall = HybridRecall(None)
    maintenance = Maintenance(database, retention_seconds=retention)
    database.subscribe_events(bus.publish)
    memories = MemoryService(database, tokens=tokens, recall=recall)
    return Services(
        database=database,
        bus=bus,
        log=log,
        sessions=SessionService(database, log=log, on_deleted=maintenance.wake, tokens=tokens),
        commits=CommitService(database, bus, log, heartbeat_seconds=1.0, tokens=tokens),
        jobs=JobStore(database, log),
        memory=WorkingMemoryService(database),
        archives=ArchiveService(database, tokens=tokens),
        context=ContextService(database, memories=memories, recall=recall),
        archive_search=ArchiveSearchService(database, recall),
        maintenance=maintenance,
        tool_outputs=ToolOutputService(database, tokens=tokens),
        memories=memories,
    )


def make_database(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path, *, empty: bool = False
) -> Database:
    """``engine``'s database for one test: at this checkout's schema, already before it is
    opened (a copy of a migrated template: ``postgres_url``, ``migrated_sqlite``), unless
    ``empty`` (a test of the migrations: ``empty_postgres_url``, a new SQLite file)."""
    if engine == "sqlite":
        path = tmp_path / "wm.sqlite3"
        return SqliteDatabase(path if empty else migrated_sqlite(path), lock_timeout=0.5)
    if engine == "postgresql":
        url = request.getfixturevalue("empty_postgres_url" if empty else "postgres_url")
        return PostgresDatabase(url)
    raise ValueError(engine)  # pragma: no cover - engines are added to ENGINES with a factory


@contextlib.contextmanager
def frontend_messages(conn: Any) -> Iterator[list[str]]:
    """The messages libpq sends on ``conn`` (a psycopg connection) inside the block, each as
    its trace names it ("Sync 4", "Execute 9 ..."): libpq's own trace, read when the block
    ends, so the list is filled then. A Sync closes a round trip."""
    sent: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "trace"
        with log.open("w") as out:
            conn.pgconn.trace(out.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            try:
                yield sent
            finally:
                conn.pgconn.untrace()
        fields = [line.split("\t") for line in log.read_text().splitlines()]
    sent.extend(f[2] for f in fields if f[0] == "F")
