"""Every code block of README.md and docs/ runs, as a reader would paste it, against a real
server this module starts (offline provider, SQLite, the HTTP door and the inspector on).

A block finds the server through ``WM_ADDRESS``; the literal default addresses of the docs
(``127.0.0.1:50051`` for gRPC, ``:8081`` for the HTTP door, ``:8080`` for the inspector) are
the only text changed, to the ports the test server got. A block that should not run here
(one that starts a server, needs Docker or a real API key) says why in an HTML comment on the
line before its fence: ``<!-- not-run: REASON -->``. See tests/docs/blocks.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from blocks import REPO, Block, all_blocks

from support.server_process import ServerProcess, free_port

# A reader runs the blocks of a page in order against one server, and later blocks read what
# earlier ones made (a session, a commit): under xdist, `--dist loadfile` (pyproject.toml)
# keeps them on one worker, in order.
BLOCKS = all_blocks()
TS_CLIENT = REPO / "clients" / "typescript"
# Held while the checkout's TypeScript client is built or used; the Makefile's node-test takes
# the same file (flock).
TS_LOCK = REPO / "var" / "typescript.lock"
PYTHON_RUNNER = """
import ast, asyncio, sys
source = sys.stdin.read()
code = compile(source, sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__"})
if asyncio.iscoroutine(result):
    asyncio.run(result)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    http, inspector = free_port(), free_port()
    process = ServerProcess(
        tmp_path_factory.mktemp("docs"),
        WM_HTTP_ADDRESS=f"127.0.0.1:{http}",
        WM_INSPECTOR_ADDRESS=f"127.0.0.1:{inspector}",
    ).start()
    process.http_port, process.inspector_port = http, inspector  # type: ignore[attr-defined]
    yield process
    process.terminate()


def _localized(code: str, server: ServerProcess) -> str:
    return (
        code.replace("127.0.0.1:50051", server.address)
        .replace("127.0.0.1:8081", f"127.0.0.1:{server.http_port}")  # type: ignore[attr-defined]
        .replace("127.0.0.1:8080", f"127.0.0.1:{server.inspector_port}")  # type: ignore[attr-defined]
    )


def _environment(server: ServerProcess, first: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WM_", "ANTHROPIC_"))}
    env.pop("OPENAI_API_KEY", None)
    env.update(WM_ADDRESS=server.address, NO_COLOR="1", TERM="dumb", COLUMNS="200")
    path = [str(p) for p in (first, Path(sys.executable).parent) if p is not None]
    env["PATH"] = os.pathsep.join([*path, env.get("PATH", "")])
    return env


@pytest.fixture(scope="module")
def shell_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of ``python`` and ``pip`` for the shell blocks: a venv of their own that
    sees the suite's packages (a .pth file) but installs into itself. A block's ``pip install
    ./clients/python[...]`` must not replace the suite's editable client with a copy while
    other tests (other xdist workers too) import it, nor leave the developer's venv with a copy
    that no longer follows the checkout.

    Made without pip (``python -m venv`` with pip spends 8 CPU s unpacking pip and an old
    setuptools): its ``pip`` is the suite's pip installing into it (``pip --python``). It
    builds without build isolation (the venv's pip.conf; pip spells "off" as
    ``no-build-isolation = false``): each ``pip install ./clients/python[...]`` block builds
    the client with the suite's setuptools instead of first installing setuptools into a new
    build environment, 7 of its 13 CPU s (three such blocks). What the blocks install, and
    that their later blocks run, stays theirs; the client's wheel built from a clean copy and
    installed alone is tests/packaging/test_client_distribution.py's."""
    venv = tmp_path_factory.mktemp("shell-venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "zz_suite_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (venv / "pip.conf").write_text("[install]\nno-build-isolation = false\n")
    for name in ("pip", "pip3"):
        shim = venv / "bin" / name
        shim.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" -m pip --python "{venv / "bin" / "python"}" "$@"\n'
        )
        shim.chmod(0o755)
    return venv / "bin"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is required under CI=true for the TypeScript blocks")
        pytest.skip("node is not installed: the TypeScript and JavaScript blocks need Node 20+")
    return node


@pytest.fixture(scope="module")
def ts_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A project outside the repository that depends on the built client, as a reader's would
    (``npm install <path>/clients/typescript`` links it the same way).

    It builds clients/typescript and compiles against its node_modules, which `make node-test`
    reinstalls (npm ci) and rebuilds, maybe at the same time (make test runs the tiers side by
    side): both hold ``TS_LOCK`` while they use the checkout's client."""
    _node()
    npm = shutil.which("npm") or "npm"
    TS_LOCK.parent.mkdir(exist_ok=True)
    with TS_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _client_installed():
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=TS_CLIENT, check=True)
        if not _client_built():
            subprocess.run([npm, "run", "--silent", "build"], cwd=TS_CLIENT, check=True)
        yield _reader_project(tmp_path_factory)


def _client_installed() -> bool:
    """Whether clients/typescript's node_modules was installed from its lock file as it is
    now (npm records what it installed in node_modules/.package-lock.json): a checkout whose
    lock file changed since (a dependency added) is installed again."""
    installed = TS_CLIENT / "node_modules" / ".package-lock.json"
    lock = TS_CLIENT / "package-lock.json"
    return installed.is_file() and installed.stat().st_mtime >= lock.stat().st_mtime


# What the client's build (`npm run build`: tsc over src/ and test/, then the service config
# copied into dist/) reads, and what it writes.
BUILD_INPUTS = (
    *(TS_CLIENT / folder for folder in ("src", "test", "scripts")),
    *(TS_CLIENT / name for name in ("tsconfig.json", "package.json", "package-lock.json")),
    REPO / "clients" / "python" / "wm_client" / "data" / "wm_grpc_service_config.json",
)
BUILD_OUTPUTS = tuple(
    TS_CLIENT / "dist" / name for name in ("src/index.js", "wm_grpc_service_config.json")
)


def _client_built() -> bool:
    """Whether clients/typescript/dist was built after its inputs last changed: `make test`'s
    node-test builds it under the same lock just before (about 13 CPU s per tsc run), and a
    build from the same inputs writes the same files."""

    def times(path: Path) -> list[float]:
        files = path.rglob("*") if path.is_dir() else [path]
        return [f.stat().st_mtime for f in files if f.is_file()]

    if not all(out.is_file() for out in BUILD_OUTPUTS):
        return False
    built = min(out.stat().st_mtime for out in BUILD_OUTPUTS)
    return max(t for path in BUILD_INPUTS for t in times(path)) <= built


def _reader_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("ts-reader")
    (project / "package.json").write_text(json.dumps({"type": "module", "private": True}))
    scope = project / "node_modules" / "@working-memory"
    scope.mkdir(parents=True)
    (scope / "client").symlink_to(TS_CLIENT, target_is_directory=True)
    config = {
        "compilerOptions": {
            "module": "NodeNext",
            "moduleResolution": "NodeNext",
            "target": "ES2022",
            "strict": True,
            "skipLibCheck": True,
            "outDir": "out",
            "types": ["node"],
            "typeRoots": [str(TS_CLIENT / "node_modules" / "@types")],
        },
        "files": ["block.ts"],
    }
    (project / "tsconfig.json").write_text(json.dumps(config))
    return project


def _run(
    command: list[str],
    block: Block,
    server: ServerProcess,
    first: Path | None = None,
    **kwargs: object,
) -> None:
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=_environment(server, first),
        timeout=180,
        **kwargs,  # type: ignore[arg-type]
    )
    assert result.returncode == 0, (
        f"{block.name} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
        f"{result.stderr[-3000:]}"
    )


def test_every_block_is_run_or_says_why_not() -> None:
    unmarked = [b.name for b in BLOCKS if b.runner is None and b.not_run is None]
    assert not unmarked, f"blocks with no runner need <!-- not-run: reason -->: {unmarked}"
    empty = [b.name for b in BLOCKS if b.not_run is not None and not b.not_run.strip()]
    assert not empty, f"a not-run mark needs its reason: {empty}"


@pytest.mark.parametrize(
    "block",
    [b for b in BLOCKS if b.runner and b.not_run is None],
    ids=lambda b: b.name,
)
def test_the_block_runs(
    block: Block, server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    code = _localized(block.code, server)
    if block.runner == "python":
        _run([sys.executable, "-c", PYTHON_RUNNER, block.name], block, server, input=code, cwd=REPO)
    elif block.runner == "shell":
        shell_venv: Path = request.getfixturevalue("shell_venv")
        _run(["bash", "-e", "-o", "pipefail", "-c", code], block, server, shell_venv, cwd=REPO)
    elif block.runner == "javascript":
        project: Path = request.getfixturevalue("ts_project")
        (project / "block.mjs").write_text(code)
        _run([_node(), "block.mjs"], block, server, cwd=project)
    else:
        project = request.getfixturevalue("ts_project")
        (project / "block.ts").write_text(code)
        tsc = TS_CLIENT / "node_modules" / "typescript" / "bin" / "tsc"
        _run([_node(), str(tsc), "-p", "."], block, server, cwd=project)
        _run([_node(), "out/block.js"], block, server, cwd=project)
