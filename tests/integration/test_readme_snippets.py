"""The README's Python snippets, run as a reader would paste them, against a real server.

Which blocks: every ```python block of README.md that opens with ``# readme-test`` (the lead
marks the snippets meant to run as written), plus, until they are marked, the gRPC and the
reflection snippets, found by the API they show. The only change made to a block is its
address: the literal ``127.0.0.1:50051`` becomes the test server's address (``WM_ADDRESS`` is
also set, for snippets that rely on the client's default). A block with top-level ``await`` is
run the way ``python -m asyncio`` would run it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server_process import ServerProcess

README = Path(__file__).resolve().parents[2] / "README.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
SHOWN_APIS = ("WorkingMemoryServiceStub", "ProtoReflectionDescriptorDatabase")
RUNNER = """
import ast, asyncio, sys
source = sys.stdin.read()
code = compile(source, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__"})
if asyncio.iscoroutine(result):
    asyncio.run(result)
"""


def snippets() -> list[str]:
    blocks = FENCE.findall(README.read_text(encoding="utf-8"))
    chosen = [
        b for b in blocks if b.startswith("# readme-test") or any(api in b for api in SHOWN_APIS)
    ]
    return chosen


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("readme")).start(timeout=60)
    yield process
    process.terminate()


def test_the_readme_shows_the_grpc_and_reflection_snippets() -> None:
    found = "\n".join(snippets())
    for api in SHOWN_APIS:
        assert api in found, f"README.md has no python block using {api}"


@pytest.mark.parametrize("index", range(len(snippets())))
def test_a_readme_snippet_runs_as_written(server: ServerProcess, index: int) -> None:
    block = snippets()[index].replace("127.0.0.1:50051", server.address)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    env["WM_ADDRESS"] = server.address
    done = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=block,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, f"{block}\n--- stderr:\n{done.stderr}"
    if "WorkingMemoryServiceStub" in block:
        count, pending = done.stdout.split()
        assert int(count) == 1 and int(pending) > 0
    if "ProtoReflectionDescriptorDatabase" in block:
        assert "wm.v1.WorkingMemoryService" in done.stdout
