"""The light ``wm-client`` distribution, built and installed as a user would, alone.

The wheel is built from clients/python, installed into a fresh virtual environment that holds
nothing of the server, and used from there against a real server on loopback: the client
creates a session and assembles its context, the tool executor answers a recall tool, and the
``wm`` script works only once the ``[cli]`` extra is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server_process import ServerProcess
from wm_client.data import PACKAGED_FILES, packaged
from wm_client.entry import CLI_EXTRA_HINT, EXIT_MISSING_EXTRA
from wm_client.integrations.mcp_entry import MCP_EXTRA_HINT

REPO = Path(__file__).resolve().parents[2]
CLIENT_PROJECT = REPO / "clients" / "python"
DATA_DIR = CLIENT_PROJECT / "wm_client" / "data"
# What the server distribution brings and a client install must not.
SERVER_ONLY = (
    "wm_server",
    "wm_core",
    "anthropic",
    "openai",
    "psycopg",
    "psycopg_pool",
    "pydantic",
    "pydantic_settings",
    "structlog",
    "jsonschema",
    "json_repair",
    "prometheus_client",
    "aiohttp",
)
# grpcio's own dependency included.
ALLOWED_DISTRIBUTIONS = {
    "wm-client",
    "grpcio",
    "typing_extensions",
    "protobuf",
    "googleapis-common-protos",
}
CLI_DISTRIBUTIONS = {"rich", "markdown-it-py", "mdurl", "pygments"}


def _run(
    *args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command; from outside the repository unless ``cwd`` says otherwise, so that
    nothing of the source tree (``python -c`` puts the working directory on sys.path) is seen."""
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd or Path(tempfile.gettempdir()),
        check=False,
    )


def _pip(target: Path, *args: str) -> None:
    """This environment's pip installing into ``target`` (no pip of its own needed there)."""
    result = _run(
        sys.executable, "-m", "pip", "--python", target, "install", "--quiet", "--no-input", *args
    )
    assert result.returncode == 0, result.stderr


def _distributions(python: Path) -> set[str]:
    script = "import importlib.metadata as m, json; print(json.dumps(sorted({d.metadata['Name'].lower() for d in m.distributions()})))"
    result = _run(python, "-c", script)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools writes build/ and *.egg-info beside the sources.
    project = tmp_path_factory.mktemp("project") / "python"
    shutil.copytree(
        CLIENT_PROJECT, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    result = _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        out,
        project,
    )
    assert result.returncode == 0, result.stderr
    (built,) = out.glob("wm_client-*.whl")
    return built


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("server")).start()
    yield process
    process.terminate()


def test_the_wheel_holds_the_client_the_stubs_and_the_data_once(wheel: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"wm_client", "wm_proto"}
    for name in PACKAGED_FILES:
        assert names.count(f"wm_client/data/{name}") == 1
    assert "wm_proto/v1/working_memory_service_pb2_grpc.py" in names
    assert "wm_client/py.typed" in names and "wm_proto/py.typed" in names


def test_installed_alone_it_talks_to_a_real_server(
    wheel: Path, server: ServerProcess, tmp_path: Path
) -> None:
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    _pip(target, str(wheel))

    installed = _distributions(python)
    assert installed <= ALLOWED_DISTRIBUTIONS, installed - ALLOWED_DISTRIBUTIONS
    missing = _run(
        python,
        "-c",
        "import importlib.util, sys; "
        f"print([m for m in {SERVER_ONLY!r} if importlib.util.find_spec(m) is not None])",
    )
    assert missing.stdout.strip() == "[]", missing.stdout + missing.stderr

    script = textwrap.dedent(
        """
        import asyncio, json, sys
        from wm_client import ContextEngine, ToolExecutor, WmClient
        from wm_client.jsonl import message_from_dict

        async def main() -> None:
            async with WmClient(sys.argv[1]) as client:
                engine = ContextEngine(client)
                turn = [
                    message_from_dict({"role": "user", "content": "rename the parser module"}),
                    message_from_dict({"role": "assistant", "content": "renamed parser.py"}),
                ]
                added = await engine.after_turn("light-1", turn, token_budget=100_000)
                session = await client.get_session("light-1")
                context = await engine.assemble("light-1", 100_000)
                run = await ToolExecutor(client, "light-1").run(
                    "archive_search", {"query": "parser"}
                )
                print(json.dumps({
                    "added": len(added.added_message_ids),
                    "session": session.name,
                    "context_messages": len(context.messages),
                    "tool": [run.content, run.is_error],
                }))

        asyncio.run(main())
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    result = _run(python, "-c", script, server.address, env=env)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome == {
        "added": 2,
        "session": "sessions/light-1",
        "context_messages": 2,
        "tool": ["nothing archived matches 'parser'", False],
    }

    wm = target / "bin" / "wm"
    without = _run(wm, "--help", env=env)
    assert without.returncode == EXIT_MISSING_EXTRA
    assert without.stderr.strip() == CLI_EXTRA_HINT
    no_mcp = _run(target / "bin" / "wm-mcp", "--help", env=env)
    assert (no_mcp.returncode, no_mcp.stderr.strip()) == (EXIT_MISSING_EXTRA, MCP_EXTRA_HINT)

    _pip(target, f"{wheel}[cli]")
    assert _distributions(python) - installed <= CLI_DISTRIBUTIONS
    assert _run(wm, "--help", env=env).returncode == 0
    listed = _run(wm, "sessions", "list", env={**env, "WM_ADDRESS": server.address})
    assert listed.returncode == 0, listed.stderr
    assert "light-1" in listed.stdout


def _tracked_and_untracked_files() -> list[Path]:
    listing = _run(
        "git", "-C", REPO, "ls-files", "--cached", "--others", "--exclude-standard", "-z"
    )
    assert listing.returncode == 0, listing.stderr
    return [REPO / name for name in listing.stdout.split("\0") if name]


def test_the_package_data_exists_once_in_the_repository() -> None:
    """The service config and the demo conversation have one copy (the package's): a second
    file of the same name, or with the same bytes, anywhere in the repository fails."""
    digests = {
        hashlib.sha256(packaged(name).read_bytes()).hexdigest(): name for name in PACKAGED_FILES
    }
    copies = []
    for path in _tracked_and_untracked_files():
        if path.parent == DATA_DIR or not path.is_file():
            continue
        if path.name in PACKAGED_FILES or (
            path.stat().st_size < 1_000_000
            and hashlib.sha256(path.read_bytes()).hexdigest() in digests
        ):
            copies.append(path)
    assert copies == [], f"second copies of wm_client's package data: {copies}"
    for name in PACKAGED_FILES:
        assert (DATA_DIR / name).is_file()
