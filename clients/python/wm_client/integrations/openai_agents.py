"""An OpenAI Agents SDK ``Session`` kept by the Working Memory Service (``wm-client[openai-agents]``).

Why: a Runner given this session stores every turn in the service, and reads back the
assembled context (the working memory summary of what was archived, the raw messages no summary
covers yet, the live messages) instead of an ever-growing list, so a long-running agent stays
within its budget without writing any glue. ``pop_item`` takes back the newest live message
(RemoveRecentMessages); archived messages are summarized and cannot be taken back, which it
says with the service's FAILED_PRECONDITION.

Items and messages: one item is stored as one wm.v1 message. Messages (user, assistant,
system, developer) become text parts (and come back as ``{"role", "content"}`` items: an
output message's id and status are not kept), ``function_call`` a tool_use part and
``function_call_output`` a tool_result part, so the service's summary, recall and tool-pairing
rules see them; any other item type (reasoning, web search…) is kept as its JSON in a text
part that starts with :data:`ITEM_MARKER` and comes back as the same item.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any, Literal, cast

from agents.items import TResponseInputItem
from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings

from wm_client.client import WmClient, new_request_id
from wm_client.errors import AlreadyExistsError, FailedPreconditionError, NotFoundError
from wm_proto.v1 import resources_pb2 as pb

ITEM_MARKER = "[openai-item] "
_ROLES_IN = {
    "user": pb.ROLE_USER, "assistant": pb.ROLE_ASSISTANT, "system": pb.ROLE_SYSTEM,
    "developer": pb.ROLE_SYSTEM,
}  # fmt: skip
_ROLES_OUT = {pb.ROLE_USER: "user", pb.ROLE_ASSISTANT: "assistant", pb.ROLE_SYSTEM: "system"}
History = Literal["assembled", "live"]


def _content_text(content: Any) -> str | None:
    """The text of a message item's content (a string, or input/output text parts); None
    when it has anything else (an image, a file), which is then kept as a whole item."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text"):
            return None
        texts.append(str(part.get("text", "")))
    return "".join(texts)


def item_to_message(item: TResponseInputItem, message_id: str) -> pb.Message:
    """One item as one message (see the module's docstring)."""
    data = cast(dict[str, Any], item)
    kind = data.get("type", "message")
    if kind == "function_call":
        use = pb.ToolUse(id=str(data["call_id"]), name=str(data["name"]),
                         input_json=str(data.get("arguments") or "{}"))  # fmt: skip
        return pb.Message(id=message_id, role=pb.ROLE_ASSISTANT, parts=[pb.Part(tool_use=use)])
    if kind == "function_call_output":
        output = data.get("output", "")
        content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        result = pb.ToolResult(tool_use_id=str(data["call_id"]), content=content)
        return pb.Message(id=message_id, role=pb.ROLE_TOOL, parts=[pb.Part(tool_result=result)])
    role = _ROLES_IN.get(str(data.get("role", "")))
    text = _content_text(data.get("content")) if kind == "message" else None
    if role is not None and text is not None:  # its id, status and provider data are not kept
        return pb.Message(id=message_id, role=role, parts=[pb.Part(text=text)])
    kept = ITEM_MARKER + json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return pb.Message(id=message_id, role=role or pb.ROLE_ASSISTANT, parts=[pb.Part(text=kept)])


def message_to_items(message: pb.Message) -> list[TResponseInputItem]:
    """A stored (or assembled) message as items: its text as one message item, each tool call
    and result as its own item, a kept item as itself."""
    items: list[dict[str, Any]] = []
    role = _ROLES_OUT.get(message.role, "user")
    texts: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("kind")
        if kind == "text" and part.text.startswith(ITEM_MARKER):
            items.append(json.loads(part.text.removeprefix(ITEM_MARKER)))
        elif kind == "text":
            texts.append(part.text)
        elif kind == "tool_use":
            items.append({"type": "function_call", "call_id": part.tool_use.id,
                          "name": part.tool_use.name,
                          "arguments": part.tool_use.input_json or "{}"})  # fmt: skip
        elif kind == "tool_result":
            items.append({"type": "function_call_output", "call_id": part.tool_result.tool_use_id,
                          "output": part.tool_result.content})  # fmt: skip
    if texts:
        items.insert(0, {"role": role, "content": "\n\n".join(texts)})
    return cast(list[TResponseInputItem], items)


class WmAgentsSession(SessionABC):
    """The history of one service session as an Agents SDK session.

    ``history="assembled"`` (the default) reads the assembled context within
    ``token_budget``: the summary of archived turns and the live ones; ``"live"`` reads the
    live messages as stored, one item each. ``user_id``, ``agent_id`` and ``config`` are
    given to CreateSession when this object first writes (memories belong to the user).
    """

    def __init__(
        self,
        session_id: str,
        client: WmClient,
        *,
        history: History = "assembled",
        token_budget: int = 64_000,
        user_id: str = "",
        agent_id: str = "",
        config: pb.SessionConfig | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.client = client
        self.history = history
        self.token_budget = token_budget
        self._owner = (user_id, agent_id, config)
        self._created = False

    async def _ensure_session(self) -> None:
        if self._created:
            return
        user_id, agent_id, config = self._owner
        with contextlib.suppress(AlreadyExistsError):
            await self.client.create_session(
                self.session_id, user_id=user_id, agent_id=agent_id, config=config
            )
        self._created = True

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        try:
            messages = await self._messages()
        except NotFoundError:
            return []
        items = [item for message in messages for item in message_to_items(message)]
        if limit is None:
            return items
        return items[-limit:] if limit > 0 else []

    async def _messages(self) -> Sequence[pb.Message]:
        if self.history == "assembled":
            context = await self.client.assemble_context(self.session_id, self.token_budget)
            return context.messages
        out: list[pb.Message] = []
        token = ""
        while True:
            page = await self.client.list_messages(self.session_id, page_token=token)
            out.extend(page.messages)
            token = page.next_page_token
            if not token:
                return out

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if not items:
            return
        await self._ensure_session()
        rid = new_request_id()
        messages = [item_to_message(item, f"{rid}.{n}") for n, item in enumerate(items)]
        for start in range(0, len(messages), 1000):  # AddMessages takes 1-1000 at once
            await self.client.add_messages(
                self.session_id, messages[start : start + 1000],
                create_session_if_missing=True, request_id=f"{rid}.{start}",
            )  # fmt: skip

    async def pop_item(self) -> TResponseInputItem | None:
        """The newest item, removed; None when the session has no message at all. Raises
        FailedPreconditionError (reason MESSAGES_NOT_LIVE) when every message left is
        archived: those are summarized and stay."""
        try:
            removed = await self.client.remove_recent_messages(self.session_id, 1)
        except NotFoundError:
            return None
        except FailedPreconditionError as exc:
            if exc.reason == "MESSAGES_NOT_LIVE":
                session = await self.client.get_session(self.session_id)
                if session.total_message_count == 0:
                    return None
            raise
        items = message_to_items(removed.messages[0])
        return items[-1] if items else None

    async def clear_session(self) -> None:
        """Delete the service session and everything of it (archives, working memory); the
        next add_items creates it again."""
        with contextlib.suppress(NotFoundError):
            await self.client.delete_session(self.session_id)
        self._created = False
