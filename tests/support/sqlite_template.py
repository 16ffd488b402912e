"""A test's SQLite database at this checkout's schema without running the migrations again.

Opening a new file runs every migration: 37 ms of CPU, against 6 ms for a copy of a file
already migrated (2026-12-07), and the suite opens about 700 new files in the tests' own
servers and storage tests. So each test process migrates one template file, once, and a test
that wants a new database at the current schema starts from a copy of it, as ``postgres_url``
does with a template database on PostgreSQL. The template holds what the migrations make and
nothing more (no application has started on it: no page-token key, no session). A test of the
migrations themselves, or of what a first start logs, opens a new file instead.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
import threading
from pathlib import Path

from wm_server.config import SQLITE_FILE
from wm_server.storage.sqlite import SqliteDatabase

_lock = threading.Lock()
_template: Path | None = None


def _migrated() -> Path:
    """This process's template, made on first use (on a thread of its own: the caller may be
    inside a running event loop)."""
    global _template
    with _lock:
        if _template is None:
            folder = Path(tempfile.mkdtemp(prefix="wm-sqlite-template-"))
            atexit.register(shutil.rmtree, folder, True)
            database = SqliteDatabase(folder / SQLITE_FILE)

            async def migrate() -> None:
                await database.open()
                await database.close()

            done: list[BaseException | None] = []

            def run() -> None:
                try:
                    asyncio.run(migrate())
                    done.append(None)
                except BaseException as error:  # raised again in the caller
                    done.append(error)

            thread = threading.Thread(target=run, name="wm-sqlite-template")
            thread.start()
            thread.join()
            if done[0] is not None:
                raise done[0]
            # Closing the last connection checkpointed the log into the file and removed it.
            assert not (folder / f"{SQLITE_FILE}-wal").exists()
            _template = folder / SQLITE_FILE
        return _template


def migrated_sqlite(path: Path) -> Path:
    """``path``, a database file that does not exist yet, made a copy of the migrated
    template (its folder created); returned for chaining."""
    if path.exists():
        raise FileExistsError(f"{path}: a test's database is new, not overwritten")
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_migrated(), path)
    return path


def migrated_data_dir(data_dir: Path) -> Path:
    """``data_dir`` with a migrated database in it, unless it holds one already (a restart
    on the same folder keeps its data); returned for chaining."""
    if not (data_dir / SQLITE_FILE).exists():
        migrated_sqlite(data_dir / SQLITE_FILE)
    return data_dir
