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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wm_server.errors import ServiceError
from wm_server.storage.unit_of_work import UnitOfWork

Row = tuple[Any, ...]
Params = Mapping[str, Any]
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@functools.cache
def pyformat(sql: str) -> str:
    """``:name`` → ``%(name)s`` (psycopg's style); ``::type`` casts are left alone."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))


class Connection(ABC):
    """One engine connection, as the repositories see it."""

    @abstractmethod
    async def one(self, sql: str, params: Params) -> Row | None: ...

    @abstractmethod
    async def all(self, sql: str, params: Params) -> list[Row]: ...

    @abstractmethod
    async def run(self, sql: str, params: Params) -> int:
        """Execute; return the number of rows changed."""

    @abstractmethod
    async def many(self, sql: str, rows: Sequence[Params]) -> None: ...


@dataclass(frozen=True)
class Dialect:
    """The statement fragments that differ between the engines (and nothing else)."""

    name: str
    lock_row: str  # suffix of a SELECT that serializes writers of one session
    lock_job: str  # suffix of a SELECT that holds a job row until commit
    skip_locked: str  # suffix of the job claim
    now: str  # the database clock, epoch seconds: leases compare against one clock
    commit_order: str  # a stable tie-break for commits created in the same instant
    any_of: str  # "IN <list parameter>", e.g. f"x {any_of.format('ids')}"
    contains: str  # "<column> contains the lowercase literal", with {column} and {param}
    notify: str | None  # tells other replicas that a commit has new events
    lock_key: str | None  # a transaction lock on a string key
    array: Callable[[Sequence[Any]], Any]  # a Python list as the list parameter


class Database(ABC):
    """An engine: opens, migrates, and hands out units of work."""

    dialect: Dialect

    @abstractmethod
    async def open(self) -> None:
        """Connect and apply pending migrations."""

    @abstractmethod
    async def close(self) -> None: ...

    def subscribe_events(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(commit_id)`` when another process stores events of a commit.

        Only an engine shared by several replicas has something to report; with one process
        its own services already wake the streams, so the default does nothing.
        """
        del callback

    @abstractmethod
    def classify(self, error: Exception) -> ServiceError | None:
        """The storage error a driver error stands for, or None for a bug."""

    @abstractmethod
    def _write(self) -> contextlib.AbstractAsyncContextManager[Connection]:
        """A connection inside a write transaction that is begun, not yet committed."""

    @abstractmethod
    def _read(self) -> contextlib.AbstractAsyncContextManager[Connection]:
        """A connection for a few short reads (no transaction needed)."""

    def _scan(self) -> contextlib.AbstractAsyncContextManager[Connection]:
        """A connection for long reads, all from one snapshot where the engine needs it."""
        return self._read()

    @abstractmethod
    async def _commit(self, conn: Connection) -> None: ...

    @abstractmethod
    async def _rollback(self, conn: Connection) -> None: ...

    @contextlib.asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[UnitOfWork]:
        """One write transaction: rolled back unless ``await uow.commit()`` ran."""
        try:
            async with self._write() as conn:
                uow = UnitOfWork(conn, self.dialect, self._commit)
                try:
                    yield uow
                finally:
                    if not uow.committed:
                        with contextlib.suppress(Exception):
                            await self._rollback(conn)
        except Exception as error:
            raise self._translate(error) from error

    @contextlib.asynccontextmanager
    async def reader(self) -> AsyncIterator[UnitOfWork]:
        """Short reads; nothing to commit."""
        try:
            async with self._read() as conn:
                yield UnitOfWork(conn, self.dialect, None)
        except Exception as error:
            raise self._translate(error) from error

    @contextlib.asynccontextmanager
    async def scanner(self) -> AsyncIterator[UnitOfWork]:
        """Long reads (archives, uncovered messages, search) off the writer's path."""
        try:
            async with self._scan() as conn:
                yield UnitOfWork(conn, self.dialect, None)
        except Exception as error:
            raise self._translate(error) from error

    def _translate(self, error: Exception) -> Exception:
        if isinstance(error, ServiceError):
            return error
        return self.classify(error) or error

    async def _migrate(
        self, conn: Connection, migrations: Sequence[tuple[int, str]], log: Callable[[int], None]
    ) -> None:
        """Apply the versions not applied yet, in order, on a connection in a transaction."""
        await conn.run(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)", {}
        )
        applied = {int(v) for (v,) in await conn.all("SELECT version FROM schema_migrations", {})}
        for version, sql in migrations:
            if version in applied:
                continue
            for statement in sql.split(";"):
                if statement.strip():
                    await conn.run(statement, {})
            await conn.run("INSERT INTO schema_migrations VALUES (:v)", {"v": version})
            log(version)
