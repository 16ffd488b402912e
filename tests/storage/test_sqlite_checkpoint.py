"""WAL checkpoints run on the checkpointer's thread, never in a COMMIT on the event loop; the
log is copied back and, past its size limit, emptied; nothing written is lost."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from wm_core import Message, Role, TextPart
from wm_server.api.commit_event_encoder import encode_event
from wm_server.services.commit_event_log import EventLog
from wm_server.services.paging import PageTokens
from wm_server.services.sessions import SessionService
from wm_server.storage.sqlite import SqliteDatabase
from wm_server.storage.sqlite_checkpoint import Checkpointer


def _wal_file(path: Path) -> Path:
    return Path(f"{path}-wal")


def _messages(count: int, start: int = 0) -> list[Message]:
    return [
        Message(id=f"m{i}", role=Role.USER, parts=(TextPart("lorem ipsum " * 40 + str(i)),))
        for i in range(start, start + count)
    ]


def _until(predicate: object, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


async def test_commits_leave_the_checkpoint_to_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "wm.sqlite3"
    database = SqliteDatabase(path)
    await database.open()
    sessions = SessionService(database, log=EventLog(encode_event), tokens=PageTokens.random())
    checkpoint_threads: list[str] = []
    try:
        writer = database._connection().conn  # the event loop's connection
        assert writer.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
        on_loop = threading.get_ident()
        for batch in range(40):  # ~2,000 pages: twice SQLite's own checkpoint threshold
            await sessions.add_messages(
                "ckpt", _messages(50, batch * 50), create_if_missing=True, request_id=""
            )
        size_before = path.stat().st_size
        assert await asyncio.to_thread(_until, lambda: database.checkpointer.checkpoints >= 1)
        assert await asyncio.to_thread(_until, lambda: path.stat().st_size > size_before)
        checkpoint_threads = [t.name for t in threading.enumerate() if t.ident != on_loop]
        assert "wm-sqlite-checkpoint" in checkpoint_threads
        session = await sessions.get("ckpt")
        assert session.message_count == 2_000
    finally:
        await database.close()
    assert "wm-sqlite-checkpoint" not in [t.name for t in threading.enumerate()]
    # Everything is in the file after close and reopen.
    database = SqliteDatabase(path)
    await database.open()
    try:
        assert (
            await SessionService(
                database, log=EventLog(encode_event), tokens=PageTokens.random()
            ).get("ckpt")
        ).message_count == 2_000
    finally:
        await database.close()


def _table(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT)")
    return conn


def _fill(conn: sqlite3.Connection, rows: int, checkpointer: Checkpointer) -> None:
    for i in range(rows):
        conn.execute("INSERT INTO t (body) VALUES (?)", ("x" * 2000 + str(i),))
        checkpointer.written()


def test_a_log_past_its_limit_is_emptied(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    conn = _table(path)
    checkpointer = Checkpointer(path, period=0.05, truncate_bytes=256 * 1024)
    _fill(conn, 400, checkpointer)  # ~1 MB of log before the thread runs: nothing writes after
    checkpointer.start()
    try:
        assert _until(lambda: checkpointer.truncations >= 1)
        assert _until(lambda: _wal_file(path).stat().st_size == 0)
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (400,)
    finally:
        checkpointer.stop()
        conn.close()


def test_a_reader_in_the_way_delays_the_truncation_without_losing_it(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    conn = _table(path)
    _fill(conn, 10, Checkpointer(path))
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (10,)  # holds a snapshot
    checkpointer = Checkpointer(path, period=0.05, truncate_bytes=64 * 1024)
    checkpointer.start()
    try:
        _fill(conn, 200, checkpointer)
        time.sleep(0.5)
        assert checkpointer.truncations == 0  # the reader's snapshot still needs the log
        assert os.path.getsize(_wal_file(path)) > 64 * 1024
        reader.execute("ROLLBACK")
        assert _until(lambda: checkpointer.truncations >= 1)  # retried, now it goes through
        assert _until(lambda: _wal_file(path).stat().st_size == 0)
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (210,)
    finally:
        checkpointer.stop()
        reader.close()
        conn.close()


def test_no_commit_means_no_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    conn = _table(path)
    checkpointer = Checkpointer(path, period=0.02)
    checkpointer.start()
    try:
        time.sleep(0.3)
        assert checkpointer.checkpoints == 0
        # One commit, announced once: rows announced one by one could straddle a period on a
        # loaded machine and rightly take two checkpoints.
        conn.execute("BEGIN")
        for i in range(5):
            conn.execute("INSERT INTO t (body) VALUES (?)", ("x" * 2000 + str(i),))
        conn.execute("COMMIT")
        checkpointer.written()
        assert _until(lambda: checkpointer.checkpoints == 1)
        time.sleep(0.3)
        assert checkpointer.checkpoints == 1  # nothing new was written since
    finally:
        checkpointer.stop()
        conn.close()


def test_a_file_the_checkpointer_cannot_open_fails_its_start(tmp_path: Path) -> None:
    """Visible at the database's open, not as a thread that died unseen (the log would
    then grow without bound)."""
    checkpointer = Checkpointer(tmp_path / "no such folder" / "wm.sqlite3")
    with pytest.raises(sqlite3.OperationalError):
        checkpointer.start()
    assert not checkpointer.started


def test_a_truncation_asked_for_empties_even_a_small_log(tmp_path: Path) -> None:
    """After an erasure the log goes, whatever its size (it still holds the old pages)."""
    path = tmp_path / "wm.sqlite3"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE t (x TEXT)")
    writer.execute("INSERT INTO t VALUES ('small')")
    checkpointer = Checkpointer(path, period=0.05)
    checkpointer.start()
    try:
        assert _wal_file(path).stat().st_size > 0
        checkpointer.written()
        assert _until(lambda: checkpointer.checkpoints >= 1)
        assert checkpointer.truncations == 0 and _wal_file(path).stat().st_size > 0
        checkpointer.truncate_soon()
        assert _until(lambda: checkpointer.truncations == 1)
        assert _wal_file(path).stat().st_size == 0
        writer.execute("INSERT INTO t VALUES ('again')")
        checkpointer.written()
        assert _until(lambda: checkpointer.checkpoints >= 3)
        assert checkpointer.truncations == 1  # asked once, done once: back to passive
    finally:
        checkpointer.stop()
        writer.close()
    assert [r[0] for r in sqlite3.connect(path).execute("SELECT x FROM t")] == ["small", "again"]
