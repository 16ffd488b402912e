"""The packaged service config: complete, safe to retry, and what the channel loads."""

from __future__ import annotations

import json
from pathlib import Path

from wm_client.channel import reachable_address, service_config, service_config_text
from wm_client.data import SERVICE_CONFIG_FILE, packaged
from wm_proto.v1 import working_memory_service_pb2 as api

SOURCE = Path(str(packaged(SERVICE_CONFIG_FILE)))
SERVICE = api.DESCRIPTOR.services_by_name["WorkingMemoryService"]
# RPCs whose request carries a request_id (so a retry never stores twice).
MUTATING = {
    "CreateSession",
    "DeleteSession",
    "AddMessages",
    "RemoveRecentMessages",
    "CreateCommit",
    "RetryCommit",
    "CompactSession",
    "ApplyWorkingMemoryOps",
}


def _configs() -> dict[str, dict[str, object]]:
    by_method: dict[str, dict[str, object]] = {}
    for entry in json.loads(SOURCE.read_text())["methodConfig"]:
        for name in entry["name"]:
            assert name["service"] == SERVICE.full_name
            assert name["method"] not in by_method, f"{name['method']} configured twice"
            by_method[name["method"]] = entry
    return by_method


def test_the_channel_loads_the_packaged_file() -> None:
    assert service_config_text() == SOURCE.read_text()
    assert service_config() == json.loads(SOURCE.read_text())


def test_every_rpc_has_a_timeout_and_only_safe_unary_rpcs_retry() -> None:
    configs = _configs()
    assert set(configs) == {m.name for m in SERVICE.methods}
    for method in SERVICE.methods:
        entry = configs[method.name]
        assert str(entry["timeout"]).endswith("s")
        if method.server_streaming:
            assert "retryPolicy" not in entry, "streams resume in the client, never retry"
            continue
        policy = entry["retryPolicy"]
        assert isinstance(policy, dict) and policy["retryableStatusCodes"] == ["UNAVAILABLE"]
        assert 2 <= policy["maxAttempts"] <= 5
        if method.name in MUTATING:
            assert "request_id" in method.input_type.fields_by_name
    # Starting a commit is unary and idempotent by request_id: retried like any mutation.
    assert "retryPolicy" in configs["CreateCommit"] and "retryPolicy" in configs["CompactSession"]
    assert {m.name for m in SERVICE.methods if m.server_streaming} == {"WatchCommit"}


def test_wildcard_listen_addresses_are_dialled_on_loopback() -> None:
    assert reachable_address("0.0.0.0:50051") == "127.0.0.1:50051"
    assert reachable_address("[::]:7000") == "127.0.0.1:7000"
    assert reachable_address("10.0.0.5:50051") == "10.0.0.5:50051"
