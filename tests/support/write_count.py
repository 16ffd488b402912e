"""Counting the write transactions a database commits, and which code committed them.

The count is taken at the engine (``Database._commit``: every unit of work that commits
passes there, on both engines), so nothing of the code under test changes. Each commit is
attributed to the innermost frame of ``wm_server.phase2`` on the stack (async code runs its
whole await chain on the stack), or "other" (a background loop, an RPC), so a test can count
what one Phase 2 job writes while the server's other loops go on.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

from wm_server.storage.database import Connection, Database

PHASE2 = "wm_server.phase2"


@dataclass
class Writes:
    """The committed write transactions, in order, each as "module.function" of the Phase 2
    code that committed it (or "other")."""

    by: list[str] = field(default_factory=list)

    @property
    def phase2(self) -> list[str]:
        return [name for name in self.by if name != "other"]


def _committer(frame: FrameType | None) -> str:
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if isinstance(module, str) and module.startswith(PHASE2):
            return f"{module}.{frame.f_code.co_name}"
        frame = frame.f_back
    return "other"


@contextmanager
def counting_writes(database: Database) -> Iterator[Writes]:
    """Record every write transaction ``database`` commits inside the block."""
    writes = Writes()
    original = database._commit

    async def counted(conn: Connection) -> None:
        # Recorded before the commit: once it is committed, what it wrote (a terminal event)
        # can reach a client before this coroutine runs again; a commit that fails is taken
        # back out.
        writes.by.append(_committer(sys._getframe(1)))
        try:
            await original(conn)
        except BaseException:
            writes.by.pop()
            raise

    database._commit = counted  # type: ignore[method-assign]
    try:
        yield writes
    finally:
        del database._commit  # the class's method again
