"""`wm-server`'s command line: settings come from the environment, so the command takes only
--help and --version, and anything else is refused before a database is opened."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wm_server", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )


def test_version_prints_the_distributions_version_and_starts_nothing(tmp_path: Path) -> None:
    result = _run(tmp_path, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"wm-server {version('working-memory-service')}"
    assert list(tmp_path.iterdir()) == []  # no ./var, no database


def test_help_names_the_environment_settings(tmp_path: Path) -> None:
    result = _run(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    assert "WM_DATABASE_URL" in result.stdout and "WM_ADDRESS" in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_argument_is_refused_before_anything_opens(tmp_path: Path) -> None:
    result = _run(tmp_path, "--port", "9000")
    assert result.returncode == 2
    assert "unrecognized arguments: --port 9000" in result.stderr
    assert result.stdout == ""
    assert list(tmp_path.iterdir()) == []
