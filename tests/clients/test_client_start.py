"""What a new user meets first, against real servers: `wm --connect-timeout` waits for a
server that is still starting, `wm sessions create` sets the owner and the config,
update_memory corrects a memory, and the memory tools add to the archive tools."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

from client_support import WM, Run

from support.server_process import ServerProcess, free_port
from wm_client import MEMORY_TOOLS, RECALL_TOOLS, ToolExecutor, WmClient
from wm_proto.v1 import resources_pb2 as pb


def test_connect_timeout_waits_for_a_server_still_starting(tmp_path: Path) -> None:
    """Connections are refused for the first seconds; the command waits, then succeeds."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    env.update(WM_ADDRESS=f"127.0.0.1:{port}", NO_COLOR="1", TERM="dumb")
    command = [str(WM), "--connect-timeout", "60", "sessions", "list"]
    waiting = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(2.0)  # every attempt so far was refused
        assert waiting.poll() is None, waiting.communicate()[1].decode()
        server = ServerProcess(tmp_path, port=port).start()
        try:
            out, err = waiting.communicate(timeout=60)
            assert waiting.returncode == 0, err.decode()
            assert "no sessions" in out.decode()
        finally:
            server.terminate()
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()


def test_without_connect_timeout_a_refused_connection_fails_at_once() -> None:
    """The command says the server cannot be reached (exit 3) instead of waiting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    env.update(WM_ADDRESS=f"127.0.0.1:{free_port()}")
    result = subprocess.run(
        [str(WM), "sessions", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 3
    assert "cannot reach the Working Memory Service" in result.stderr


async def test_fail_fast_gives_up_at_the_first_refused_connection() -> None:
    """What the command relies on: with ``fail_fast`` a refused connection ends the wait at
    once, however long the wait could have been (without it the wait would take the whole
    hour, and the outer bound below fails the test; no tight clock involved)."""
    async with WmClient(f"127.0.0.1:{free_port()}") as client:
        async with asyncio.timeout(120):
            assert await client.wait_ready(3600, fail_fast=True) is False


def test_sessions_create_with_owner_and_config(wm: Run) -> None:
    config = '{"memoryExtraction": false, "toolOutputInlineChars": 5000}'
    made = wm("sessions", "create", "cli-new", "--user-id", "ana", "--config", config, "--json")
    assert made.returncode == 0, made.stderr
    session = json.loads(made.stdout)
    assert session["name"] == "sessions/cli-new" and session["user_id"] == "ana"
    assert session["config"]["memory_extraction"] is False
    assert session["config"]["tool_output_inline_chars"] == 5000
    human = wm("sessions", "create", "--agent-id", "bot")
    assert human.returncode == 0 and "for agent bot" in human.stdout
    bad = wm("sessions", "create", "cli-bad", "--config", '{"noSuchField": 1}')
    assert bad.returncode == 2 and "--config" in bad.stderr
    assert wm("sessions", "show", "cli-bad").returncode == 4  # nothing was created


async def test_update_memory_writes_the_fields_given(client: WmClient) -> None:
    made = (await client.create_memory("users/cy", pb.MEMORY_TYPE_PREFERENCE, "Likes tea")).memory
    memory_id = made.name.removeprefix("memories/")
    updated = await client.update_memory(memory_id, text="Likes green tea", reason="precise")
    assert updated.text == "Likes green tea" and updated.type == pb.MEMORY_TYPE_PREFERENCE
    assert [(v.text, v.reason) for v in updated.history] == [("Likes tea", "precise")]
    retyped = await client.update_memory(made.name, memory_type=pb.MEMORY_TYPE_PROFILE)
    assert retyped.text == "Likes green tea" and retyped.type == pb.MEMORY_TYPE_PROFILE


async def test_memory_tools_add_to_the_archive_tools(client: WmClient) -> None:
    assert ToolExecutor(client, "s").names == RECALL_TOOLS
    both = ToolExecutor(client, "s", memory_tools=True).names
    assert both == (*RECALL_TOOLS, *MEMORY_TOOLS)
    assert ToolExecutor(client, "s", tools=MEMORY_TOOLS).names == MEMORY_TOOLS
