"""A memory's lifecycle and forgetting a user through the Python client and the ``wm`` CLI
(issue 35): supersedes, expire_time, include_superseded, the superseded state, PurgeUserData;
against real servers."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from client_support import Run

from support.server_process import ServerProcess
from wm_client import WmClient
from wm_client.errors import InvalidArgumentError, NotFoundError
from wm_proto.v1 import resources_pb2 as pb


async def test_the_client_supersedes_expires_and_searches_superseded(client: WmClient) -> None:
    owner = "users/lee"
    old = (
        await client.create_memory(owner, pb.MEMORY_TYPE_DECISION, "The ledger uses MySQL")
    ).memory
    later = datetime.now(UTC) + timedelta(days=30)
    new = (
        await client.create_memory(
            owner, pb.MEMORY_TYPE_DECISION, "The ledger uses CockroachDB",
            supersedes=[old.name.removeprefix("memories/")], expire_time=later,
        )
    ).memory  # fmt: skip
    assert list(new.supersedes) == [old.name] and new.owner == owner
    assert new.expire_time.seconds == int(later.timestamp())
    current = await client.search_memories("ledger uses", owner=owner)
    assert [h.memory.name for h in current.hits] == [new.name]
    both = await client.search_memories("ledger uses", owner=owner, include_superseded=True)
    assert [h.memory.name for h in both.hits] == [new.name, old.name]
    assert both.hits[1].memory.superseded_by == new.name
    assert both.hits[1].memory.state == pb.MEMORY_STATE_SUPERSEDED

    sooner = datetime.now(UTC) + timedelta(days=1)
    updated = await client.update_memory(new.name, expire_time=sooner)
    assert updated.expire_time.seconds == int(sooner.timestamp()) and updated.version == 1
    with pytest.raises(ValueError):
        await client.update_memory(new.name, expire_time=datetime(2030, 1, 1))  # naive
    with pytest.raises(InvalidArgumentError):
        await client.create_memory(
            owner, pb.MEMORY_TYPE_DECISION, "The ledger uses SQLite", supersedes=[old.name]
        )  # already superseded: nothing stored


async def test_the_client_purges_a_user(client: WmClient) -> None:
    await client.create_session("lee-1", user_id="lee")
    owner = "users/lee"
    await client.create_memory(owner, pb.MEMORY_TYPE_PROFILE, "Lee lives in Porto")
    reply = await client.purge_user_data("lee", request_id="purge-lee")
    assert (reply.purged_memory_count, reply.purged_session_count) == (1, 1)
    assert await client.purge_user_data("lee", request_id="purge-lee") == reply  # a retry
    assert list((await client.list_memories(owner=owner)).memories) == []
    with pytest.raises(NotFoundError):
        await client.get_session("lee-1")


def test_wm_memories_add_supersede_expire_and_purge_user(wm: Run, server: ServerProcess) -> None:
    first = wm("memories", "add", "Mo prefers light mode", "--user", "mo", "--type", "preference")
    assert first.returncode == 0, first.stderr
    old = first.stdout.split()[-1]
    assert old.startswith("mem_")
    second = wm(
        "memories", "add", "Mo prefers dark mode", "--user", "mo", "--type", "preference",
        "--supersedes", old, "--expires", "2031-05-01", "--json",
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    made = json.loads(second.stdout)["memory"]
    assert made["supersedes"] == [f"memories/{old}"] and made["owner"] == "users/mo"
    assert made["expire_time"].startswith("2031-05-01")
    new = made["name"].removeprefix("memories/")

    found = wm("memories", "search", "prefers mode", "--user", "mo")
    assert new in found.stdout and old not in found.stdout
    both = wm("memories", "search", "prefers mode", "--user", "mo", "--include-superseded")
    assert f"{old}  [preference] (superseded by {new})  Mo prefers light mode" in both.stdout
    superseded = wm("memories", "list", "--user", "mo", "--superseded", "--json")
    names = [json.loads(line)["name"] for line in superseded.stdout.splitlines()]
    assert names == [f"memories/{old}"]
    shown = wm("memories", "show", new)
    assert f"replaces {old}" in shown.stdout and "expires 2031-05-01 00:00:00" in shown.stdout
    expired = wm("memories", "expire", new, "--at", "2032-01-02T03:04:05+00:00")
    assert expired.returncode == 0, expired.stderr
    assert f"{new} expires 2032-01-02 03:04:05" in expired.stdout
    bad = wm("memories", "expire", new, "--at", "next tuesday")
    assert bad.returncode != 0 and "ISO 8601" in bad.stderr

    add = json.dumps({"id": "q1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
    assert wm("sessions", "create", "mo-1", "--user-id", "mo").returncode == 0
    assert wm("add", "mo-1", "-", stdin=add).returncode == 0
    assert wm("purge-user", "mo").returncode == 2  # no terminal to confirm on
    purged = wm("purge-user", "mo", "--yes")
    assert purged.returncode == 0, purged.stderr
    assert "forgot user mo: 2 memories, 1 sessions" in purged.stdout

    async def left() -> int:
        async with WmClient(server.address) as c:
            listed = await c.list_memories(owner="users/mo")
            return len(listed.memories)

    assert asyncio.run(left()) == 0
    assert wm("memories", "show", new).returncode == 4
