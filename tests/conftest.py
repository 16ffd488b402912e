"""Fixtures shared by every test layer."""

from __future__ import annotations

import os

import pytest

from wm_server.engine_build import inspect_engine


def pytest_sessionstart(session: pytest.Session) -> None:
    """Never test a stale compiled engine, and test the build the Makefile asked for.

    ``WM_TEST_ENGINE`` (``compiled`` or ``interpreted``) is set by ``make pytest`` and
    ``make pytest-pure-core``: a run that silently tested the other build would prove nothing.
    """
    engine = inspect_engine()
    if engine.stale:
        pytest.exit(f"the compiled engine is stale: {engine.stale}; run `make core`", returncode=4)
    expected = os.environ.get("WM_TEST_ENGINE")
    if expected and expected != ("compiled" if engine.compiled else "interpreted"):
        pytest.exit(f"WM_TEST_ENGINE={expected}, but the engine is {engine.label}", returncode=4)


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never pick up a developer's real API key or server settings from the shell."""
    for name in list(os.environ):
        if name.startswith("WM_") or name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name, raising=False)


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
