"""The storage port coverage check: every repository and engine method ran on every engine.

tests/storage/storage_support.py wraps every public method of every repository and of the
engine so that each call records, per engine, that the method ran (``EXERCISED``), and names
the methods that must run (``register_expected``). A method no test reaches is a statement
nobody checked on that engine, so the session fails when one is missing.

The check belongs to the session, not to a test: under pytest-xdist each worker process records
only its own calls and no test can see the others'. So each worker sends its record to the
controller (``workeroutput``), and the controller checks the union once every worker is done;
without xdist the one process checks its own record. Either way the answer is the same. The
check runs only when the session selected a test from every module of tests/storage (a partial
run proves nothing) and was not stopped early; a failure is reported as a failed test named
``PORT_COVERAGE_NODEID``, so it shows in the summary, the failures and the junit XML.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from support.workers import is_xdist_worker

STORAGE_DIR = Path("tests") / "storage"  # under the rootdir
PORT_COVERAGE_NODEID = "tests/storage::port_coverage"
WORKER_KEY = "wm_port_coverage"

# engine name → "Class.method" names that ran in this process.
EXERCISED: dict[str, set[str]] = defaultdict(set)
_expected: Callable[[], set[str]] | None = None
# What the workers sent (the controller's side of an xdist run).
_from_workers: list[dict[str, Any]] = []


def register_expected(methods: Callable[[], set[str]]) -> None:
    """Called by storage_support when it wraps the methods: the names that must all run."""
    global _expected
    _expected = methods


def missing(
    expected: Iterable[str], exercised: Mapping[str, Iterable[str]]
) -> dict[str, list[str]]:
    """Per engine that ran, the expected methods that never ran on it."""
    wanted = set(expected)
    return {
        engine: gaps
        for engine, ran in sorted(exercised.items())
        if ran and (gaps := sorted(wanted - set(ran)))
    }


def _whole_storage_suite(session: pytest.Session) -> bool:
    folder = session.config.rootpath / STORAGE_DIR
    modules = {path.name for path in folder.glob("test_*.py")}
    selected = {item.path.name for item in session.items if item.path.parent == folder}
    return bool(modules) and modules <= selected


def local_record(session: pytest.Session) -> dict[str, Any]:
    """This process's record, as plain data (it crosses the xdist channel)."""
    return {
        "whole": _whole_storage_suite(session),
        "expected": sorted(_expected()) if _expected is not None else [],
        "exercised": {engine: sorted(names) for engine, names in EXERCISED.items()},
    }


def received(record: Mapping[str, Any]) -> None:
    """A worker's record, on the controller (pytest_testnodedown)."""
    _from_workers.append(dict(record))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker hands its record to the controller, which (like a run without xdist) checks
    the union."""
    if is_xdist_worker(session.config):
        workeroutput = session.config.workeroutput  # type: ignore[attr-defined]
        workeroutput[WORKER_KEY] = local_record(session)
    else:
        check(session)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist, on the controller: a worker finished; keep its record."""
    record = getattr(node, "workeroutput", {}).get(WORKER_KEY)
    if record is not None:
        received(record)


def _union(records: Iterable[Mapping[str, Any]]) -> tuple[bool, set[str], dict[str, set[str]]]:
    whole = False
    expected: set[str] = set()
    exercised: dict[str, set[str]] = defaultdict(set)
    for record in records:
        whole = whole or bool(record["whole"])
        expected.update(record["expected"])
        for engine, names in record["exercised"].items():
            exercised[engine].update(names)
    return whole, expected, exercised


def check(session: pytest.Session) -> None:
    """At the end of the session (the controller's, under xdist): report the gaps as a failed
    test and fail the session."""
    stopped = session.shouldstop or session.shouldfail  # -x or --maxfail, in one process
    ended = session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    if stopped or not ended:  # xdist's controller reports a stop as INTERRUPTED
        return
    records = _from_workers or [local_record(session)]
    whole, expected, exercised = _union(records)
    if not whole or not expected:
        return
    gaps = missing(expected, exercised)
    if not gaps:
        return
    text = "\n".join(f"{engine}: never exercised: {names}" for engine, names in gaps.items())
    report = pytest.TestReport(
        nodeid=PORT_COVERAGE_NODEID,
        location=(str(STORAGE_DIR), None, "port coverage"),
        keywords={},
        outcome="failed",
        longrepr="every repository and engine method must run on every engine tested\n" + text,
        when="call",
    )
    session.config.hook.pytest_runtest_logreport(report=report)
    # The teardown report closes the test for the reporters (junitxml writes it then).
    report = pytest.TestReport(
        nodeid=PORT_COVERAGE_NODEID,
        location=report.location,
        keywords={},
        outcome="passed",
        longrepr=None,
        when="teardown",
    )
    session.config.hook.pytest_runtest_logreport(report=report)
    session.testsfailed += 1
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
