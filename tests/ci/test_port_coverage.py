"""The storage port coverage check sees the whole session, however many processes ran it.

Each case runs pytest in a child process over a small project laid out like ours (a
tests/storage folder whose support module records the methods its tests call and names the
ones that must run), with support.port_coverage as the plugin, with and without xdist.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

TESTS = Path(__file__).resolve().parents[1]

SUPPORT = """
from support.port_coverage import EXERCISED, register_expected

EXPECTED = {expected}
register_expected(lambda: set(EXPECTED))


def call(engine, name):
    EXERCISED[engine].add(name)
"""


def _project(pytester: pytest.Pytester, expected: set[str]) -> None:
    pytester.makeini("[pytest]\naddopts = -p support.port_coverage\n")
    storage = pytester.mkdir("tests") / "storage"
    storage.mkdir()
    (storage / "fake_storage.py").write_text(SUPPORT.format(expected=sorted(expected)))
    # Several tests per module, so that with two workers each module's tests are spread.
    for module, calls in {
        "a": ["Repo.add", "Repo.get"],
        "b": ["Repo.remove", "Engine.open"],
    }.items():
        body = "from fake_storage import call\n"
        for n, name in enumerate(calls * 3):
            body += textwrap.dedent(f"""
                def test_{n}():
                    call("sqlite", "{name}")
                """)
        (storage / f"test_{module}.py").write_text(body)
    (pytester.path / "tests" / "test_other.py").write_text("def test_elsewhere():\n    pass\n")


@pytest.fixture(autouse=True)
def _support_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child pytest imports the plugin from this suite's support package."""
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    # Only the plugins at stake (xdist is named with -p): each child starts in a second.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rf", *args)


ALL = {"Repo.add", "Repo.get", "Repo.remove", "Engine.open"}


@pytest.mark.parametrize(
    "workers", [[], ["-p", "xdist", "-n", "2"]], ids=["one process", "two workers"]
)
def test_methods_run_in_different_processes_add_up(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    _project(pytester, ALL)
    result = _run(pytester, *workers, "tests")
    result.assert_outcomes(passed=13)
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.parametrize(
    "workers", [[], ["-p", "xdist", "-n", "2"]], ids=["one process", "two workers"]
)
def test_a_method_no_test_ran_fails_the_session_and_is_named(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    _project(pytester, ALL | {"Repo.purge"})
    result = _run(pytester, *workers, "tests")
    result.assert_outcomes(passed=13, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["sqlite: never exercised: ?'Repo.purge'?", "FAILED tests/storage::port_coverage *"]
    )


def test_a_run_of_part_of_the_storage_suite_checks_nothing(pytester: pytest.Pytester) -> None:
    _project(pytester, ALL | {"Repo.purge"})
    result = _run(pytester, "-p", "xdist", "-n", "2", "tests/storage/test_a.py")
    result.assert_outcomes(passed=6)
    assert result.ret == pytest.ExitCode.OK


def test_a_run_stopped_at_the_first_failure_checks_nothing(pytester: pytest.Pytester) -> None:
    _project(pytester, ALL | {"Repo.purge"})
    (pytester.path / "tests" / "test_other.py").write_text("def test_elsewhere():\n    1 / 0\n")
    result = _run(pytester, "-x", "tests/test_other.py", "tests/storage")
    result.assert_outcomes(failed=1)
    result.stdout.no_fnmatch_line("*never exercised*")
