"""The rules both clients must share, from the files the TypeScript suite reads too
(clients/typescript/test/conformance.test.ts): how a failed call is treated, by code and by
who answered (error_handling.json), and the limits and defaults: written once in
clients/rules.json (the contract's limits: the server's), generated into both clients by
scripts/gen_client_rules.py, which must have nothing to change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from wm_client import engine, stream, tools
from wm_client.errors import ERROR_DOMAIN, WmError, error_class
from wm_server.services.context_assembly import MAX_BUDGET
from wm_server.services.validation import MAX_KEEP_RECENT

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CASES = json.loads((HERE / "error_handling.json").read_text())["cases"]
RULES = json.loads((ROOT / "clients" / "rules.json").read_text())


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
    assert engine.MAX_TOKEN_BUDGET == MAX_BUDGET  # the contract's, from the server
    assert engine.MAX_KEEP_RECENT == MAX_KEEP_RECENT
    assert RULES["engine"]["max_keep_turns"] == engine.MAX_KEEP_TURNS
    assert RULES["engine"]["max_seen_messages"] == engine.MAX_SEEN_MESSAGES
    assert RULES["engine"]["max_unsent_messages"] == engine.MAX_UNSENT_MESSAGES
    assert RULES["tools"]["max_chars"] == tools.DEFAULT_MAX_CHARS
    assert RULES["tools"]["read_lines"] == tools.READ_LINES
    policy = stream.ResumePolicy()
    resume = RULES["resume"]
    assert policy.idle_timeout * 1000 == resume["idle_timeout_ms"]
    assert policy.give_up_after * 1000 == resume["give_up_after_ms"]
    assert policy.initial_backoff * 1000 == resume["initial_backoff_ms"]
    assert policy.max_backoff * 1000 == resume["max_backoff_ms"]
    assert policy.multiplier == resume["multiplier"]


def test_the_generated_rules_are_up_to_date() -> None:
    """Both clients' rule modules are what the generator writes now (as ``make stubs-check``)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_client_rules.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_codes_of_the_rules_are_the_ones_the_cases_describe() -> None:
    """The rule set's code lists and the per-code cases say the same thing."""
    codes = RULES["codes"]
    service = {c["code"]: c for c in CASES if c["from_service"]}
    transport = {c["code"]: c for c in CASES if not c["from_service"]}
    assert set(codes["engine_unreachable"]["codes"]) == {
        n for n, c in service.items() if c["engine_falls_back"]
    }
    assert set(codes["tool_transient"]["codes"]) == {
        n for n, c in service.items() if c["tool_error_raised"]
    }
    assert set(codes["stream_always_resumable"]["codes"]) == {
        n for n, c in service.items() if c["stream_resumes"]
    }
    assert set(codes["stream_resumable_from_transport"]["codes"]) == {
        n for n, c in transport.items() if c["stream_resumes"]
    } - set(codes["stream_always_resumable"]["codes"])
