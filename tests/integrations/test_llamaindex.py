"""LlamaIndex's own ``Memory`` with :class:`WmMemoryBlock`: the messages it flushes from its
short-term FIFO are stored and committed in a real server's session, and reading the memory
brings back the session's assembled context and the user's long-term memories."""

from __future__ import annotations

import uuid

from wm_client import WmClient
from wm_proto.v1 import resources_pb2 as pb


async def test_flushed_messages_are_committed_and_come_back_in_the_block(client: WmClient) -> None:
    # Imported here, not at the top: every collection would pay LlamaIndex's import (~2 CPU s).
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.memory import Memory

    from wm_client.integrations.llamaindex import WmMemoryBlock

    session = f"li-{uuid.uuid4().hex[:8]}"
    await client.create_session(session, user_id="gus")
    await client.create_memory("users/gus", pb.MEMORY_TYPE_PREFERENCE, "Gus wants invoices in CSV")
    block = WmMemoryBlock(session_id=session, client=client)
    memory = Memory.from_defaults(
        session_id=session, token_limit=40, token_flush_size=20, chat_history_token_ratio=0.5,
        tokenizer_fn=str.split, memory_blocks=[block],
    )  # fmt: skip
    turns = [
        ("user", "Export the March invoices from the ledger database please"),
        ("assistant", "Exported 412 March invoices to exports/march.csv as requested"),
        ("user", "Now send the invoices export to the finance team by email"),
        ("assistant", "Sent exports/march.csv to finance at finance@example.com today"),
        ("user", "Which invoices format does Gus want for the April export?"),
    ]
    for role, text in turns:
        await memory.aput(ChatMessage(role=MessageRole(role), content=text))

    archived = await client.list_archives(session)
    assert archived.archives, "the flushed messages were committed"
    stored = await client.list_messages(archived.archives[0].name)
    assert "Export the March invoices" in stored.messages[0].parts[0].text

    messages = await memory.aget()
    system = messages[0]
    assert system.role == MessageRole.SYSTEM
    assert "March invoices" in system.content  # the session's context, summarized or raw
    assert "Gus wants invoices in CSV" in system.content  # recalled for the latest request
    assert messages[-1].content == turns[-1][1]  # the short-term FIFO keeps the newest
