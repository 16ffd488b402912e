"""PostgreSQL test clusters left by a killed run are removed at the next run's start; those of
live runs stay (support.postgres.remove_orphans).

The folders live in a temporary folder of this test's own, so the clusters of other runs on
the machine are never looked at.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.postgres import (
    LEGACY_AGE_SECONDS,
    OWNER_FILE,
    PREFIX,
    _alive,
    _process_start,
    remove_orphans,
)

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def tmp() -> Iterator[Path]:
    """A folder the ``postgres`` user can enter too (pytest's own tmp_path is private to root,
    and as root the cluster runs as ``postgres``); the killed runs' servers in it are stopped
    at the end, whatever the test found."""
    folder = Path(tempfile.mkdtemp(prefix="wm-orphans-"))
    folder.chmod(0o755)
    yield folder
    remove_orphans(folder)  # a test that failed midway leaves no server running
    shutil.rmtree(folder, ignore_errors=True)


def _folder(tmp: Path, name: str, owner: dict[str, object] | None) -> Path:
    folder = tmp / f"{PREFIX}{name}"
    (folder / "data").mkdir(parents=True)
    if owner is not None:
        (folder / OWNER_FILE).write_text(json.dumps(owner))
    return folder


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_folders_whose_owner_is_gone_are_removed(tmp: Path) -> None:
    me = {"pid": os.getpid(), "start": _process_start(os.getpid())}
    live = _folder(tmp, "live", me)
    dead = _folder(tmp, "dead", {"pid": _dead_pid(), "start": "1"})
    reused = _folder(tmp, "reused", {"pid": os.getpid(), "start": "-1"})  # a later process
    torn = _folder(tmp, "torn", None)
    (torn / OWNER_FILE).write_text('{"pid": ')  # the kill came while it was written
    fresh_legacy = _folder(tmp, "fresh", None)  # no record: maybe a cluster being created
    old_legacy = _folder(tmp, "old", None)
    an_hour_ago = time.time() - LEGACY_AGE_SECONDS - 60
    os.utime(old_legacy, (an_hour_ago, an_hour_ago))
    unrelated = tmp / "wm-other"
    unrelated.mkdir()

    removed = remove_orphans(tmp)

    assert sorted(removed) == sorted([dead, reused, torn, old_legacy])
    assert live.exists() and fresh_legacy.exists() and unrelated.exists()
    assert not any(path.exists() for path in removed)


def _killed_run(tmp: Path) -> tuple[Path, int]:
    """A child starts a cluster in ``tmp`` the way the fixtures do and is killed with SIGKILL:
    its server keeps running (pg_ctl made it a daemon). Returns its folder and server pid."""
    code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "from support.postgres import PostgresServer, find_bindir\n"
        "server = PostgresServer(find_bindir()).start()\n"
        "print(server.base, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp)}
    child = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        base = Path(child.stdout.readline().strip())
        assert base.parent == tmp, base
        postmaster = int((base / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
        assert remove_orphans(tmp) == []  # its owner is alive: left alone
        assert _alive(postmaster)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert _alive(postmaster)  # the orphan
    return base, postmaster


@pytest.mark.postgres
def test_the_server_of_a_killed_run_is_stopped_and_its_folder_removed(tmp: Path) -> None:
    base, postmaster = _killed_run(tmp)

    assert remove_orphans(tmp) == [base]
    assert not _alive(postmaster)
    assert not base.exists()


@pytest.mark.postgres
def test_the_next_pytest_run_removes_the_orphan_at_its_start(tmp: Path) -> None:
    """The whole path: a new pytest run over this suite (tests/conftest.py's session start),
    with the killed run's temporary folder as its own, stops the orphan before its tests."""
    base, postmaster = _killed_run(tmp)
    env = {**os.environ, "TMPDIR": str(tmp)}
    selected = f"{Path(__file__)}::test_only_folders_whose_owner_is_gone_are_removed"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", selected],
        cwd=TESTS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert f"removed 1 PostgreSQL test cluster(s) left by killed runs: {base}" in run.stdout
    assert not _alive(postmaster)
    assert not base.exists()
