"""The client service config shipped as wm_client's package data (wm_grpc_service_config.json): it parses,
covers every RPC of wm.v1.WorkingMemoryService once, retries only UNAVAILABLE and only on
idempotent or request_id-protected methods, and a real channel accepts it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import grpc

from wm_client.data import SERVICE_CONFIG_FILE, packaged
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application

CONFIG = Path(str(packaged(SERVICE_CONFIG_FILE)))
SERVICE = api.DESCRIPTOR.services_by_name["WorkingMemoryService"]
READ_ONLY = re.compile(r"^(Get|List|Search|Assemble|Watch|Preview)")  # methods that write nothing
DURATION = re.compile(r"^\d+(\.\d{1,9})?s$")


def _config() -> dict[str, Any]:
    value = json.loads(CONFIG.read_text(encoding="utf-8"))
    assert isinstance(value, dict)
    return value


def _entries() -> dict[str, dict[str, Any]]:
    """Method name → its methodConfig; a service-wide entry applies to every method."""
    by_method: dict[str, dict[str, Any]] = {}
    for entry in _config()["methodConfig"]:
        for name in entry["name"]:
            assert name.get("service") == SERVICE.full_name, name
            targets = [name["method"]] if name.get("method") else list(SERVICE.methods_by_name)
            for method in targets:
                assert method in SERVICE.methods_by_name, f"unknown method {method}"
                assert method not in by_method or not name.get("method"), f"{method} twice"
                by_method.setdefault(method, entry)
    return by_method


def test_service_config_covers_every_rpc() -> None:
    assert set(_entries()) == set(SERVICE.methods_by_name)


def test_timeouts_and_retry_policies_are_well_formed() -> None:
    for method, entry in _entries().items():
        assert DURATION.match(entry.get("timeout", "")), f"{method}: timeout"
        policy = entry.get("retryPolicy")
        if policy is None:
            continue
        assert policy["retryableStatusCodes"] == ["UNAVAILABLE"], method
        assert 2 <= int(policy["maxAttempts"]) <= 5, method
        assert DURATION.match(policy["initialBackoff"]) and DURATION.match(policy["maxBackoff"])
        assert float(policy["backoffMultiplier"]) > 0


def test_only_idempotent_or_request_id_methods_are_retried() -> None:
    for method, entry in _entries().items():
        if "retryPolicy" not in entry:
            continue
        request = SERVICE.methods_by_name[method].input_type
        assert READ_ONLY.match(method) or "request_id" in request.fields_by_name, method


async def test_a_real_channel_accepts_the_config(app: Application) -> None:
    options = [
        ("grpc.service_config", packaged(SERVICE_CONFIG_FILE).read_text("utf-8")),
        ("grpc.enable_retries", 1),
    ]
    async with grpc.aio.insecure_channel(app.address, options=options) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        tools = await stub.GetToolDefinitions(api.GetToolDefinitionsRequest())
        assert tools.tools
        session = await stub.CreateSession(api.CreateSessionRequest(request_id="cfg-1"))
        assert session.name.startswith("sessions/")
