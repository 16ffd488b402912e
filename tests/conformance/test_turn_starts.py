"""The turn rule, one fixture for every implementation: the service's (``wm_core.is_request``)
and the Python client's (``is_user_turn_start``); the TypeScript client's test reads the same
file (clients/typescript/test/conformance.test.ts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from wm_client.jsonl import is_user_turn_start
from wm_core import Message, Role, TextPart, ToolResultPart, is_request
from wm_proto.v1 import resources_pb2 as pb

CASES = json.loads((Path(__file__).parent / "turn_starts.json").read_text())["cases"]
_ROLES = {"ROLE_USER": Role.USER, "ROLE_ASSISTANT": Role.ASSISTANT, "ROLE_SYSTEM": Role.SYSTEM}


def _core(message: dict[str, Any]) -> Message:
    parts: list[TextPart | ToolResultPart] = []
    for part in message["parts"]:
        if "text" in part:
            parts.append(TextPart(part["text"]))
        else:
            result = part["toolResult"]
            parts.append(ToolResultPart(result["toolUseId"], result["content"]))
    return Message(id="m", role=_ROLES[message["role"]], parts=tuple(parts))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_service_and_the_python_client_agree(case: dict[str, Any]) -> None:
    message = json_format.ParseDict(case["message"], pb.Message())
    assert is_user_turn_start(message) is case["starts_turn"]
    assert is_request(_core(case["message"])) is case["starts_turn"]
