"""The server, its web inspector included, needs nothing of the client's command line: the
inspector's words come from ``wm_client.describe``, which imports no ``rich`` (the ``[cli]``
extra the server does not install).

The pages are fetched from a real server process in which ``rich`` cannot be imported at all,
and must show the same words for a commit's state, stages and events as ``describe`` gives for
what the gRPC API returns.
"""

from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

import aiohttp

from support.server_process import ServerProcess, free_port
from support.wm_names import last_segment
from wm_client import WmClient
from wm_client.describe import event_detail, stage_name, state_name, when
from wm_proto.v1 import resources_pb2 as pb

INSPECTOR_MODULES = (
    "wm_server.inspector",
    "wm_server.inspector.charts",
    "wm_server.inspector.config_view",
    "wm_server.inspector.csrf",
    "wm_server.inspector.layout",
    "wm_server.inspector.live",
    "wm_server.inspector.memories",
    "wm_server.inspector.overview",
    "wm_server.inspector.params",
    "wm_server.inspector.web",
    "wm_client.describe",
)


def test_importing_the_inspector_imports_no_rich() -> None:
    code = (
        f"import sys\nfor name in {INSPECTOR_MODULES!r}:\n    __import__(name)\n"
        "loaded = sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.'))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _without_rich(folder: Path) -> str:
    """A PYTHONPATH on which ``import rich`` fails as it does where rich is not installed."""
    (folder / "rich").mkdir(parents=True)
    (folder / "rich" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'rich'\", name='rich')\n"
    )
    return os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)


def _messages(n: int) -> list[pb.Message]:
    return [
        pb.Message(
            id=f"m{i}",
            role=pb.ROLE_USER if i % 2 == 0 else pb.ROLE_ASSISTANT,
            parts=[pb.Part(text=f"step {i}: edit app/cli.py")],
        )
        for i in range(n)
    ]


async def test_the_inspector_draws_its_pages_where_rich_cannot_be_imported(
    tmp_path: Path,
) -> None:
    inspector = free_port()
    server = ServerProcess(
        tmp_path / "data",
        WM_INSPECTOR_ADDRESS=f"127.0.0.1:{inspector}",
        PYTHONPATH=_without_rich(tmp_path / "no-rich"),
    ).start(timeout=60)
    try:
        async with WmClient(server.address) as client:
            await client.add_messages("s1", _messages(6), create_session_if_missing=True)
            events = [event async for event in client.commit("s1", keep_recent_count=0)]
            commit = await client.get_commit("s1", events[-1].commit)
            session = await client.get_session("s1")
        commit_id = last_segment(commit.name)
        assert commit.state == pb.COMMIT_STATE_COMPLETED
        base = f"http://127.0.0.1:{inspector}"
        async with aiohttp.ClientSession() as http:
            pages = {}
            for path in ("/", "/sessions/s1", f"/sessions/s1/commits/{commit_id}"):
                async with http.get(base + path) as answer:
                    assert answer.status == 200, (path, await answer.text())
                    pages[path] = await answer.text()
    finally:
        server.terminate()
    assert "No module named 'rich'" not in server.log_path.read_text()
    assert html.escape(when(session.update_time)) in pages["/"]
    assert commit_id in pages["/sessions/s1"]
    assert f"state-{state_name(commit.state)}" in pages["/sessions/s1"]
    commit_page = pages[f"/sessions/s1/commits/{commit_id}"]
    assert f"<td id=commit-state>{state_name(commit.state)}</td>" in commit_page
    stored = [e for e in events if e.stage != pb.COMMIT_STAGE_HEARTBEAT]
    assert len(stored) >= 3
    for event in stored:
        assert html.escape(stage_name(event.stage)) in commit_page
        assert html.escape(event_detail(event)) in commit_page
