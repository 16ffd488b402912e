"""The OpenAI Agents SDK's own Runner keeps its history in the service through
:class:`WmAgentsSession`; its model is the real ``openai`` SDK against a local Chat
Completions server (``support.fake_openai``), the service a real server on loopback."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from support.fake_openai import FakeOpenAI, text_only, tool_call
from wm_client import FailedPreconditionError, WmClient

# The SDKs (the Agents SDK, openai, and the integration that imports them) are imported where
# they are used, not here: every collection of the suite would pay their import (~3.5 CPU s).
if TYPE_CHECKING:
    from agents import Agent


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    with FakeOpenAI() as server:
        yield server


def _agent(fake: FakeOpenAI) -> Agent:
    import openai
    from agents import Agent, OpenAIChatCompletionsModel, function_tool

    @function_tool
    def ledger_balance(account: str) -> str:
        """The balance of a ledger account."""
        return f"{account}: 1,234.56 EUR"

    model = OpenAIChatCompletionsModel(
        model="gpt-fake", openai_client=openai.AsyncOpenAI(api_key="test", base_url=fake.base_url)
    )
    return Agent(name="bookkeeper", instructions="Answer briefly.", model=model,
                 tools=[ledger_balance])  # fmt: skip


async def test_a_runner_stores_its_turns_and_reads_them_back(
    fake: FakeOpenAI, client: WmClient
) -> None:
    from agents import Runner

    from wm_client.integrations.openai_agents import WmAgentsSession

    session = WmAgentsSession(f"agents-{uuid.uuid4().hex[:8]}", client, history="live",
                              user_id="dee")  # fmt: skip
    fake.enqueue(tool_call({"account": "cash"}, name="ledger_balance"), text_only("Cash: 1,234.56"))
    result = await Runner.run(_agent(fake), "What is the cash balance?", session=session)
    assert result.final_output == "Cash: 1,234.56"

    items = await session.get_items()
    assert items[0] == {"role": "user", "content": "What is the cash balance?"}
    kinds = [i.get("type", "message") for i in items]  # type: ignore[union-attr]
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    assert json.loads(items[1]["arguments"]) == {"account": "cash"}  # type: ignore[typeddict-item]
    assert items[2]["output"] == "cash: 1,234.56 EUR"  # type: ignore[typeddict-item]
    assert await session.get_items(limit=1) == [{"role": "assistant", "content": "Cash: 1,234.56"}]
    stored = await client.get_session(session.session_id)
    assert stored.message_count == 4 and stored.user_id == "dee"

    # The next turn sends the stored history to the model.
    fake.enqueue(text_only("Still 1,234.56"))
    await Runner.run(_agent(fake), "And now?", session=session)
    sent = fake.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]

    popped = await session.pop_item()
    assert popped == {"role": "assistant", "content": "Still 1,234.56"}
    assert (await session.get_items())[-1] == {"role": "user", "content": "And now?"}
    assert (await client.get_session(session.session_id)).message_count == 5

    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None


async def test_assembled_history_summarizes_archived_turns_and_pop_refuses_them(
    fake: FakeOpenAI, client: WmClient
) -> None:
    from wm_client.integrations.openai_agents import WmAgentsSession

    session = WmAgentsSession(f"agents-{uuid.uuid4().hex[:8]}", client)
    await session.add_items([
        {"role": "user", "content": "Migrate the ledger to PostgreSQL."},
        {"role": "assistant", "content": "Done: the ledger runs on PostgreSQL 16."},
    ])  # fmt: skip
    async for _ in client.compact(session.session_id):
        pass
    items = await session.get_items()
    assert len(items) == 1 and items[0]["role"] == "user"  # type: ignore[typeddict-item]
    assert str(items[0]["content"]).startswith("[Session History Summary]")  # type: ignore[typeddict-item]
    with pytest.raises(FailedPreconditionError) as refused:
        await session.pop_item()
    assert refused.value.reason == "MESSAGES_NOT_LIVE"


def test_items_round_trip_through_messages() -> None:
    from wm_client.integrations.openai_agents import item_to_message, message_to_items

    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text",
                 "text": "think"}]}  # fmt: skip
    items = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Hi", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        reasoning,
        {"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]},
    ]  # fmt: skip
    back = [message_to_items(item_to_message(i, f"m{n}")) for n, i in enumerate(items)]  # type: ignore[arg-type]
    assert back[0] == [{"role": "system", "content": "Be brief."}]
    assert back[1] == [{"role": "assistant", "content": "Hi"}]
    assert back[2] == [items[2]] and back[3] == [items[3]] and back[4] == [reasoning]
    assert back[5] == [items[5]]  # not text: kept whole
