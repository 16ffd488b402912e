"""The test tiers: which tests the markers put where, and scripts/test_tiers.py, which runs make
targets side by side (`make test`, `make test-fast`)."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest
from _pytest.mark.expression import Expression

REPO = Path(__file__).resolve().parents[2]
FAST = "not slow and not serial"
SLOW = "slow or serial"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "test_tiers_script", REPO / "scripts" / "test_tiers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


tiers = _load_script()


# The paths the marker tests below look at, collected once for the module (a collection in a
# child process costs its conftest's imports and the modules', ~5 CPU s; one per expression
# was six).
COLLECTED = (
    "tests/browser", "tests/packaging", "tests/reliability/test_soak.py", "tests/deploy",
    "tests/unit/server/test_config.py", "tests/integration/test_ready_line.py",
    "tests/integration/test_commits.py", "tests/integration/test_long_term_memory.py",
    "tests/storage/test_store.py",
)  # fmt: skip


@functools.cache
def _collected() -> dict[str, frozenset[str]]:
    """Every test under COLLECTED with its markers' names, as pytest's ``-m`` sees them
    (support/marker_listing.py writes them after tests/conftest.py has marked the items)."""
    with tempfile.TemporaryDirectory() as folder:
        listing = Path(folder) / "markers.jsonl"
        # A caller's PYTEST_ADDOPTS (-m, -k, plugins) would change what is collected.
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
        env["MARKER_LISTING_OUT"] = str(listing)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO / "tests"), env.get("PYTHONPATH")])
        )
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             "-p", "support.marker_listing", *COLLECTED],
            cwd=REPO, capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        rows = [json.loads(line) for line in listing.read_text().splitlines()]
    return {row["id"]: frozenset(row["marks"]) for row in rows}


def _selected(marker: str, *paths: str) -> set[str]:
    """The tests under ``paths`` that ``pytest -m MARKER`` selects: pytest's own expression
    evaluated over each test's markers."""
    assert all(path.startswith(COLLECTED) for path in paths), paths
    expression = Expression.compile(marker)

    def matches(marks: frozenset[str]) -> bool:
        return expression.evaluate(lambda name, /, **kwargs: not kwargs and name in marks)

    return {t for t, marks in _collected().items() if t.startswith(paths) and matches(marks)}


@pytest.mark.slow  # collects part of the suite in a child process (_collected: once per module)
def test_folders_fixtures_and_marks_put_tests_in_the_slow_tier() -> None:
    paths = ("tests/browser", "tests/packaging", "tests/reliability/test_soak.py",
             "tests/deploy", "tests/unit/server/test_config.py")  # fmt: skip
    fast, slow = _selected(FAST, *paths), _selected(SLOW, *paths)
    assert fast and slow and not fast & slow
    assert all(t.startswith(("tests/deploy/test_deploy_files", "tests/unit/")) for t in fast), fast
    for folder in ("tests/browser/", "tests/packaging/", "tests/reliability/test_soak.py"):
        assert any(t.startswith(folder) for t in slow), folder
    assert any(t.startswith("tests/deploy/test_container.py") for t in slow)  # marked itself


@pytest.mark.slow  # reads the collection in a child process (_collected: once per module)
def test_modules_that_run_server_processes_are_left_out_of_the_quick_loop() -> None:
    """`make test-fast` selects `not server_process`: every test of a module that has
    ServerProcess is marked, and no test of a module without it."""
    paths = ("tests/integration/test_ready_line.py", "tests/integration/test_commits.py")
    marked = _selected("server_process", *paths)
    unmarked = _selected("not server_process", *paths)
    assert marked and all(t.startswith(paths[0]) for t in marked), marked
    assert unmarked and all(t.startswith(paths[1]) for t in unmarked), unmarked


@pytest.mark.slow  # reads the collection in a child process (_collected: once per module)
def test_only_the_service_tests_on_postgres_are_left_out_of_the_quick_loop() -> None:
    """`make test-fast` selects `not postgres_service`: the PostgreSQL cases of tests/integration
    are marked, their SQLite cases and the storage suite's PostgreSQL cases are not."""
    paths = ("tests/integration/test_long_term_memory.py", "tests/storage/test_store.py")
    marked = _selected("postgres_service", *paths)
    assert marked and all(t.startswith(paths[0]) and "[postgresql" in t for t in marked), marked
    kept = _selected("not postgres_service", *paths)
    assert any(t.startswith(paths[0]) and "[sqlite" in t for t in kept), kept
    assert any(t.startswith(paths[1]) and "[postgresql" in t for t in kept), kept


def test_the_closing_lines_of_pytest_and_node_are_added_up() -> None:
    output = textwrap.dedent("""
        ===== 2 failed, 1200 passed, 3 skipped, 1 xfailed, 1 error in 61.20s (0:01:01) =====
        ============================== 40 passed in 9.01s ==============================
        # pass 70
        # fail 1
        \u2139 pass 1
        \u2139 skipped 2
        a line that says 5 passed in passing
    """)
    assert tiers.count_tests(output) == {"passed": 1311, "failed": 4, "skipped": 6}


# `bad` ends after `ok` whatever the machine's load: it waits for the file `ok` writes last
# (a fixed sleep was once shorter than `ok`'s start on a loaded machine), then a moment more.
MAKEFILE = """\
ok:
\t@echo "first tier says hello"
\t@echo "=============== 3 passed in 0.10s ==============="
\t@touch ok.done
bad:
\t@while [ ! -e ok.done ]; do sleep 0.05; done
\t@sleep 0.5
\t@echo "second tier fails"
\t@echo "========== 1 failed, 2 passed in 0.20s =========="
\t@exit 1
"""


def _tiers(folder: Path, *targets: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "test_tiers.py"), "-C", str(folder), *targets],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_targets_run_side_by_side_each_output_whole_and_one_failure_fails_all(
    tmp_path: Path,
) -> None:
    (tmp_path / "Makefile").write_text(MAKEFILE)
    result = _tiers(tmp_path, "bad", "ok")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    # `ok` ends first: its block comes first, whole, between its frame lines.
    ok_start, ok_end = out.index("ok: passed in"), out.index("end of ok")
    bad_start, bad_end = out.index("bad: FAILED (exit 2) in"), out.index("end of bad")
    assert ok_start < out.index("first tier says hello") < ok_end < bad_start
    assert bad_start < out.index("second tier fails") < bad_end
    assert "failed targets: bad" in out
    assert out.rstrip().splitlines()[-1] == "total: 5 passed, 1 failed, 0 skipped"
    assert (tmp_path / "var" / "test-logs" / "bad.log").read_text().count("second tier fails") == 1


def test_all_targets_passing_pass(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text(MAKEFILE)
    result = _tiers(tmp_path, "ok")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().splitlines()[-1] == "total: 3 passed, 0 failed, 0 skipped"


@pytest.mark.parametrize("args", [[], ["--bogus"]])
def test_a_call_without_targets_is_refused(args: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "test_tiers.py"), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "Usage" in result.stderr


def test_a_stopped_run_stops_every_target_and_shows_what_they_wrote(tmp_path: Path) -> None:
    hang = "hang:\n\t@echo 'hanging tier started'; echo $$$$ > hang.pid; exec sleep 300\n"
    (tmp_path / "Makefile").write_text(hang + MAKEFILE)
    run = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "test_tiers.py"), "-C", str(tmp_path), "hang"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    pid_file = tmp_path / "hang.pid"
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline, "the target never started"
        time.sleep(0.1)
    sleeper = int(pid_file.read_text())
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 130
    assert "hanging tier started" in out and "interrupted: every target was stopped" in out
    deadline = time.monotonic() + 10
    while _alive(sleeper):  # the target's processes went with it (reaped by init)
        assert time.monotonic() < deadline, "the target's process outlived the run"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
