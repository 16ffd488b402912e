"""The Python coding-agent example, on the real anthropic SDK against the local Messages API
stand-in, with a real server on loopback: what reached the model and what the service holds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from coding_agent import CodingAgent, Workspace

from support.fake_anthropic import FakeAnthropic, text_only, tool_use
from support.server_process import free_port
from wm_client import CompactOutcome, WmClient
from wm_server.app import Application, start_application
from wm_server.config import Settings

SUMMARY_HEADER = "[Session History Summary]"
PARSER = "def split_fields(line):\n    return line.split(',')[:-1]  # drops the last field\n" * 30
TEST = "def test_parse():\n    assert split_fields('a,b,c') == ['a', 'b', 'c']\n" * 30


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[Application]:
    settings = Settings(
        address="127.0.0.1:0",
        data_dir=tmp_path / "wm",
        llm_provider="offline",
        shutdown_grace_seconds=0.5,
    )  # type: ignore[call-arg]
    application = await start_application(settings)
    yield application
    await application.stop(grace=0.5)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text") or b.get("content") or "") for b in content)


async def test_the_agent_loop_uses_the_service_as_a_runtime_should(
    app: Application, fake: FakeAnthropic, tmp_path: Path
) -> None:
    workspace = tmp_path / "repo"
    workspace.mkdir()
    (workspace / "parser.py").write_text(PARSER)
    (workspace / "test_parser.py").write_text(TEST)
    fake.enqueue(
        tool_use({"path": "parser.py"}, name="read_file"),
        text_only("split_fields has an off-by-one: it drops the last field."),
        tool_use({"path": "test_parser.py"}, name="read_file"),
        text_only("The test expects three fields; I fixed split_fields to keep the last one."),
        tool_use({"query": "off-by-one"}, name="archive_search"),
        text_only("Earlier we found the off-by-one in split_fields (archive_001)."),
    )
    async with WmClient(app.address) as wm:
        agent = CodingAgent(
            wm,
            anthropic.AsyncAnthropic(api_key="test", base_url=fake.base_url, max_retries=0),
            Workspace(workspace),
            "agent-1",
            token_budget=20_000,
            commit_ratio=0.05,  # a commit once 1,000 tokens wait: after the second turn
            wait_for_commits=True,
        )
        report = await agent.run(
            [
                "test_parse fails. Why?",
                "Check the test as well, then fix it.",
                "What did we find in parser.py at first?",
            ]
        )
        session = await wm.get_session("agent-1")

    requests = [r.body for r in fake.requests]
    assert len(requests) == report.model_calls == 6 and report.fallback_calls == 0
    # Within a turn, the runtime appends the call it is in the middle of to the context.
    assert requests[1]["messages"][-1]["content"][0]["type"] == "tool_result"
    assert PARSER in requests[1]["messages"][-1]["content"][0]["content"]
    # The recall tools the service defines were registered, beside the workspace's own.
    assert {t["name"] for t in requests[0]["tools"]} == {
        "archive_search",
        "archive_expand",
        "read_file",
    }

    # Turn 1 stayed below the threshold, turn 2 started the commit that archived turn 1.
    first, second, third = report.turns
    assert first.stored and first.commit is None
    assert second.commit is not None and second.pending_tokens >= second.threshold
    # Turn 3's first model call got the summary the commit wrote, in place of turn 1.
    opening = requests[4]["messages"]
    assert _text(opening[0]["content"]).startswith(SUMMARY_HEADER)
    assert "archive_search" in requests[4]["system"]
    assert not any(PARSER in _text(m["content"]) for m in opening), "turn 1 is archived"
    assert any(TEST in _text(m["content"]) for m in opening), "turn 2 is kept live"

    # The model's archive_search got a real answer from the server's archive.
    search = report.tool_calls[2]
    assert search.name == "archive_search" and not search.is_error
    assert "archive_001" in search.content and "off-by-one" in search.content
    sent_back = requests[5]["messages"][-1]["content"][0]
    assert sent_back["type"] == "tool_result" and sent_back["content"] == search.content

    assert third.stored
    compact = report.compact
    assert compact is not None and compact.outcome is CompactOutcome.COMPLETED
    assert "split_fields" in compact.summary
    assert compact.archived_message_count > 0 and compact.tokens_after < compact.tokens_before
    assert session.message_count == 0 and session.working_memory_version == 2


async def test_without_the_service_the_agent_goes_on_with_its_own_history(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    fake.enqueue(text_only("First answer."), text_only("Second answer."))
    async with WmClient(f"127.0.0.1:{free_port()}", timeout=5) as wm:  # nothing listens
        agent = CodingAgent(
            wm,
            anthropic.AsyncAnthropic(api_key="test", base_url=fake.base_url, max_retries=0),
            Workspace(tmp_path),
            "agent-down",
        )
        report = await agent.run(["first question", "second question"])
    assert report.answers == ["First answer.", "Second answer."]
    assert report.fallback_calls == report.model_calls == 2
    second = fake.requests[1].body["messages"]
    assert [_text(m["content"]) for m in second] == [
        "first question",
        "First answer.",
        "second question",
    ]
    assert all(not t.stored for t in report.turns) and report.turns[-1].unsent_messages == 4
    assert report.compact is not None and report.compact.outcome is CompactOutcome.UNAVAILABLE
