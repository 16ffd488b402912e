"""WAL checkpoints on a thread of their own, never on the event loop.

In WAL mode every commit appends pages to the ``-wal`` file, and a checkpoint copies them back
into the database file and syncs it. SQLite's default runs that checkpoint inside the COMMIT
that crosses 1,000 pages: on the writer's connection, which here is the event loop. That costs
every write its share of the copying (~30-45 us per one-message commit, ~250 us per 100-message
batch, measured) and, once per ~4 MB, one commit pays the whole copy and an fsync: milliseconds
on a fast disk, more on a slow one, during which no RPC is served.

So the writer runs with ``wal_autocheckpoint=0`` and this thread, with its own connection,
checkpoints at most every ``period`` seconds while commits come: PASSIVE, which takes no lock a
writer needs. Under steady writes a passive checkpoint never catches up with the log's end, and
the log would only grow; when it passes ``truncate_bytes`` the thread runs TRUNCATE instead,
which holds the write lock while it copies the little that is left and empties the file (the
loop's writer waits for it asynchronously, as for any other writer). Its busy timeout is short:
when a reader's snapshot is in the way it gives up and tries again in the next period.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import structlog

log = structlog.get_logger("wm_server.storage.sqlite")

PERIOD_SECONDS = 0.2
TRUNCATE_BYTES = 64 * 1024 * 1024
BUSY_TIMEOUT_MS = 100


class Checkpointer:
    """Checkpoints the WAL of one database file from a daemon thread; ``written()`` after each
    commit tells it there is something to do."""

    def __init__(
        self,
        path: Path,
        *,
        period: float = PERIOD_SECONDS,
        truncate_bytes: int = TRUNCATE_BYTES,
    ) -> None:
        self._path = path
        self._wal = Path(f"{path}-wal")
        self._period = period
        self._truncate_bytes = truncate_bytes
        self._pending = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wm-sqlite-checkpoint", daemon=True)
        self._conn: sqlite3.Connection | None = None
        self._truncate_next = False  # erase(): empty the log at the next checkpoint
        self.checkpoints = 0  # completed, of either mode (read by tests)
        self.truncations = 0

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        """Open the thread's connection here, so that a file it cannot open fails the
        database's open, not a thread nobody watches; then start the thread."""
        self._conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._thread.start()

    def written(self) -> None:
        """A commit added pages to the log (cheap: a flag already set is left alone)."""
        if not self._pending.is_set():
            self._pending.set()

    def truncate_soon(self) -> None:
        """Checkpoint and truncate the log within a period, whatever its size (after an
        erasure: the log still holds the pages as they were before)."""
        self._truncate_next = True
        self._pending.set()

    def stop(self) -> None:
        """End the thread; what is left in the log is checkpointed when the last connection
        closes (SQLite does that itself)."""
        self._stopping.set()
        self._pending.set()
        self._thread.join()

    def _run(self) -> None:
        conn = self._conn
        assert conn is not None
        try:
            while True:
                self._pending.wait()
                if self._stopping.wait(self._period):  # gather a period's commits into one
                    return
                self._pending.clear()
                # stop() may have set both flags between the wait above and the clear: its
                # wake-up is gone with the clear, so look at the stop flag once more (a lost
                # wake-up here left stop() joining a thread that waited for ever).
                if self._stopping.is_set():
                    return
                self._checkpoint(conn)
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        try:
            size = os.path.getsize(self._wal)
        except OSError:
            return  # no log yet (or it was just removed): nothing to copy
        truncate = self._truncate_next
        mode = "TRUNCATE" if truncate or size > self._truncate_bytes else "PASSIVE"
        try:
            busy, _frames, _copied = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        except sqlite3.Error as error:  # a full disk, an I/O error: the writer reports its own
            log.warning("wal_checkpoint_failed", mode=mode.lower(), error=str(error))
            self._pending.set()  # try again next period
            return
        if busy:
            self._pending.set()  # a reader or writer was in the way
            return
        self.checkpoints += 1
        if mode == "TRUNCATE":
            self.truncations += 1
            if truncate:
                self._truncate_next = False
