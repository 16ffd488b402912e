"""Fixtures shared by every test layer."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from support.postgres import remove_orphans
from support.server_process import ServerProcess
from support.workers import is_xdist_worker
from wm_server.config import EventLoopName
from wm_server.event_loop import LoopFactory, loop_factory

# The storage port coverage check, over every xdist worker (support/port_coverage.py).
pytest_plugins = ("support.port_coverage",)


TESTS = Path(__file__).resolve().parent
# The slow tier (markers `slow` and `serial`, see the Makefile) holds, besides the tests marked
# so, every test under these folders of tests/ and every test using these fixtures, the tests
# written later included. Why each is slow:
SLOW_FOLDERS = {
    "browser": "drives Chromium",
    "packaging": "builds wheels and installs them into new virtual environments",
}
SLOW_FIXTURES = {"browser": "starts Chromium"}


def _starts_server_processes(item: pytest.Item) -> bool:
    """Whether the item's module runs ``wm-server`` as a child process: it has
    support.server_process.ServerProcess among its names. Each such start costs a Python
    process and the server's imports (about 1.7 CPU s); ``make test-fast`` leaves these modules,
    marked ``server_process``, to ``make test`` (see the Makefile)."""
    module = getattr(item, "module", None)
    return module is not None and any(v is ServerProcess for v in vars(module).values())


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        in_folder = len(parts) > 1 and parts[0] in SLOW_FOLDERS
        if in_folder or not SLOW_FIXTURES.keys().isdisjoint(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if _starts_server_processes(item):
            item.add_marker(pytest.mark.server_process)
        if parts[:1] == ("integration",) and item.get_closest_marker("postgres") is not None:
            item.add_marker(pytest.mark.postgres_service)


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never pick up a developer's real API key, server settings or trace exporter
    from the shell."""
    for name in list(os.environ):
        if name.startswith(("WM_", "ANTHROPIC_", "OPENAI_", "OTEL_")):
            monkeypatch.delenv(name, raising=False)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    """Async tests run on the loop ``wm-server`` runs on by default (uvloop where it is
    installed); tests/integration/test_event_loop.py runs a server on each loop."""
    return {"default": loop_factory(EventLoopName.AUTO)}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under CI=true nothing may be skipped for a missing prerequisite: a skip fails the run."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI=true, which requires every prerequisite: {report.longrepr}"
        )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before anything starts, the PostgreSQL test clusters of killed runs are stopped and
    removed (support.postgres.remove_orphans; once per run, by the controller)."""
    if is_xdist_worker(session.config):
        return
    removed = remove_orphans()
    if removed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"removed {len(removed)} PostgreSQL test cluster(s) left by killed runs: "
                + ", ".join(str(path) for path in removed)
            )
