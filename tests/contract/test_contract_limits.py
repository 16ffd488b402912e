"""The contract's limits have one source, the proto's annotations, and everything that states
them agrees: the server's copies (wm_server.contract), wm_core's tool schemas, the README's
table, the error reasons the server raises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from wm_core import MAX_MEMORY_HITS, MAX_STORED_MEMORY_CHARS, agent_tools
from wm_proto.v1 import errors_pb2
from wm_server import contract

ROOT = Path(__file__).resolve().parents[2]


def test_wm_core_states_the_contracts_memory_limits() -> None:
    assert MAX_STORED_MEMORY_CHARS == contract.MAX_MEMORY_TEXT == 2000
    assert MAX_MEMORY_HITS == contract.MAX_MEMORY_HITS == 50
    tools = {t["name"]: t["input_schema"] for t in agent_tools()}
    assert tools["memory_store"]["properties"]["text"]["maxLength"] == contract.MAX_MEMORY_TEXT
    assert tools["memory_search"]["properties"]["limit"]["maximum"] == contract.MAX_MEMORY_HITS


def test_the_server_reads_its_limits_from_the_annotations() -> None:
    assert contract.MAX_BATCH == 1000 and contract.MAX_PARTS == 256
    assert contract.MAX_TOKEN_BUDGET == 10_000_000 and contract.MAX_KEEP_RECENT == 10_000
    assert contract.MAX_REQUEST_ID == 128 and contract.MAX_QUERY == 1000


def test_the_readme_table_is_the_protos() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_limits_table.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "| `messages` | AddMessages | 1-1,000 items |" in readme


def test_every_reason_the_server_raises_is_in_the_enum() -> None:
    """ErrorInfo reasons given by keyword anywhere in the server (NotFound(..., reason=X))
    are values of wm.v1.ErrorReason; rpc_status_of refuses any other at run time."""
    values = errors_pb2.DESCRIPTOR.enum_types_by_name["ErrorReason"].values_by_name
    known = {n.removeprefix("ERROR_REASON_") for n in values}
    raised = set()
    for path in (ROOT / "server" / "wm_server").rglob("*.py"):
        raised |= set(re.findall(r'\breason="([A-Z][A-Z_]+)"', path.read_text(encoding="utf-8")))
    assert raised, "the scan found no reason at all"
    assert raised <= known, sorted(raised - known)
