"""LangChain's chat history, LangGraph's store and a LangGraph agent's pre-model hook over a
real server, with the real langchain-core and langgraph packages."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import pytest
from integration_support import seeded_session
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.prebuilt import create_react_agent

from wm_client import WmClient
from wm_client.integrations.langchain import (
    WmChatMessageHistory,
    WmMemoryStore,
    assembled_context_hook,
)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_the_chat_history_round_trips_messages_and_tool_calls(client: WmClient) -> None:
    history = WmChatMessageHistory(_name("lc"), client)
    assert await history.aget_messages() == []
    await history.aadd_messages([
        SystemMessage("Be brief."),
        HumanMessage("What is the cash balance?"),
        AIMessage("", tool_calls=[{"id": "c1", "name": "balance", "args": {"account": "cash"}}]),
        ToolMessage("1,234.56 EUR", tool_call_id="c1"),
        AIMessage("1,234.56 EUR."),
    ])  # fmt: skip
    back = await history.aget_messages()
    assert [type(m).__name__ for m in back] == [
        "SystemMessage", "HumanMessage", "AIMessage", "ToolMessage", "AIMessage",
    ]  # fmt: skip
    assert back[2].tool_calls == [  # type: ignore[attr-defined]
        {"id": "c1", "name": "balance", "args": {"account": "cash"}, "type": "tool_call"}
    ]
    assert back[3].content == "1,234.56 EUR" and back[3].tool_call_id == "c1"  # type: ignore[attr-defined]
    # The synchronous methods do the same (on a worker thread with a client of their own).
    history.add_messages([HumanMessage("Thanks")])
    assert [m.content for m in history.messages][-2:] == ["1,234.56 EUR.", "Thanks"]
    history.clear()
    assert await history.aget_messages() == []


async def test_the_assembled_history_starts_with_the_summary(client: WmClient) -> None:
    session = _name("lc-sum")
    await seeded_session(client, session, "eve")
    history = WmChatMessageHistory(session, client, history="assembled")
    (first, *_) = await history.aget_messages()
    assert isinstance(first, HumanMessage) and first.text.startswith("[Session History Summary]")


async def test_the_store_keeps_memories_by_namespace_and_searches_them(client: WmClient) -> None:
    store = WmMemoryStore(client)
    user = _name("u")
    prefs = ("users", user, "preference")
    await store.aput(prefs, "editor", {"text": "Prefers Vim keybindings", "tool": "vim"})
    await store.aput(("users", user), "team", {"text": "Works in the payments team",
                                                "type": "profile"})  # fmt: skip
    item = await store.aget(prefs, "editor")
    assert item is not None and item.value["text"] == "Prefers Vim keybindings"
    assert item.value["tool"] == "vim" and item.key == "editor" and item.namespace == prefs
    hits = await store.asearch(("users", user), query="vim keybindings")
    assert [h.key for h in hits] == ["editor"] and hits[0].score and hits[0].score > 0
    assert [h.key for h in await store.asearch(("users", user, "profile"), query="payments")] == [
        "team"
    ]
    # A put replaces the key's memory; None forgets it; sync methods work too.
    store.put(prefs, "editor", {"text": "Prefers Emacs keybindings"})
    replaced = store.get(prefs, "editor")
    assert replaced is not None and replaced.value["text"] == "Prefers Emacs keybindings"
    await store.adelete(prefs, "editor")
    assert await store.aget(prefs, "editor") is None
    with pytest.raises(ValueError, match="namespace"):
        await store.aget(("nowhere",), "x")
    with pytest.raises(ValueError, match="needs value"):
        await store.aput(("users", user), "k", {"text": "no type"})


class RecordingModel(BaseChatModel):
    """A chat model that answers a fixed text and records what it was sent."""

    seen: ClassVar[list[list[BaseMessage]]] = []

    @property
    def _llm_type(self) -> str:
        return "recording"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:  # fmt: skip
        self.seen.append(list(messages))
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage("Rollback: restore the dump."))]
        )

    def bind_tools(self, tools: Any, **kwargs: Any) -> RecordingModel:  # type: ignore[override]
        return self


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_a_langgraph_agent_sees_the_assembled_context(client: WmClient) -> None:
    session = _name("lg")
    await seeded_session(client, session, "fay")
    model = RecordingModel()
    agent = create_react_agent(
        model, tools=[], pre_model_hook=assembled_context_hook(client, session)
    )
    state = await agent.ainvoke({"messages": [HumanMessage("How do we roll back?", id="q1")]})
    assert state["messages"][-1].content == "Rollback: restore the dump."
    (sent,) = model.seen
    assert sent[0].text.startswith("[Session History Summary]")  # the archive, summarized
    assert sent[-1].text.endswith("How do we roll back?")
    live = await client.list_messages(session)
    assert [m.id for m in live.messages] == ["u4", "q1"]
