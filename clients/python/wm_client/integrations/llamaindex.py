"""A LlamaIndex memory block kept by the Working Memory Service (``wm-client[llamaindex]``).

Why a block: LlamaIndex's ``Memory`` keeps a short-term FIFO of chat messages and flushes the
oldest into its memory blocks when the FIFO exceeds its budget. :class:`WmMemoryBlock` stores
those flushed messages in a service session and commits them (Phase 2 then summarizes them
into the working memory in the background); when the memory is read it contributes the
session's assembled context (the working-memory summary, and what no summary covers yet)
and the long-term memories of the session's user relevant to the latest user message.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field
from llama_index.core.memory.memory import BaseMemoryBlock

from wm_client.client import WmClient, new_request_id
from wm_client.errors import NotFoundError
from wm_client.names import owner_name
from wm_proto.v1 import resources_pb2 as pb

_ROLES_IN = {
    MessageRole.USER: pb.ROLE_USER, MessageRole.ASSISTANT: pb.ROLE_ASSISTANT,
    MessageRole.SYSTEM: pb.ROLE_SYSTEM, MessageRole.DEVELOPER: pb.ROLE_SYSTEM,
}  # fmt: skip
_ROLES_OUT = {pb.ROLE_USER: "user", pb.ROLE_ASSISTANT: "assistant", pb.ROLE_SYSTEM: "system"}


def _text(message: pb.Message) -> str:
    chunks: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("kind")
        if kind == "text":
            chunks.append(part.text)
        elif kind == "tool_use":
            chunks.append(f"[tool call {part.tool_use.name} {part.tool_use.input_json}]")
        elif kind == "tool_result":
            chunks.append(f"[tool result] {part.tool_result.content}")
    return "\n".join(chunks)


class WmMemoryBlock(BaseMemoryBlock[str]):
    """The working memory of one service session as a LlamaIndex memory block.

    ``client`` is the :class:`WmClient` to use; flushed messages go to ``session_id`` (created
    when missing) and are committed at once when ``commit_on_flush`` (keep 0: the summary
    covers them). ``token_budget`` bounds the assembled context; ``memory_limit`` the recalled
    long-term memories.
    """

    name: str = Field(default="WorkingMemory", description="The name of the memory block.")
    session_id: str = Field(description="The service session that keeps the flushed messages.")
    client: Any = Field(description="The WmClient to use.", exclude=True)
    token_budget: int = Field(default=8_000, description="Budget of the assembled context.")
    memory_limit: int = Field(default=5, description="Long-term memories recalled at most.")
    commit_on_flush: bool = Field(default=True, description="Commit flushed messages at once.")

    @property
    def _wm(self) -> WmClient:
        client: WmClient = self.client
        return client

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """The assembled context as text, then the memories relevant to the latest user
        message; empty while the session does not exist."""
        try:
            context = await self._wm.assemble_context(self.session_id, self.token_budget)
        except NotFoundError:
            return ""
        lines = [f"{_ROLES_OUT.get(m.role, 'tool')}: {_text(m)}" for m in context.messages]
        query = next(
            (m.content for m in reversed(messages or []) if m.role == MessageRole.USER and m.content),
            "",
        )  # fmt: skip
        if query:
            owner = owner_name(session=self.session_id)
            found = await self._wm.search_memories(
                str(query), owner=owner, page_size=self.memory_limit
            )
            if found.hits:
                lines.append("Long-term memories of this user:")
                lines.extend(f"- {hit.memory.text}" for hit in found.hits)
        return "\n".join(lines)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Store the messages flushed from short-term memory, and commit them."""
        rid = new_request_id()
        stored = [
            pb.Message(id=f"{rid}.{n}", role=_ROLES_IN.get(m.role, pb.ROLE_USER),
                       parts=[pb.Part(text=m.content or "")])
            for n, m in enumerate(messages)
        ]  # fmt: skip
        if not stored:
            return
        await self._wm.add_messages(
            self.session_id, stored, create_session_if_missing=True, request_id=rid
        )
        if self.commit_on_flush:
            stream = self._wm.commit(self.session_id, 0)
            async for _ in stream:  # Phase 1 is the first event; Phase 2 goes on by itself
                break
            await stream.aclose()
