"""`make install` over a venv made by an older release keeps every script of both distributions.

Older servers carried the `wm` script that the client distribution owns now. pip installs the
client first (the server depends on it), then uninstalls the older server, deleting every file
on its list: `wm` included. The Makefile uninstalls our two distributions first.

The venv here is real and the Makefile's recipe runs unchanged; only the third-party packages
come from this suite's venv (a .pth file), so that pip builds and installs just our two
editable distributions, offline, in seconds.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # builds two distributions into a new venv


def _run(*args: str | Path, cwd: Path = REPO) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _older_release(folder: Path) -> Path:
    """A server distribution of the same name whose scripts include `wm`, as 0.1 had."""
    folder.mkdir()
    (folder / "pyproject.toml").write_text(
        textwrap.dedent("""
            [build-system]
            requires = ["setuptools>=77"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "working-memory-service"
            version = "0.0.1"

            [project.scripts]
            wm = "wm_client.entry:main"
            wm-server = "wm_server.__main__:main"

            [tool.setuptools]
            py-modules = ["wm_old_release"]
            """)
    )
    (folder / "wm_old_release.py").write_text('"""The older release."""\n')
    return folder


def test_make_install_over_an_older_venv_keeps_the_wm_script(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    bin_dir = venv / "bin"
    _run(sys.executable, "-m", "venv", venv)
    site = Path(
        _run(
            bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        ).strip()
    )
    # The venv's own old setuptools would shadow the one the build needs (from this suite's venv).
    _run(bin_dir / "python", "-m", "pip", "uninstall", "-qq", "--yes", "setuptools")
    (site / "zz_suite_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    offline = ("--no-index", "--no-build-isolation", "--disable-pip-version-check")
    _run(bin_dir / "python", "-m", "pip", "install", "-qq", *offline, "--no-deps",
         _older_release(tmp_path / "older"))  # fmt: skip
    assert (bin_dir / "wm").exists()

    _run("make", "install-runtime", f"VENV={venv}", f"PYTHON={sys.executable}",
         f"PIP_OPTIONS={' '.join(offline[:2])}")  # fmt: skip

    for script, owner in (("wm", "wm_client.entry"), ("wm-mcp", "wm_client"),
                          ("wm-server", "wm_server")):  # fmt: skip
        assert (bin_dir / script).exists(), (
            f"{script} lost: {sorted(p.name for p in bin_dir.iterdir())}"
        )
        assert owner in (bin_dir / script).read_text()
    shown = _run(bin_dir / "python", "-m", "pip", "show", "working-memory-service")
    assert "Version: 0.1.0" in shown  # the older release was replaced, not left beside
    assert not (site / "wm_old_release.py").exists()
