"""Helpers of the integration tests: a session with an archived, summarized past."""

from __future__ import annotations

from wm_client import WmClient
from wm_proto.v1 import resources_pb2 as pb

# A tool output long enough to be stored whole (the server's inline threshold is 20,000).
BUILD_LOG = (
    "".join(f"compile unit {n}: ok\n" for n in range(2000)) + "ERROR: linker lost ledger.o\n"
)


def text(message_id: str, role: pb.Role.ValueType, value: str) -> pb.Message:
    return pb.Message(id=message_id, role=role, parts=[pb.Part(text=value)])


async def seeded_session(client: WmClient, session_id: str, user_id: str) -> None:
    """A session with an archived, summarized past (a working memory), a stored tool output
    and a live tail."""
    await client.create_session(session_id, user_id=user_id)
    past = [
        text("u1", pb.ROLE_USER, "Please migrate the invoicing ledger to PostgreSQL."),
        text("a1", pb.ROLE_ASSISTANT, "Plan: dump the SQLite ledger, then load it with COPY."),
        pb.Message(id="a2", role=pb.ROLE_ASSISTANT, parts=[
            pb.Part(tool_use=pb.ToolUse(id="t1", name="build", input_json='{"target": "all"}'))]),
        pb.Message(id="r2", role=pb.ROLE_USER, parts=[
            pb.Part(tool_result=pb.ToolResult(tool_use_id="t1", content=BUILD_LOG, is_error=True))]),
        text("a3", pb.ROLE_ASSISTANT, "The linker lost ledger.o; I will rebuild it."),
    ]  # fmt: skip
    await client.add_messages(session_id, past)
    async for _ in client.compact(session_id):
        pass
    await client.add_messages(
        session_id, [text("u4", pb.ROLE_USER, "Now write the rollback procedure.")]
    )
