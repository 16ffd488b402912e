"""What an engine provides: connections that run named-parameter SQL, the few statement
fragments that differ between SQLite and PostgreSQL, and three kinds of unit of work.

Statements are written once, with ``:name`` parameters; an engine's connection renders them
for its driver. What really differs lives in ``Dialect``: how a session row is locked, the
``SKIP LOCKED`` job claim, the clock, membership in a list, NOTIFY and the per-request lock.
Driver errors are classified once per engine, at the unit of work, into the two storage
errors the API maps (UNAVAILABLE, RESOURCE_EXHAUSTED).
"""

from __future__ import annotations

import contextlib
import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from enum import Enum

from wm_server.errors import ServiceError
from wm_server.storage.connection import Connection, Dialect
from wm_server.storage.unit_of_work import Repositories, UnitOfWork

# A ``:name`` parameter (not a ``::type`` cast).
NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@functools.cache
def pyformat(sql: str) -> str:
    """``:name`` → ``%(name)s`` (psycopg's style); ``::type`` casts are left alone."""
    return NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))


@functools.cache
def positional(sql: str, mark: str) -> str:
    """``:name`` → ``mark`` (``?`` or ``%s``) for ``many``, whose rows are tuples in the order
    the names appear: binding a tuple costs a third less than a mapping per row."""
    return NAMED.sub(mark, sql.replace("%", "%%") if mark == "%s" else sql)


class Kind(Enum):
    WRITE = "write"
    STATEMENT = "statement"  # a write of one statement, atomic by itself (``statement``)
    READ = "read"
    SCAN = "scan"


class Database(ABC):
    """An engine: opens, migrates, and hands out units of work."""

    dialect: Dialect

    @abstractmethod
    async def open(self) -> None:
        """Connect and apply pending migrations."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def erase(self) -> None:
        """After deletions: make deleted data unreadable in the engine's files too, as far as
        the engine allows a running service to."""

    def subscribe_events(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(commit_id)`` when another process stores events of a commit.

        Only an engine shared by several replicas has something to report. This process's
        own stored events are not reported: the unit of work that stored them hands them to
        its streams (``EventLog``), so the default does nothing.
        """
        del callback

    @abstractmethod
    def classify(self, error: Exception) -> ServiceError | None:
        """The storage error a driver error stands for, or None for a bug."""

    # What an engine implements: hand out a connection of each kind and take it back.
    @abstractmethod
    async def _acquire(self, kind: Kind, pipelined: bool = False) -> Connection:
        """A connection; for WRITE, inside a begun transaction, unless ``pipelined``: then
        ``Connection.pipeline`` begins it."""

    @abstractmethod
    async def _release(self, kind: Kind, conn: Connection) -> None: ...

    @abstractmethod
    async def _commit(self, conn: Connection) -> None: ...

    @abstractmethod
    async def _rollback(self, conn: Connection) -> None: ...

    def unit_of_work(self, *, pipelined: bool = False) -> _Unit:
        """One write transaction: rolled back unless ``await uow.commit()`` ran. ``pipelined``:
        writes whose results nobody reads travel with the next read (``Connection.pipeline``),
        for a unit of many writes between few reads."""
        return _Unit(self, Kind.WRITE, pipelined)

    def statement(self) -> _Unit:
        """A write of one data-modifying statement, sent by ``UnitOfWork.commit_with``
        (and nothing before it): atomic by itself, so an engine whose statements are round
        trips (``Dialect.round_trips``) runs it in autocommit, without BEGIN and COMMIT: one
        round trip, where a pipelined unit also sends those two. Elsewhere a
        ``unit_of_work``."""
        return _Unit(self, Kind.STATEMENT) if self.dialect.round_trips else self.unit_of_work()

    def reader(self) -> _Unit:
        """Short reads; nothing to commit."""
        return _Unit(self, Kind.READ)

    def scanner(self) -> _Unit:
        """Long reads (archives, uncovered messages, search) off the writer's path, from one
        snapshot where the engine needs it."""
        return _Unit(self, Kind.SCAN)

    def _repositories(self, conn: Connection) -> Repositories:
        bound = conn.repositories
        if not isinstance(bound, Repositories):
            bound = conn.repositories = Repositories(conn, self.dialect)
        return bound

    def _translate(self, error: Exception) -> Exception:
        if isinstance(error, ServiceError):
            return error
        return self.classify(error) or error

    async def _migrate(
        self,
        conn: Connection,
        migrations: Sequence[tuple[int, str | tuple[str, ...]]],
        log: Callable[[int], None],
    ) -> None:
        """Apply the versions not applied yet, in order, on a connection in a transaction."""
        await conn.run(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)", {}
        )
        applied = {int(v) for (v,) in await conn.all("SELECT version FROM schema_migrations", {})}
        for version, sql in migrations:
            if version in applied:
                continue
            for statement in migration_statements(sql):
                await conn.run(statement, {})
            await conn.run("INSERT INTO schema_migrations VALUES (:v)", {"v": version})
            log(version)


def migration_statements(sql: str | tuple[str, ...]) -> list[str]:
    """A migration's statements: a script is split on ";"; a statement with a ";" of its own
    (a trigger's body) comes in a tuple."""
    return [s for s in (sql.split(";") if isinstance(sql, str) else sql) if s.strip()]


_WRITES = (Kind.WRITE, Kind.STATEMENT)


class _Unit:
    """``async with database.unit_of_work() as uow``: a plain class rather than a generator
    context manager, because AddMessages pays for every layer on its hot path."""

    __slots__ = ("_conn", "_db", "_kind", "_pipelined", "_uow")

    def __init__(self, db: Database, kind: Kind, pipelined: bool = False) -> None:
        self._db = db
        self._kind = kind
        self._pipelined = pipelined

    async def __aenter__(self) -> UnitOfWork:
        try:
            conn = await self._db._acquire(self._kind, self._pipelined)
        except Exception as error:
            raise self._db._translate(error) from error
        self._conn = conn
        if self._pipelined:
            try:
                await conn.pipeline()
            except BaseException as error:  # a cancellation too: the connection goes back
                await self._db._release(self._kind, conn)
                if isinstance(error, Exception):
                    raise self._db._translate(error) from error
                raise
        commit = self._db._commit if self._kind in _WRITES else None
        self._uow = UnitOfWork(conn, self._db._repositories(conn), commit)
        return self._uow

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        try:
            if self._kind in _WRITES and not self._uow.committed:
                with contextlib.suppress(Exception):
                    await self._db._rollback(self._conn)
        finally:
            await self._db._release(self._kind, self._conn)
        if isinstance(exc, Exception):
            translated = self._db._translate(exc)
            if translated is not exc:
                raise translated from exc
