"""The rules both clients must share, from the fixtures the TypeScript suite reads too
(clients/typescript/test/conformance.test.ts): how a failed call is treated, by code and by
who answered (error_handling.json), and the limits and defaults (client_defaults.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from wm_client import engine, stream, tools
from wm_client.errors import ERROR_DOMAIN, WmError, error_class
from wm_server.services.context import MAX_BUDGET

HERE = Path(__file__).parent
CASES = json.loads((HERE / "error_handling.json").read_text())["cases"]
DEFAULTS = json.loads((HERE / "client_defaults.json").read_text())


def _error(case: dict[str, Any]) -> WmError:
    """The error the client raises for this answer: the code's class, with the service's
    ErrorInfo when the service answered."""
    code = grpc.StatusCode[case["code"]]
    status = None
    if case["from_service"]:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason="SOME_REASON", domain=ERROR_DOMAIN))
        status = status_pb2.Status(code=code.value[0], message="m", details=[detail])
    return error_class(code)(code, "m", status=status)


def test_every_code_is_covered_from_both_sides() -> None:
    names = {c.name for c in grpc.StatusCode} - {"OK"}
    assert {(c["code"], c["from_service"]) for c in CASES} == {
        (n, side) for n in names for side in (True, False)
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_python_client_treats_a_failure_as_the_fixture_says(case: dict[str, Any]) -> None:
    error = _error(case)
    assert (error.domain == ERROR_DOMAIN) is case["from_service"]
    assert isinstance(error, engine.UNREACHABLE) is case["engine_falls_back"]
    assert stream.is_resumable(error) is case["stream_resumes"]
    assert tools.is_transient(error) is case["tool_error_raised"]


def test_the_python_client_has_the_shared_limits_and_defaults() -> None:
    limits = DEFAULTS["engine"]
    assert engine.MAX_TOKEN_BUDGET == limits["max_token_budget"] == MAX_BUDGET  # the contract's
    assert limits["max_keep_recent"] == engine.MAX_KEEP_RECENT
    assert limits["max_keep_turns"] == engine.MAX_KEEP_TURNS
    assert DEFAULTS["tools"]["max_chars"] == tools.DEFAULT_MAX_CHARS
    assert DEFAULTS["tools"]["read_lines"] == tools.READ_LINES
    policy = stream.ResumePolicy()
    resume = DEFAULTS["resume"]
    assert policy.idle_timeout * 1000 == resume["idle_timeout_ms"]
    assert policy.give_up_after * 1000 == resume["give_up_after_ms"]
    assert policy.initial_backoff * 1000 == resume["initial_backoff_ms"]
    assert policy.max_backoff * 1000 == resume["max_backoff_ms"]
    assert policy.multiplier == resume["multiplier"]
