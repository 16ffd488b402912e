"""One transaction and the repositories bound to it (cosmicpython's unit of work).

The services write every use case inside ``async with database.unit_of_work() as uow: …;
await uow.commit()``; leaving the block without committing rolls everything back, so a
failure anywhere (a lost lease, a full disk, a bug) leaves nothing half-written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from wm_server.storage.archives import ArchiveRepository
from wm_server.storage.commits import CommitRepository, EventRepository
from wm_server.storage.jobs import JobRepository
from wm_server.storage.lexical_rows import LexicalRowRepository
from wm_server.storage.memories import MemoryRepository
from wm_server.storage.memory_lexical_rows import MemoryIndexRowRepository
from wm_server.storage.memory_lifecycle import LifecycleRepository
from wm_server.storage.messages import MessageRepository, ToolCallRepository
from wm_server.storage.requests import RequestRepository, SecretRepository
from wm_server.storage.sessions import SessionRepository
from wm_server.storage.tool_outputs import ToolOutputRepository
from wm_server.storage.vectors import VectorRepository
from wm_server.storage.working_memories import PendingItemRepository, WorkingMemoryRepository

if TYPE_CHECKING:
    from wm_server.storage.connection import Connection, Dialect
    from wm_server.storage.statements import Read, Write

A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")
E = TypeVar("E")


class Repositories:
    """Every repository over one connection; built once per connection (they hold no state
    but it), so a unit of work costs no allocations on the hot path."""

    def __init__(self, conn: Connection, dialect: Dialect) -> None:
        self.sessions = SessionRepository(conn, dialect)
        self.messages = MessageRepository(conn, dialect)
        self.tool_calls = ToolCallRepository(conn, dialect)
        self.tool_outputs = ToolOutputRepository(conn, dialect)
        self.commits = CommitRepository(conn, dialect)
        self.archives = ArchiveRepository(conn, dialect)
        self.events = EventRepository(conn, dialect)
        self.jobs = JobRepository(conn, dialect)
        self.working_memories = WorkingMemoryRepository(conn, dialect)
        self.pending_items = PendingItemRepository(conn, dialect)
        self.requests = RequestRepository(conn, dialect)
        self.secrets = SecretRepository(conn, dialect)
        self.memories = MemoryRepository(conn, dialect)
        self.memory_lifecycle = LifecycleRepository(conn, dialect)
        self.vectors = VectorRepository(conn, dialect)
        self.lexical = LexicalRowRepository(conn, dialect)
        self.memory_rows = MemoryIndexRowRepository(conn, dialect)


class UnitOfWork:
    def __init__(
        self,
        conn: Connection,
        repositories: Repositories,
        commit: Callable[[Connection], Awaitable[None]] | None,
    ) -> None:
        self._conn = conn
        self._commit = commit
        self._committed_calls: list[Callable[[], None]] | None = None  # most units: none
        self.committed = False
        self.sessions = repositories.sessions
        self.messages = repositories.messages
        self.tool_calls = repositories.tool_calls
        self.tool_outputs = repositories.tool_outputs
        self.commits = repositories.commits
        self.archives = repositories.archives
        self.events = repositories.events
        self.jobs = repositories.jobs
        self.working_memories = repositories.working_memories
        self.pending_items = repositories.pending_items
        self.requests = repositories.requests
        self.secrets = repositories.secrets
        self.memories = repositories.memories
        self.memory_lifecycle = repositories.memory_lifecycle
        self.vectors = repositories.vectors
        self.lexical = repositories.lexical
        self.memory_rows = repositories.memory_rows

    @property
    def read_only(self) -> bool:
        """Nothing written here can be rolled back: what it reads is committed (the search's
        in-process indexes keep only such reads)."""
        return self._commit is None

    async def write(self, *writes: Write) -> None:
        """Run data-modifying statements that do not read each other's rows: the engine may
        send them as one statement (``Connection.chain``). A batch (``Write.rows``) last runs
        after the others, on its own."""
        await self._conn.write(writes)

    @overload
    async def read(self, a: Read[A], b: Read[B], /) -> tuple[A, B]: ...

    @overload
    async def read(self, a: Read[A], b: Read[B], c: Read[C], /) -> tuple[A, B, C]: ...

    @overload
    async def read(
        self, a: Read[A], b: Read[B], c: Read[C], d: Read[D], /
    ) -> tuple[A, B, C, D]: ...

    @overload
    async def read(
        self, a: Read[A], b: Read[B], c: Read[C], d: Read[D], e: Read[E], /
    ) -> tuple[A, B, C, D, E]: ...

    async def read(self, *reads: Read[Any]) -> tuple[Any, ...]:
        """The answers of reads that do not depend on each other, in order: sent together
        (``Connection.fetch``): one round trip on PostgreSQL, one thread hop for a SQLite
        scan, where each read on its own costs one."""
        rows = await self._conn.fetch(reads)
        return tuple(read.answer(found) for read, found in zip(reads, rows, strict=True))

    async def read_each(self, reads: Sequence[Read[A]]) -> list[A]:
        """``read`` for any number of reads of one kind."""
        rows = await self._conn.fetch(reads)
        return [read.answer(found) for read, found in zip(reads, rows, strict=True)]

    async def commit_with(self, write: Write) -> int:
        """Run ``write`` last and commit: the rows it changed. In a pipelined unit on
        PostgreSQL the write, the COMMIT (and a queued BEGIN) go in one round trip, so
        ``write`` must be right to commit whatever it changed, nothing included."""
        changed = await self._conn.last_write(write)
        await self.commit()
        return changed()

    def on_commit(self, call: Callable[[], None]) -> None:
        """Call ``call`` once this unit has committed, never if it does not: news of what it
        wrote for others in this process (``EventLog`` hands the stored events to the
        streams), which must not run ahead of the COMMIT."""
        if self._committed_calls is None:
            self._committed_calls = []
        self._committed_calls.append(call)

    async def commit(self) -> None:
        if self._commit is None:
            raise RuntimeError("a read-only unit of work has nothing to commit")
        await self._commit(self._conn)
        self.committed = True
        for call in self._committed_calls or ():
            call()
