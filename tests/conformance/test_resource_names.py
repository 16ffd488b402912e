"""Resource names: the server and the Python client read their shapes from the proto's
``google.api.resource`` patterns and answer as tests/conformance/names.json says; the
TypeScript suite runs the same file (clients/typescript/test/names.test.ts). The edge's rules
(rules.proto's CEL, the field patterns) spell the same shapes once more, with the ids' allowed
characters: every name of the fixture passes them and every non-name is refused, so the two
cannot drift apart unnoticed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.api import resource_pb2
from google.protobuf.message import Message

from wm_client import names as client
from wm_proto.v1 import resources_pb2
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_server.api import names as server
from wm_server.api import request_rules
from wm_server.errors import InvalidArgument

FIXTURE = json.loads((Path(__file__).parent / "names.json").read_text())
NAMES: list[dict[str, Any]] = FIXTURE["names"]
NOT_NAMES: list[dict[str, Any]] = FIXTURE["not_names"]
CLIENT: list[dict[str, Any]] = FIXTURE["client"]

# Each kind as the server builds its name from ids, and reads the ids back (None: no
# request carries that kind's name alone).
_SERVER: dict[str, tuple[Callable[..., str], Callable[[str], Any] | None]] = {
    "Session": (server.session, server.session_id),
    "Message": (server.message, None),
    "ToolOutput": (server.tool_output, server.tool_output_ids),
    "Commit": (server.commit, server.commit_ids),
    "WorkingMemory": (
        lambda sid, version: server.working_memory(sid, int(version)),
        server.working_memory_version,
    ),
    "Archive": (server.archive_of_id, server.archive_ids),
    "Memory": (server.memory, server.memory_id),
}
# The request that takes each kind's name as its ``name``, checked at the edge.
_REQUESTS: dict[str, Callable[..., Message]] = {
    "Session": api.GetSessionRequest,
    "ToolOutput": api.GetToolOutputRequest,
    "Commit": api.GetCommitRequest,
    "WorkingMemory": api.GetWorkingMemoryRequest,
    "Archive": api.GetArchiveRequest,
    "Memory": api.GetMemoryRequest,
}


def _proto_patterns() -> dict[str, str]:
    found = {}
    for message in resources_pb2.DESCRIPTOR.message_types_by_name.values():
        options = message.GetOptions()
        if options.HasExtension(resource_pb2.resource):
            resource = options.Extensions[resource_pb2.resource]
            found[resource.type.rsplit("/", 1)[-1]] = resource.pattern[0]
    return found


def _ids(case: dict[str, Any]) -> str:
    return f"{case['kind']}:{case['name']}"


def test_the_table_is_the_protos_and_the_fixture_covers_every_kind() -> None:
    assert {k: p.text for k, p in client.PATTERNS.items()} == _proto_patterns()
    assert {c["kind"] for c in NAMES} == set(client.PATTERNS) == set(_SERVER)
    assert {c["kind"] for c in NOT_NAMES} == set(client.PATTERNS)
    assert set(_REQUESTS) == set(client.PATTERNS) - {"Message"}


@pytest.mark.parametrize("case", NAMES, ids=_ids)
def test_a_name_and_its_ids(case: dict[str, Any]) -> None:
    pattern = client.PATTERNS[case["kind"]]
    ids = tuple(case["ids"])
    assert pattern.format(*ids) == case["name"]
    assert pattern.parse(case["name"]) == ids
    build, read = _SERVER[case["kind"]]
    if case["ids"][-1] != client.LATEST:  # the server names a stored version, never latest
        assert build(*ids) == case["name"]
    if read is not None:
        got = read(case["name"])
        expected = ids if len(ids) > 1 else ids[0]
        if case["kind"] == "WorkingMemory":
            expected = (ids[0], 0 if ids[1] == client.LATEST else int(ids[1]))
        assert got == expected
    request = _REQUESTS.get(case["kind"])
    if request is not None:
        request_rules.check(request(name=case["name"]))


@pytest.mark.parametrize("case", NOT_NAMES, ids=_ids)
def test_not_a_name_of_the_kind(case: dict[str, Any]) -> None:
    assert client.PATTERNS[case["kind"]].parse(case["name"]) is None
    _build, read = _SERVER[case["kind"]]
    if read is not None:
        with pytest.raises(InvalidArgument) as refused:
            read(case["name"])
        assert [(v.field, v.reason) for v in refused.value.violations] == [
            ("name", "INVALID_FORMAT")
        ]
    request = _REQUESTS.get(case["kind"])
    if request is not None:
        with pytest.raises(InvalidArgument) as at_edge:
            request_rules.check(request(name=case["name"]))
        assert [v.field for v in at_edge.value.violations] == ["name"]


@pytest.mark.parametrize("case", CLIENT, ids=lambda c: f"{c['function']}{tuple(c['args'])}")
def test_the_python_client_builds_names_as_the_fixture_says(case: dict[str, Any]) -> None:
    assert getattr(client, case["function"])(*case["args"]) == case["result"]


def test_the_wildcard_parent_of_every_session() -> None:
    assert client.ALL_SESSIONS == "sessions/-"
    assert server.search_scope(client.ALL_SESSIONS) == ("", True)
    assert server.search_scope("sessions/s1") == ("s1", False)
    with pytest.raises(InvalidArgument):
        server.session_id(client.ALL_SESSIONS)
