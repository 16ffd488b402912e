"""The recall-tool executor and turn-aware commits of the Python client, on a real server."""

from __future__ import annotations

import json

import pytest

from support import builders as b
from wm_client import ContextEngine, ToolExecutor, WmClient
from wm_proto.v1 import resources_pb2 as pb

LOG = "".join(f"line {n}: ok\n" for n in range(6000)) + "FATAL: disk quota exceeded on /srv\n"


async def _session(client: WmClient) -> None:
    await client.add_messages(
        "tools",
        [
            b.user("Remember the code word heliotrope and deploy", "u1"),
            b.tool_call("t1", "bash", {"cmd": "deploy"}, "c1"),
            b.tool_result("t1", LOG, message_id="r1"),
            b.assistant("The deploy failed: disk quota.", "a1"),
        ],
        create_session_if_missing=True,
    )


async def test_the_executor_runs_each_recall_tool_with_bounded_results(client: WmClient) -> None:
    await _session(client)
    stream = client.commit("tools", 0)
    await stream.wait()
    tools = ToolExecutor(client, "tools", max_chars=2000)
    found = await tools.run("archive_search", {"query": "HELIOTROPE"})
    assert (
        not found.is_error and "archive_001, message u1 (user; words and meaning)" in found.content
    )
    assert found.content.index("message u1") < found.content.index("message c1")  # best first
    expanded = await tools.run("archive_expand", json.dumps({"archive_id": "archive_001"}))
    assert expanded.content.startswith("archive_001: 4 message(s)")
    assert "[user u1]\nRemember the code word heliotrope" in expanded.content
    assert len(expanded.content) <= 2000  # the synopsis is long: the result is bounded
    read = await tools.run("tool_output_read", {"output_id": "out.r1.0", "start_line": 6001})
    assert read.content == "out.r1.0: lines 6001-6001 of 6001\nFATAL: disk quota exceeded on /srv\n"
    first = await tools.run("tool_output_read", {"output_id": "out.r1.0", "line_count": 1000})
    assert len(first.content) <= 2000 and "cut at 2,000" in first.content
    block = read.anthropic_block("toolu_9")
    assert block == {
        "type": "tool_result", "tool_use_id": "toolu_9", "content": read.content,
        "is_error": False,
    }  # fmt: skip


async def test_bad_calls_come_back_as_error_results(client: WmClient) -> None:
    await _session(client)
    tools = ToolExecutor(client, "tools", tools=("archive_search", "tool_output_read"))
    assert (await tools.run("archive_expand", {"archive_id": "archive_001"})).is_error
    assert (await tools.run("archive_search", {"query": 3})).is_error
    assert (await tools.run("archive_search", "{not json")).is_error
    missing = await tools.run("tool_output_read", {"output_id": "out.nope.0"})
    assert missing.is_error and "not found" in missing.content
    bad = await tools.run("archive_search", {"query": "x", "archive_id": "nope"})
    assert bad.is_error and "archive_001" in bad.content  # the format, in the model's terms
    unread = await tools.run("tool_output_read", {"output_id": "nope"})
    assert unread.is_error and "out.m12.0" in unread.content
    with pytest.raises(ValueError):
        ToolExecutor(client, "tools", tools=("rm_rf",))


async def test_the_prompt_addition_names_only_the_registered_tools(client: WmClient) -> None:
    await _session(client)
    await client.commit("tools", 0).wait()
    engine = ContextEngine(client)
    tools = ToolExecutor(client, "tools", tools=("archive_search",))
    only = await engine.assemble("tools", 100_000, registered_tools=tools.names)
    assert "archive_search" in only.system_prompt_addition
    assert "archive_expand" not in only.system_prompt_addition
    assert "tool_output_read" not in only.system_prompt_addition
    none = await engine.assemble("tools", 100_000, registered_tools=[])
    assert none.system_prompt_addition.startswith("This conversation continues")
    assert "archive_" not in none.system_prompt_addition
    every = await engine.assemble("tools", 100_000)
    assert all(n in every.system_prompt_addition for n in ToolExecutor(client, "tools").names)
    from wm_client import InvalidArgumentError

    with pytest.raises(InvalidArgumentError) as caught:
        await engine.assemble("tools", 100_000, registered_tools=["rm_rf"])
    violations = caught.value.field_violations
    assert [(v.field, v.reason) for v in violations] == [("registered_tools.names[0]", "string.in")]


async def test_the_engine_keeps_whole_turns_by_default(client: WmClient) -> None:
    engine = ContextEngine(client)
    turn1 = [b.user("first question", "q1"), b.assistant("x" * 400, "a1")]
    turn2 = [
        b.user("second question", "q2"),
        b.tool_call("t2", "ls", {}, "c2"),
        b.tool_result("t2", "a.py", message_id="r2"),
        b.assistant("y" * 400, "a2"),
    ]
    turn3 = [b.user("third question", "q3"), b.assistant("z" * 400, "a3")]
    await engine.after_turn("turns", turn1 + turn2, token_budget=1_000_000)
    result = await engine.after_turn("turns", turn3, token_budget=100, commit_ratio=0.0)
    assert result.commit is not None
    first = await result.commit.phase1()
    assert first.phase1.archived_message_count == 2  # turn 1; turns 2 and 3 are kept whole
    session = await client.get_session("turns")
    assert session.message_count == 6 and session.keep_recent_count == 6
    await engine.aclose()
    assert first.stage == pb.COMMIT_STAGE_ARCHIVED or first.phase1.archived
