"""Client-applied ops are audited like a commit (issue 36, defects 1 and 2), on a real server
process, through ``wm`` (in-process, client_support.run_cli) and the inspector's HTTP pages.

The issue's reproduction: ``wm demo`` replays the bundled session (the offline summarizer
writes Files & Context, with lines such as ``~/.local/share/ledgerline/ledger.db — in bash
output``); then a client's own model sends, through ApplyWorkingMemoryOps, an UPDATE of
Files & Context that leaves every path out. Every dropped path comes back with a decision,
and the decisions are kept with the version: GetWorkingMemory returns them, ``wm memory
history`` counts them and the inspector's page of the version shows them, as for a commit.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator

import pytest
from client_support import run_cli

from support.server_process import ServerProcess, free_port
from wm_client import WmClient
from wm_core import references
from wm_proto.v1 import resources_pb2 as pb

FILES = "Files & Context"
HOME_PATH = "~/.local/share/ledgerline/ledger.db"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    port = free_port()
    server = ServerProcess(
        tmp_path_factory.mktemp("audit"), WM_INSPECTOR_ADDRESS=f"127.0.0.1:{port}"
    ).start()
    try:
        demo = run_cli(server.address, "demo", "--session", "d")
        assert demo.returncode == 0, demo.stdout + demo.stderr
        # the last turns, where the home path is read, stay live after the demo: commit them
        compact = run_cli(server.address, "compact", "d")
        assert compact.returncode == 0, compact.stdout + compact.stderr
        yield server, f"http://127.0.0.1:{port}"
    finally:
        server.terminate()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


async def test_client_ops_restore_every_path_and_keep_their_decisions(
    served: tuple[ServerProcess, str],
) -> None:
    server, inspector = served
    async with WmClient(server.address) as wm:
        before = await wm.get_working_memory("d")
        old_files = next(s.body for s in before.sections if s.name == FILES)
        assert HOME_PATH in old_files  # the line of the issue is there to lose
        old_refs = references(old_files)
        answer = await wm.apply_working_memory_ops(
            "d",
            [
                pb.SectionOp(
                    section=FILES,
                    kind=pb.SECTION_OP_KIND_UPDATE,
                    content="- README.md — the usage section was rewritten",
                )
            ],
            expected_version=before.version,
        )
        stored = await wm.get_working_memory("d", version=answer.working_memory.version)
    new_files = next(s.body for s in stored.sections if s.name == FILES)
    assert old_refs <= references(new_files)  # no path lost
    restored = [item for d in answer.decisions if d.guard == "files" for item in d.restored_items]
    lost = {r for line in restored for r in references(line)}
    assert old_refs - references("- README.md") <= lost  # each restored with a decision
    assert any(HOME_PATH in line for line in restored)
    # The decisions are kept with the version, exactly as the call returned them.
    assert list(stored.decisions) == list(answer.decisions)
    assert not before.decisions  # a version a commit stored: its commit has them

    # wm memory history: the client version counts its decisions (it showed "-")
    history = run_cli(server.address, "memory", "history", "d", "--json")
    assert history.returncode == 0, history.stderr
    rows = {r["version"]: r for r in map(json.loads, history.stdout.splitlines())}
    row = rows[stored.version]
    assert row["commit"] == "" and row["decision_count"] == len(answer.decisions) > 0
    table = run_cli(server.address, "memory", "history", "d")
    cells = [
        [cell.strip() for cell in line.split("│")]
        for line in table.stdout.splitlines()
        if f" v{stored.version} " in line
    ]
    assert cells, table.stdout
    assert "(client ops)" in cells[0] and str(len(answer.decisions)) in cells[0], cells

    # the inspector's page of the version shows them, as it does a commit's
    url = f"{inspector}/sessions/d/memory?version={stored.version}"
    page = await asyncio.to_thread(_get, url)
    assert f"guard <b>files</b> on Files &amp; Context (client ops (v{stored.version}))" in page
    assert HOME_PATH in page
