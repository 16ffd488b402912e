"""Every ```python block of docs/integrations/*.md runs as written against a real server,
with only WM_ADDRESS set (as a reader following the page with `make run` would)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.server_process import ServerProcess

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations"
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
BLOCKS = [
    pytest.param(block, id=f"{page.stem}-{n}")
    for page in sorted(DOCS.glob("*.md"))
    for n, block in enumerate(FENCE.findall(page.read_text(encoding="utf-8")))
]


def test_every_integration_page_has_a_runnable_example() -> None:
    pages = {p.stem for p in DOCS.glob("*.md")}
    assert {"mcp", "openai-agents", "langchain", "llamaindex"} <= pages
    for page in DOCS.glob("*.md"):
        assert FENCE.search(page.read_text(encoding="utf-8")), f"{page.name} has no python block"


@pytest.mark.parametrize("block", BLOCKS)
def test_an_integration_snippet_runs_as_written(server: ServerProcess, block: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    env["WM_ADDRESS"] = server.address
    done = subprocess.run(
        [sys.executable, "-"], input=block, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, f"{block}\n--- stdout:\n{done.stdout}\n--- stderr:\n{done.stderr}"
