"""LangChain and LangGraph over the Working Memory Service (``wm-client[langchain]``).

- :class:`WmChatMessageHistory`: a LangChain ``BaseChatMessageHistory`` whose messages are a
  service session's (``history="live"``: the live messages as stored; ``"assembled"``: the
  working-memory summary of what was archived, then what no summary covers yet).
- :class:`WmMemoryStore`: a LangGraph ``BaseStore`` over long-term memories. A namespace
  names the owner and, optionally, the type: ``("users", USER_ID)``, ``("agents", AGENT_ID)``,
  ``("sessions", SESSION_ID)`` (the session's owner), each with a memory type as a third
  element (``("users", "ana", "preference")``); ``search`` with a query is the service's
  memory search, best first.
- :func:`assembled_context_hook`: a pre-model hook for LangGraph agents that stores the new
  messages of the state in a session and hands the model the assembled context instead of the
  whole list (``llm_input_messages``; the graph's state is left as it is).

Why async first: the client is asyncio (grpc.aio). The synchronous methods LangChain also
requires run the same code on a worker thread with a client of their own, so they work from
synchronous code but never from inside a running event loop's thread without blocking it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias, TypeVar

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from wm_client.client import WmClient, new_request_id
from wm_client.errors import NotFoundError
from wm_client.names import short_id
from wm_proto.v1 import resources_pb2 as pb

T = TypeVar("T")
History = Literal["assembled", "live"]
KEY_FIELD = "key"  # the memory field that holds a store item's key
MemoryType: TypeAlias = pb.MemoryType.ValueType
_TYPES: dict[str, MemoryType] = {
    name.removeprefix("MEMORY_TYPE_").lower(): number
    for name, number in pb.MemoryType.items()
    if number != pb.MEMORY_TYPE_UNSPECIFIED
}
_TYPE_NAMES = {number: name for name, number in _TYPES.items()}


def _blocking(client: WmClient, work: Callable[[WmClient], Awaitable[T]]) -> T:
    """Run ``work`` to its end on a worker thread, with a client of its own (a grpc.aio
    channel belongs to one event loop)."""

    async def run() -> T:
        async with WmClient(client.address, metadata=client.metadata) as own:
            return await work(own)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


# --- messages ------------------------------------------------------------------------------------
def to_wm_message(message: BaseMessage, message_id: str) -> pb.Message:
    """A LangChain message as a wm.v1 message (tool calls and results as their parts)."""
    parts: list[pb.Part] = []
    text = message.text if isinstance(message.text, str) else str(message.text)
    if isinstance(message, ToolMessage):
        result = pb.ToolResult(tool_use_id=message.tool_call_id, content=text,
                               is_error=message.status == "error")  # fmt: skip
        return pb.Message(id=message_id, role=pb.ROLE_TOOL, parts=[pb.Part(tool_result=result)])
    if text:
        parts.append(pb.Part(text=text))
    role = pb.ROLE_USER
    if isinstance(message, AIMessage):
        role = pb.ROLE_ASSISTANT
        for call in message.tool_calls:
            use = pb.ToolUse(id=call["id"] or new_request_id(), name=call["name"],
                             input_json=json.dumps(call["args"], ensure_ascii=False))  # fmt: skip
            parts.append(pb.Part(tool_use=use))
    elif isinstance(message, SystemMessage):
        role = pb.ROLE_SYSTEM
    if not parts:
        parts.append(pb.Part(text=""))
    return pb.Message(id=message_id, role=role, parts=parts)


def from_wm_message(message: pb.Message) -> list[BaseMessage]:
    """A wm.v1 message as LangChain messages: its text and tool calls as one message, each
    tool result as a ToolMessage after it."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[BaseMessage] = []
    for part in message.parts:
        kind = part.WhichOneof("kind")
        if kind == "text":
            texts.append(part.text)
        elif kind == "tool_use":
            args = json.loads(part.tool_use.input_json or "{}")
            calls.append({"id": part.tool_use.id, "name": part.tool_use.name, "args": args})
        elif kind == "tool_result":
            result = part.tool_result
            results.append(ToolMessage(content=result.content, tool_call_id=result.tool_use_id,
                                       status="error" if result.is_error else "success"))  # fmt: skip
    text = "\n\n".join(texts)
    out: list[BaseMessage] = []
    if message.role == pb.ROLE_ASSISTANT:
        out.append(AIMessage(content=text, tool_calls=calls, id=message.id or None))
    elif message.role == pb.ROLE_SYSTEM:
        out.append(SystemMessage(content=text, id=message.id or None))
    elif texts:
        out.append(HumanMessage(content=text, id=message.id or None))
    return out + results


async def _read(
    client: WmClient, session_id: str, history: History, budget: int
) -> list[BaseMessage]:
    try:
        if history == "assembled":
            messages: Sequence[pb.Message] = (
                await client.assemble_context(session_id, budget)
            ).messages
        else:
            stored: list[pb.Message] = []
            token = ""
            while True:
                page = await client.list_messages(session_id, page_token=token)
                stored.extend(page.messages)
                token = page.next_page_token
                if not token:
                    break
            messages = stored
    except NotFoundError:
        return []
    return [m for message in messages for m in from_wm_message(message)]


async def _store(client: WmClient, session_id: str, messages: Sequence[BaseMessage]) -> None:
    rid = new_request_id()
    batch = [to_wm_message(m, m.id or f"{rid}.{n}") for n, m in enumerate(messages)]
    for start in range(0, len(batch), 1000):
        await client.add_messages(session_id, batch[start : start + 1000],
                                  create_session_if_missing=True, request_id=f"{rid}.{start}")  # fmt: skip


class WmChatMessageHistory(BaseChatMessageHistory):
    """The chat history of one service session (see the module's docstring)."""

    def __init__(
        self,
        session_id: str,
        client: WmClient,
        *,
        history: History = "live",
        token_budget: int = 64_000,
    ) -> None:
        self.session_id = session_id
        self.client = client
        self.history = history
        self.token_budget = token_budget

    async def aget_messages(self) -> list[BaseMessage]:
        return await _read(self.client, self.session_id, self.history, self.token_budget)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return _blocking(
            self.client, lambda c: _read(c, self.session_id, self.history, self.token_budget)
        )

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if messages:
            await _store(self.client, self.session_id, messages)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        if messages:
            _blocking(self.client, lambda c: _store(c, self.session_id, messages))

    async def aclear(self) -> None:
        try:
            await self.client.delete_session(self.session_id)
        except NotFoundError:
            return

    def clear(self) -> None:
        async def delete(client: WmClient) -> None:
            try:
                await client.delete_session(self.session_id)
            except NotFoundError:
                return

        _blocking(self.client, delete)


# --- the pre-model hook --------------------------------------------------------------------------
def assembled_context_hook(
    client: WmClient, session_id: str, *, token_budget: int = 64_000
) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    """A LangGraph pre-model hook: the state's messages not yet stored are added to the
    session (by their ids, so a message is stored once however often the hook runs), and the
    model gets the assembled context as ``llm_input_messages``."""

    async def hook(state: dict[str, Any]) -> dict[str, Any]:
        messages: list[BaseMessage] = list(state.get("messages", []))
        if messages:
            await _store(client, session_id, messages)
        context = await _read(client, session_id, "assembled", token_budget)
        return {"llm_input_messages": context}

    return hook


# --- the store -----------------------------------------------------------------------------------
def _owner(namespace: tuple[str, ...]) -> tuple[str, list[MemoryType]]:
    """The owner's name (a namespace's first two elements are its two segments) and the
    types the namespace selects."""
    if len(namespace) not in (2, 3) or namespace[0] not in ("users", "agents", "sessions"):
        raise ValueError(
            "a namespace is (users|agents|sessions, ID) or (users|agents|sessions, ID, TYPE);"
            f" got {namespace!r}"
        )
    owner = f"{namespace[0]}/{namespace[1]}"
    if len(namespace) == 2:
        return owner, []
    if namespace[2] not in _TYPES:
        raise ValueError(f"not a memory type: {namespace[2]!r} (one of {', '.join(_TYPES)})")
    return owner, [_TYPES[namespace[2]]]


def _time(stamp: Any) -> datetime:
    return datetime.fromtimestamp(stamp.seconds + stamp.nanos / 1e9, UTC)


def _item(memory: pb.Memory, namespace: tuple[str, ...], score: float | None = None) -> Item:
    value: dict[str, Any] = {k: v for k, v in memory.fields.items() if k != KEY_FIELD}
    value.update(text=memory.text, type=_TYPE_NAMES.get(memory.type, ""),
                 memory_id=short_id(memory.name))  # fmt: skip
    key = memory.fields.get(KEY_FIELD) or short_id(memory.name)
    ns = namespace if len(namespace) == 3 else (*namespace, value["type"])
    created, updated = _time(memory.create_time), _time(memory.update_time)
    if score is None:
        return Item(value=value, key=key, namespace=ns, created_at=created, updated_at=updated)
    return SearchItem(
        value=value, key=key, namespace=ns, created_at=created, updated_at=updated, score=score
    )


class WmMemoryStore(BaseStore):
    """Long-term memories as a LangGraph store (see the module's docstring). A put's value
    needs ``text``; its type is the namespace's third element or ``value["type"]``; other
    string values are kept as the memory's fields. Putting a key again replaces its memory;
    putting None forgets it. Namespaces cannot be listed (owners are not enumerable)."""

    def __init__(self, client: WmClient) -> None:
        self.client = client

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        listed = list(ops)
        return _blocking(self.client, lambda c: WmMemoryStore(c).abatch(listed))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(op.namespace, op.key))
            elif isinstance(op, SearchOp):
                results.append(await self._search(op))
            elif isinstance(op, PutOp):
                await self._put(op)
                results.append(None)
            elif isinstance(op, ListNamespacesOp):
                raise NotImplementedError("WmMemoryStore cannot list namespaces")
            else:
                raise TypeError(f"unknown store operation {op!r}")
        return results

    async def _find(self, namespace: tuple[str, ...], key: str) -> pb.Memory | None:
        owner, types = _owner(namespace)
        token = ""
        while True:
            page = await self.client.list_memories(owner=owner, types=types, page_size=500,
                                                   page_token=token)  # fmt: skip
            for memory in page.memories:
                if memory.fields.get(KEY_FIELD) == key or key in (
                    memory.name,
                    short_id(memory.name),
                ):
                    return memory
            token = page.next_page_token
            if not token:
                return None

    async def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        found = await self._find(namespace, key)
        return _item(found, namespace) if found is not None else None

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        owner, types = _owner(op.namespace_prefix)
        wanted = op.limit + op.offset
        if op.query:
            reply = await self.client.search_memories(op.query, owner=owner, types=types,
                                                      page_size=wanted)  # fmt: skip
            found = [_item(h.memory, op.namespace_prefix, h.score) for h in reply.hits]
        else:
            page = await self.client.list_memories(owner=owner, types=types, page_size=wanted)
            found = [_item(m, op.namespace_prefix, 0.0) for m in page.memories]
        if op.filter:
            found = [i for i in found if all(i.value.get(k) == v for k, v in op.filter.items())]
        return [i for i in found[op.offset : op.offset + op.limit] if isinstance(i, SearchItem)]

    async def _put(self, op: PutOp) -> None:
        existing = await self._find(op.namespace, op.key)
        if existing is not None:
            await self.client.delete_memory(existing.name)
        if op.value is None:
            return
        owner, types = _owner(op.namespace)
        kind = types[0] if types else _TYPES.get(str(op.value.get("type", "")))
        text = op.value.get("text")
        if kind is None or not isinstance(text, str) or not text.strip():
            raise ValueError(
                "a memory needs value['text'] and a type (the namespace's third element or"
                f" value['type']: {', '.join(_TYPES)})"
            )
        fields = {k: str(v) for k, v in op.value.items() if k not in ("text", "type", "memory_id")}
        fields[KEY_FIELD] = op.key
        await self.client.create_memory(owner, kind, text, fields=fields)
