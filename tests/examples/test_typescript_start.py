"""The TypeScript client and example from a fresh checkout (no node_modules, no dist/), with
exactly the commands the README gives: `npm ci && npm test` in clients/typescript builds before
it tests, and `npm ci && npm start -- "task"` in examples/typescript builds the client and the
example before it runs (here against a real server and a local Messages API)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.fake_anthropic import FakeAnthropic, text_only
from support.server_process import ServerProcess

REPO = Path(__file__).resolve().parents[2]
# What the two packages read from the checkout: their own files, and the service config.
COPIED = ("clients/typescript", "examples/typescript", "clients/python/wm_client/data")
pytestmark = pytest.mark.slow


def _fresh_checkout(root: Path) -> Path:
    def ignore(_: str, names: list[str]) -> list[str]:
        return [n for n in names if n in ("node_modules", "dist")]

    for part in COPIED:
        shutil.copytree(REPO / part, root / part, ignore=ignore)
    return root


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        if os.environ.get("CI") == "true":
            pytest.fail("npm is required under CI=true")
        pytest.skip("node/npm is not installed")
    return npm


def _run(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("WM_", "ANTHROPIC_"))}
    environment.update(env)
    return subprocess.run(
        ["bash", "-e", "-c", command],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


@dataclass
class Started:
    """A fresh checkout after the example's documented command ran in it."""

    root: Path
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Started:
    """`npm ci && npm start -- "task"` in examples/typescript of a fresh checkout, against a
    real server and a local Messages API: once for the module. Its prestart builds the client
    too (the example's prebuild: `npm ci` and `npm run build` in clients/typescript), so the
    client test below reads that install and build instead of a second `npm ci` and `tsc`."""
    npm = _npm()
    folder = tmp_path_factory.mktemp("typescript-start")
    root = _fresh_checkout(folder / "checkout")
    server = ServerProcess(folder / "server").start()
    try:
        with FakeAnthropic() as fake:
            fake.set_default(text_only("Nothing to change: the tests pass."))
            result = _run(
                f'{npm} ci --no-audit --no-fund && {npm} start -- "check the tests"',
                root / "examples" / "typescript",
                WM_ADDRESS=server.address,
                ANTHROPIC_API_KEY="test-key",
                ANTHROPIC_BASE_URL=fake.base_url,
            )
    finally:
        server.terminate()
    return Started(root, result)


def test_the_client_builds_from_a_fresh_checkout_before_its_tests(started: Started) -> None:
    # `npm test` in clients/typescript runs its pretest first, which must be the build; that
    # build, from a checkout with no dist/, is the one the example's prebuild ran above (`npm
    # ci` and `npm run build` in the client). Running it a third time here would compile the
    # client again (about 12 CPU s) to show only that npm runs a pretest script.
    client = started.root / "clients" / "typescript"
    assert started.result.returncode == 0, started.result.stderr[-3000:]
    assert (client / "node_modules").is_dir()
    assert (client / "dist" / "src" / "index.js").is_file()
    assert (client / "dist" / "wm_grpc_service_config.json").is_file()
    scripts = json.loads((client / "package.json").read_text())["scripts"]
    assert scripts["pretest"] == "npm run build"
    assert scripts["build"].startswith("tsc -p tsconfig.json")
    assert (started.root / "examples" / "typescript" / "dist").is_dir()


def test_the_example_starts_with_the_documented_command(started: Started) -> None:
    result = started.result
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Nothing to change: the tests pass." in result.stdout
    assert "compacted agent-" in result.stdout
