"""``wm-mcp`` through the MCP SDK's own client: in process (memory streams) and as a child
process over stdio and streamable HTTP, against a real server on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from integration_support import seeded_session

from support.server_process import ServerProcess
from wm_client import WmClient

# The MCP SDK (and the integration on it) is imported where it is used, not here: every
# collection of the suite would pay its import (~2 CPU s).
if TYPE_CHECKING:
    from wm_client.integrations.mcp_server import WmMcp

WM_MCP = str(Path(sys.executable).with_name("wm-mcp"))
KEY = "integration-key-0123456789"


def _text(result: object) -> str:
    content = getattr(result, "content")  # noqa: B009 - a CallToolResult
    return "\n".join(block.text for block in content if getattr(block, "type", "") == "text")


@pytest.fixture
async def wm(server: ServerProcess, client: WmClient) -> AsyncIterator[WmMcp]:
    from wm_client.integrations.mcp_server import WmMcp

    session = f"mcp-{uuid.uuid4().hex[:8]}"
    await seeded_session(client, session, "ana")
    mcp = WmMcp(server.address, session_id=session)
    yield mcp
    await mcp.close()


async def test_the_tools_are_listed_with_descriptions_for_models(wm: WmMcp) -> None:
    from mcp import Client

    async with Client(wm.server) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        templates = (await mcp.list_resource_templates()).resource_templates
    assert set(tools) == {
        "recall", "expand_archive", "read_tool_output", "search_tool_outputs", "search_memories",
        "remember", "forget", "read_working_memory", "assemble_context",
    }  # fmt: skip
    for tool in tools.values():
        assert tool.description and len(tool.description) > 60, tool.name
        for name, schema in tool.input_schema["properties"].items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"
    assert tools["recall"].input_schema["required"] == ["query"]
    assert tools["forget"].annotations is not None and tools["forget"].annotations.destructive_hint
    assert {t.uri_template for t in templates} == {
        "wm://sessions/{session_id}/working-memory", "wm://sessions/{session_id}/memories",
    }  # fmt: skip


async def test_recall_tool_outputs_working_memory_and_context_in_process(wm: WmMcp) -> None:
    from mcp import Client

    async with Client(wm.server) as mcp:
        recalled = _text(await mcp.call_tool("recall", {"query": "PostgreSQL ledger"}))
        assert "archive_001, message u1 (user; words and meaning)" in recalled
        assert "best first" in recalled
        # Hybrid recall: a query no archived message has a word of finds only what is near it
        # by meaning, and says so on every line; a query of symbols only is matched literally.
        loose = _text(await mcp.call_tool("recall", {"query": "kubernetes"})).splitlines()
        heads = [line.split("): ")[0] for line in loose if line.startswith("- archive_")]
        assert heads and all(head.endswith(("; meaning", "; weak")) for head in heads)
        assert any(head.endswith("; meaning") for head in heads)
        missing = _text(await mcp.call_tool("recall", {"query": "%%%"}))
        assert missing == "nothing archived matches '%%%'"

        expanded = _text(await mcp.call_tool("expand_archive", {"archive_id": "archive_001"}))
        assert "Plan: dump the SQLite ledger" in expanded

        found = _text(await mcp.call_tool("search_tool_outputs", {"query": "linker lost"}))
        assert found == "- out.r2.0 line 2001: ERROR: linker lost ledger.o"
        lines = _text(await mcp.call_tool(
            "read_tool_output", {"output_id": "out.r2.0", "start_line": 2000, "line_count": 2}))  # fmt: skip
        assert "compile unit 1999: ok\nERROR: linker lost ledger.o" in lines

        document = _text(await mcp.call_tool("read_working_memory", {}))
        assert "## Session Title" in document and "PostgreSQL" in document

        context = await mcp.call_tool("assemble_context", {"token_budget": 30_000})
        assembled = context.structured_content
        assert assembled["working_memory_version"] == 1
        (only,) = assembled["messages"]  # the summary and the live request: one user turn
        assert only["role"] == "user"
        assert only["content"].startswith("[Session History Summary]")
        assert only["content"].endswith("Now write the rollback procedure.")
        assert "Migrate the invoicing ledger" in only["content"]

        resource = await mcp.read_resource(f"wm://sessions/{wm.session_id}/working-memory")
        assert resource.contents[0].text == document


async def test_memories_are_remembered_searched_read_and_forgotten(wm: WmMcp) -> None:
    from mcp import Client

    async with Client(wm.server) as mcp:
        stored = _text(await mcp.call_tool(
            "remember", {"text": "Ana prefers rollbacks scripted in Bash", "type": "preference"}))  # fmt: skip
        assert stored.startswith("stored as mem_")
        memory_id = stored.split()[-1]
        found = _text(await mcp.call_tool("search_memories", {"query": "rollbacks Bash"}))
        assert f"{memory_id} [preference] Ana prefers rollbacks scripted in Bash" in found
        listed = await mcp.read_resource(f"wm://sessions/{wm.session_id}/memories")
        assert {"memory_id": memory_id, "type": "preference",
                "text": "Ana prefers rollbacks scripted in Bash"} in json.loads(
            listed.contents[0].text)  # fmt: skip
        assert _text(await mcp.call_tool("forget", {"memory_id": memory_id})) == (
            f"forgot {memory_id}"
        )
        gone = await mcp.call_tool("forget", {"memory_id": memory_id})
        assert gone.is_error and "not found" in _text(gone)
        bad = await mcp.call_tool("remember", {"text": "x", "type": "mood"})
        assert bad.is_error and "preference" in _text(bad)


async def test_refusals_are_tool_errors_a_model_can_read(wm: WmMcp) -> None:
    from mcp import Client

    from wm_client.integrations.mcp_server import WmMcp

    async with Client(wm.server) as mcp:
        unknown = await mcp.call_tool("read_working_memory", {"session_id": "nope"})
        assert unknown.is_error and "session 'nope' not found" in _text(unknown)
        empty = await mcp.call_tool("recall", {"query": "  "})
        assert empty.is_error and "non-empty query" in _text(empty)
    unbound = WmMcp(wm.address)
    async with Client(unbound.server) as mcp:
        no_session = await mcp.call_tool("recall", {"query": "ledger"})
        assert no_session.is_error and "pass session_id" in _text(no_session)
        given = await mcp.call_tool("recall", {"query": "ledger", "session_id": wm.session_id})
        assert not given.is_error and "archive_001" in _text(given)
    await unbound.close()


def _environment(address: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    env.update(WM_ADDRESS=address, **extra)
    return env


async def test_wm_mcp_over_stdio(server: ServerProcess, client: WmClient) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    await seeded_session(client, "mcp-stdio", "bo")
    params = StdioServerParameters(
        command=WM_MCP, args=["--session", "mcp-stdio"], env=_environment(server.address)
    )
    async with Client(params) as mcp:
        recalled = _text(await mcp.call_tool("recall", {"query": "rebuild ledger.o"}))
        assert "archive_001, message a3 (assistant; words and meaning)" in recalled
        resource = await mcp.read_resource("wm://sessions/mcp-stdio/working-memory")
        assert "## Session Title" in resource.contents[0].text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A server that requires API keys, and ``wm-mcp --transport http`` configured with one."""
    secured = ServerProcess(tmp_path_factory.mktemp("secured"), WM_API_KEYS=f"acme:{KEY}")
    secured.start()
    port = _free_port()
    child = subprocess.Popen(
        [WM_MCP, "--transport", "http", "--port", str(port), "--session", "mcp-http"],
        env=_environment(secured.address, WM_API_KEY=KEY),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield secured, f"http://127.0.0.1:{port}/mcp"
    finally:
        child.terminate()
        child.wait(timeout=10)
        secured.terminate()


async def test_wm_mcp_over_streamable_http_with_an_api_key(
    http_mcp: tuple[ServerProcess, str],
) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from wm_client.integrations.mcp_server import WmMcp

    secured, url = http_mcp
    async with WmClient(secured.address, api_key=KEY) as wm:
        await seeded_session(wm, "mcp-http", "cy")
    async with Client(url) as mcp:
        recalled = _text(await mcp.call_tool("recall", {"query": "COPY ledger"}))
        assert "archive_001, message a1 (assistant; words" in recalled
    # A request's own Authorization header wins over the configured key.
    wrong = httpx2.AsyncClient(headers={"Authorization": "Bearer not-the-key-0123456789"})
    async with wrong, Client(streamable_http_client(url, http_client=wrong)) as mcp:
        refused = await mcp.call_tool("recall", {"query": "COPY ledger"})
        assert refused.is_error and "invalid credentials" in _text(refused)
    # Without the key the service refuses, and the model is told so.
    keyless = WmMcp(secured.address, session_id="mcp-http")
    async with Client(keyless.server) as mcp:
        refused = await mcp.call_tool("read_working_memory", {})
        assert refused.is_error and "missing credentials" in _text(refused)
    await keyless.close()
