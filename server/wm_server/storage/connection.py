"""What a repository talks to: a connection that runs named-parameter SQL, and the few
statement fragments that differ between SQLite and PostgreSQL (``Dialect``).

Its own module, imported by every repository and by the engines, so that the repositories
do not import the ``Database`` that builds them (``database`` → ``unit_of_work`` →
the repositories → ``database`` was a cycle).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wm_server.storage.statements import Params, Read, Row, Write
from wm_server.storage.text_index import TextIndex


class Connection(ABC):
    """One engine connection, as the repositories see it."""

    # The repositories bound to this connection (``storage.unit_of_work.Repositories``), built
    # once by the ``Database`` that hands it out; typed loosely so that this module, which
    # every repository imports, imports none of them.
    repositories: object | None = None

    @abstractmethod
    async def one(self, sql: str, params: Params) -> Row | None: ...

    @abstractmethod
    async def all(self, sql: str, params: Params) -> list[Row]: ...

    @abstractmethod
    async def run(self, sql: str, params: Params) -> int:
        """Execute; return the number of rows changed."""

    @abstractmethod
    async def many(self, sql: str, rows: Sequence[Row]) -> None:
        """Execute once per row; each row holds the values of the names in order."""

    async def last_write(self, write: Write) -> Callable[[], int]:
        """Run ``write``, the unit's last statement before its commit: the number of rows it
        changed, to read once the unit has committed (``UnitOfWork.commit_with``). An engine
        with round trips may send it with the COMMIT."""
        changed = await self.run(write.sql, write.params or {})
        return lambda: changed

    async def pipeline(self) -> None:
        """Until the unit of work ends, the engine may hold back the statements whose results
        nobody reads (``write``, ``many``) and send them with the next statement that needs
        an answer, in one round trip; their errors then surface there, or at the commit.
        Nothing to do where a statement is a call into a library rather than a round trip."""
        return None

    async def fetch(self, reads: Sequence[Read[Any]]) -> list[list[Row]]:
        """The rows of each of ``reads``, in order; none of them depends on another's answer,
        so an engine may send them all before it waits for the first (``UnitOfWork.read``)."""
        return [await self.all(read.sql, read.params) for read in reads]

    async def write(self, writes: Sequence[Write]) -> None:
        """Run data-modifying statements that do not read each other's rows
        (``UnitOfWork.write``): in one ``chain``, a batch (``Write.rows``) last on its own."""
        *first, last = writes
        if last.rows is None:
            await self.chain(first, last)
            return
        if first:
            await self.chain(first[:-1], first[-1])
        if last.rows:
            await self.many(last.sql, last.rows)

    async def chain(self, writes: Sequence[Write], last: Write) -> Row | None:
        """Run ``writes``, then ``last``; return ``last``'s first row.

        None of them may read what another one of them writes: an engine is free to send
        them all as one statement, over one snapshot (PostgreSQL does, which saves a round
        trip and a statement's client work per write on the ingest path).
        """
        for write in writes:
            if write.rows is not None:
                await self.many(write.sql, write.rows)
            else:
                await self.run(write.sql, write.params or {})
        return await self.one(last.sql, last.params or {})


@dataclass(frozen=True)
class Dialect:
    """The statement fragments that differ between the engines (and nothing else)."""

    name: str
    lock_row: str  # suffix of a SELECT that serializes writers of one session
    lock_job: str  # suffix of a SELECT that holds the job row ``j`` until commit
    skip_locked: str  # suffix of the job claim
    now: str  # the database clock, epoch seconds: leases compare against one clock
    commit_order: str  # a stable tie-break for commits created in the same instant
    # Membership in a list of values: (the "IN …" fragment, its parameters), for a name.
    in_list: Callable[[str, Sequence[Any]], tuple[str, dict[str, Any]]]
    contains: str  # "<column> contains the lowercase literal", with {column} and {param}
    non_ascii: str  # "<column> has a character beyond ASCII", with {column}
    lock_key: str | None  # a transaction lock on a string key
    # Each statement is a round trip to a server (fold reads into writes, writes together),
    # rather than a call into an embedded library (where RETURNING costs more than a read).
    round_trips: bool
    # The full-text index (FTS5 or tsvector) and the searchable text of a message row's
    # parts (with {column}), for ranked search over memories and archived messages.
    text_index: TextIndex
    message_text: str
