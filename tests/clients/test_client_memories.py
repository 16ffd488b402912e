"""Long-term memory through the Python client: the tool executor runs memory_store,
memory_search and memory_forget, the context engine recalls by default, and the ``wm
memories`` commands, all against real servers."""

from __future__ import annotations

import asyncio
import json
import re

from client_support import Run

from support.server_process import ServerProcess
from wm_client import WmClient
from wm_client.engine import ContextEngine
from wm_client.tools import MEMORY_TOOLS, ToolExecutor
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api


async def test_the_executor_stores_searches_and_forgets(client: WmClient) -> None:
    await client.create_session("t1", user_id="ana")
    tools = ToolExecutor(client, "t1", tools=MEMORY_TOOLS)
    stored = await tools.run("memory_store", {"type": "preference", "text": "Likes dark mode"})
    assert not stored.is_error and stored.content.startswith("stored as mem_")
    memory_id = stored.content.split()[-1]
    again = await tools.run("memory_store", '{"type": "preference", "text": "likes dark mode."}')
    assert again.content == f"already known as {memory_id}"
    found = await tools.run("memory_search", {"query": "dark mode?"})
    assert memory_id in found.content and "[preference] Likes dark mode" in found.content
    bad = await tools.run("memory_store", {"type": "mood", "text": "x"})
    assert bad.is_error and "preference" in bad.content
    forgot = await tools.run("memory_forget", {"memory_id": memory_id})
    assert forgot.content == f"forgot {memory_id}"
    assert "no memory matches" in (await tools.run("memory_search", {"query": "dark"})).content
    missing = await tools.run("memory_forget", {"memory_id": memory_id})
    assert missing.is_error and "not found" in missing.content


async def test_the_engine_recalls_memories_of_the_same_user(client: WmClient) -> None:
    await client.create_session("e1", user_id="bo")
    made = await client.create_memory("users/bo", pb.MEMORY_TYPE_PROFILE, "Bo works at Acme Ledger")
    assert made.memory.owner == "users/bo" and made.memory.name.startswith("memories/mem_")
    await client.create_session("e2", user_id="bo")
    engine = ContextEngine(client)
    await client.add_messages(
        "e2", [pb.Message(id="q", role=pb.ROLE_USER, parts=[pb.Part(text="Where does Bo work?")])]
    )
    context = await engine.assemble("e2", 50_000)
    assert list(context.recalled_memories) == [made.memory.name]
    assert "Acme Ledger" in context.system_prompt_addition
    quiet = await engine.assemble("e2", 50_000, recall_memories=False)
    assert not quiet.recalled_memories


def test_wm_memories_search_list_show_and_forget(wm: Run, server: ServerProcess) -> None:
    add = json.dumps({"id": "q1", "role": "user", "parts": [{"type": "text", "text": "hello"}]})
    assert wm("add", "cli-mem", "-", stdin=add).returncode == 0

    # Stored through the API (no CLI command creates memories), then used with the CLI.
    async def store() -> str:
        async with WmClient(server.address) as c:
            reply = await c.create_memory(
                "sessions/cli-mem", pb.MEMORY_TYPE_DECISION,
                "Ledger moves to Postgres for transactions",
            )  # fmt: skip
            return reply.memory.name.removeprefix("memories/")

    memory_id = asyncio.run(store())
    found = wm("memories", "search", "postgres ledger", "--session", "cli-mem")
    assert found.returncode == 0 and memory_id in found.stdout, found.stderr
    listed = wm("memories", "list", "--session", "cli-mem", "--type", "decision", "--json")
    names = [json.loads(line)["name"] for line in listed.stdout.splitlines()]
    assert names == [f"memories/{memory_id}"]
    shown = wm("memories", "show", memory_id)
    assert "Ledger moves to Postgres" in shown.stdout and "version 1" in shown.stdout
    assert wm("memories", "retire", memory_id).returncode == 2  # a reason is required
    retired = wm("memories", "retire", memory_id, "--reason", "the ledger stays on SQLite")
    assert retired.returncode == 0, retired.stderr
    assert "retired " + memory_id + ": the ledger stays on SQLite" in retired.stdout
    assert wm("memories", "list", "--session", "cli-mem", "--json").stdout == ""
    kept = wm("memories", "list", "--session", "cli-mem", "--retired", "--json")
    assert json.loads(kept.stdout)["retire_reason"] == "the ledger stays on SQLite"
    refused = wm("memories", "forget", memory_id)
    assert refused.returncode == 2  # no terminal to confirm on
    assert wm("memories", "forget", memory_id, "--yes").returncode == 0
    assert wm("memories", "show", memory_id).returncode == 4
    ranked = wm("search", "ledger", "--session", "cli-mem", "--ranked")
    assert ranked.returncode == 0


def test_the_client_previews_extraction_without_writing(server: ServerProcess) -> None:
    said = "I prefer tabs over spaces, and my name is Dana Whitfield."

    async def preview() -> tuple[api.PreviewMemoryExtractionResponse, api.ListMemoriesResponse]:
        async with WmClient(server.address) as client:
            await client.create_session("p1", user_id="dana")
            message = pb.Message(id="m1", role=pb.ROLE_USER, parts=[pb.Part(text=said)])
            await client.add_messages("p1", [message])
            found = await client.preview_memory_extraction("p1")
            return found, await client.list_memories(owner="users/dana")

    found, listed = asyncio.run(preview())
    assert [(op.type, op.text, op.verdict) for op in found.ops] == [
        (
            pb.MEMORY_TYPE_PREFERENCE,
            "The user prefers tabs over spaces.",
            pb.MEMORY_OP_VERDICT_ACCEPTED,
        ),
        (
            pb.MEMORY_TYPE_PROFILE,
            "The user's name is Dana Whitfield.",
            pb.MEMORY_OP_VERDICT_ACCEPTED,
        ),
    ]
    assert list(listed.memories) == []  # a dry run


def test_wm_memories_preview_prints_what_would_be_kept(wm: Run) -> None:
    said = "We decided to use PostgreSQL 16 for the ledger because of logical replication."
    add = json.dumps({"id": "q1", "role": "user", "parts": [{"type": "text", "text": said}]})
    assert wm("add", "cli-preview", "-", stdin=add).returncode == 0
    shown = wm("memories", "preview", "cli-preview")
    assert shown.returncode == 0, shown.stderr
    assert "keep  create decision: The team decided to use PostgreSQL 16" in shown.stdout
    # Once kept, a later switch shows the decision it would supersede.
    assert wm("commit", "cli-preview", "--keep", "0", "--follow").returncode == 0
    said = "We switched the ledger from PostgreSQL 16 to CockroachDB because it scales writes."
    add = json.dumps({"id": "q3", "role": "user", "parts": [{"type": "text", "text": said}]})
    assert wm("add", "cli-preview", "-", stdin=add).returncode == 0
    switched = wm("memories", "preview", "cli-preview")
    assert switched.returncode == 0, switched.stderr
    assert re.search(
        r"keep  create decision: The team switched the ledger from PostgreSQL 16 to CockroachDB"
        r".*\n\s+supersedes mem_\w+: The team decided to use PostgreSQL 16 for the ledger",
        switched.stdout,
    ), switched.stdout
    chat = json.dumps({"id": "q2", "role": "user", "parts": [{"type": "text", "text": "Hello!"}]})
    assert wm("add", "cli-quiet", "-", stdin=chat).returncode == 0
    quiet = wm("memories", "preview", "cli-quiet")
    assert "nothing would be kept from 1 messages (nothing_new)" in quiet.stdout, quiet.stdout
