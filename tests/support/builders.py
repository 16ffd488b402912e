"""Short builders for wm.v1 messages in tests."""

from __future__ import annotations

import json
from typing import Any

from wm_proto.v1 import resources_pb2 as pb


def text(role: int, body: str, message_id: str = "") -> pb.Message:
    return pb.Message(id=message_id, role=role, parts=[pb.Part(text=body)])


def user(body: str, message_id: str = "") -> pb.Message:
    return text(pb.ROLE_USER, body, message_id)


def assistant(body: str, message_id: str = "") -> pb.Message:
    return text(pb.ROLE_ASSISTANT, body, message_id)


def tool_call(call_id: str, name: str, args: dict[str, Any], message_id: str = "") -> pb.Message:
    return pb.Message(
        id=message_id,
        role=pb.ROLE_ASSISTANT,
        parts=[pb.Part(tool_use=pb.ToolUse(id=call_id, name=name, input_json=json.dumps(args)))],
    )


def tool_result(
    call_id: str, output: str, is_error: bool = False, message_id: str = ""
) -> pb.Message:
    return pb.Message(
        id=message_id,
        role=pb.ROLE_USER,
        parts=[
            pb.Part(
                tool_result=pb.ToolResult(tool_use_id=call_id, content=output, is_error=is_error)
            )
        ],
    )


def sized(tokens: int, message_id: str = "", role: int = pb.ROLE_USER) -> pb.Message:
    """A text message whose estimated size is exactly ``tokens`` (ASCII: 4 characters each)."""
    return text(role, "x" * (tokens * 4), message_id)
