"""Access logs are JSON lines with the agreed fields and no message content; the Prometheus
endpoint is scraped over HTTP and its series move."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from support import builders as b
from support import commit_flow, wm_names
from support.production import code_of, sample, scrape
from support.production import settings_for as make_settings
from support.providers import Answer, ProgrammableProvider, creation, ops
from support.server_process import ServerProcess, free_port
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application

Stub = service_grpc.WorkingMemoryServiceStub
KEY = "observability-key-0123456789"
AUTH = (("authorization", f"Bearer {KEY}"),)
SECRET = "zebra-marmalade-7731"  # message content that must never reach a log line
ACCESS_FIELDS = {"method", "code", "duration_ms", "session_id", "tenant", "request_id"}
SERVICE = "wm.v1.WorkingMemoryService"
FRESH = [("grpc.use_local_subchannel_pool", 1)]


# --- logs (a real wm-server process: its stderr is the log stream) --------------------------
@pytest.mark.slow
async def test_access_log_is_json_lines_with_fields_and_no_message_content(
    tmp_path: Path,
) -> None:
    metrics_port = free_port()
    server = ServerProcess(
        tmp_path,
        WM_API_KEYS=f"obs:{KEY}",
        WM_METRICS_ADDRESS=f"127.0.0.1:{metrics_port}",
    ).start()
    try:
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            stub = Stub(channel)
            await stub.AddMessages(
                api.AddMessagesRequest(
                    parent=wm_names.session("logged"),
                    messages=[b.user(f"please remember {SECRET}"), b.assistant(SECRET)],
                    create_session_if_missing=True,
                ),
                metadata=(*AUTH, ("x-request-id", "trace-me-1")),
            )
            started = await stub.CreateCommit(
                api.CreateCommitRequest(parent=wm_names.session("logged")), metadata=AUTH
            )
            watch = api.WatchCommitRequest(name=started.name)
            events = [e async for e in stub.WatchCommit(watch, metadata=AUTH, timeout=30)]
            assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
            await stub.SearchArchives(
                api.SearchArchivesRequest(parent=wm_names.session("logged"), query=SECRET),
                metadata=AUTH,
            )
            await stub.AssembleContext(
                api.AssembleContextRequest(name=wm_names.session("logged"), token_budget=50_000),
                metadata=AUTH,
            )
            unauthenticated = await code_of(
                stub.GetSession(api.GetSessionRequest(name=wm_names.session("logged")))
            )
            assert unauthenticated == grpc.StatusCode.UNAUTHENTICATED
            exposition = await asyncio.to_thread(scrape, metrics_port)
    finally:
        assert server.terminate() == 0
    text = server.log_path.read_text()
    assert SECRET not in text
    lines = [line for line in text.splitlines() if line.strip()]
    parsed = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(isinstance(entry, dict) and "timestamp" in entry for entry in parsed)
    access = [e for e in parsed if e.get("event") == "rpc"]
    assert {e["method"] for e in access} >= {
        f"/{SERVICE}/AddMessages",
        f"/{SERVICE}/CreateCommit",
        f"/{SERVICE}/WatchCommit",
        f"/{SERVICE}/SearchArchives",
        f"/{SERVICE}/AssembleContext",
        f"/{SERVICE}/GetSession",
    }
    for entry in access:
        assert entry.keys() >= ACCESS_FIELDS, entry
        assert isinstance(entry["duration_ms"], float | int) and entry["duration_ms"] >= 0
    by_method = {e["method"].rsplit("/", 1)[1]: e for e in access}
    add = by_method["AddMessages"]
    assert (add["code"], add["tenant"], add["session_id"], add["request_id"]) == (
        "OK",
        "obs",
        "logged",
        "trace-me-1",
    )
    assert by_method["WatchCommit"]["messages_sent"] == len(events)
    assert by_method["CreateCommit"]["session_id"] == "logged"
    assert by_method["GetSession"]["code"] == "UNAUTHENTICATED"
    assert by_method["GetSession"]["tenant"] == ""
    assert len({e["request_id"] for e in access}) == len(access)  # one fresh id per RPC
    # the endpoint of the child, configured by WM_METRICS_ADDRESS
    assert sample(exposition, "wm_rpcs_total", method=f"{SERVICE}/AddMessages", code="OK") == 1
    assert sample(exposition, "wm_phase2_duration_seconds_count", outcome="completed") == 1


# --- metrics (in process, provider under the test's control) --------------------------------
@pytest.fixture
def provider() -> ProgrammableProvider:
    return ProgrammableProvider()


@pytest.fixture
async def metered(tmp_path: Path, provider: ProgrammableProvider) -> AsyncIterator[Application]:
    settings = make_settings(
        tmp_path, metrics_address="127.0.0.1:0", api_keys=f"obs:{KEY}", heartbeat_seconds=0.5
    )
    app = await start_application(settings, provider=provider)
    yield app
    await app.stop(grace=0.5)


async def _scrape(app: Application) -> str:
    assert app.metrics_port is not None
    return await asyncio.to_thread(scrape, app.metrics_port)


async def test_metrics_endpoint_counts_rpcs_phase2_tokens_guards_and_queue(
    metered: Application, provider: ProgrammableProvider
) -> None:
    before = await _scrape(metered)
    assert "wm_rpcs_total" in before or "# TYPE wm_rpcs counter" in before
    assert sample(before, "wm_phase2_queue_depth") == 0
    provider.creates.append(
        Answer(creation(session_title="Metrics", files_context="- `a.py`: entry point"))
    )
    provider.updates.append(Answer(ops(files_context={"op": "UPDATE", "content": "- `b.py`"})))
    async with grpc.aio.insecure_channel(metered.address) as channel:
        stub = Stub(channel)
        for text in ("first", "second"):
            await stub.AddMessages(
                api.AddMessagesRequest(
                    parent=wm_names.session("m"),
                    messages=[b.user(text)],
                    create_session_if_missing=True,
                ),
                metadata=AUTH,
            )
            _, events = await commit_flow.commit(stub, "m", metadata=AUTH)
            assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
        assert (
            await code_of(
                stub.GetSession(
                    api.GetSessionRequest(name=wm_names.session("absent")), metadata=AUTH
                )
            )
            == grpc.StatusCode.NOT_FOUND
        )
        assert (
            await code_of(stub.GetSession(api.GetSessionRequest(name=wm_names.session("m"))))
            == grpc.StatusCode.UNAUTHENTICATED
        )

        # a job held in the model call shows in the queue depth
        provider.gate = asyncio.Event()
        await stub.AddMessages(
            api.AddMessagesRequest(parent=wm_names.session("m"), messages=[b.user("third")]),
            metadata=AUTH,
        )
        started = await stub.CreateCommit(commit_flow.create_request("m"), metadata=AUTH)
        assert started.archive  # Phase 1 archived "third"
        call = stub.WatchCommit(
            api.WatchCommitRequest(name=started.name), metadata=AUTH, timeout=30
        )
        first = await call.read()
        assert isinstance(first, pb.CommitEvent) and first.phase1.archived
        held = await _scrape(metered)
        provider.gate.set()
        last = first
        while (event := await call.read()) is not grpc.aio.EOF:
            assert isinstance(event, pb.CommitEvent)
            last = event
        assert last.stage == pb.COMMIT_STAGE_COMPLETED

    after = await _scrape(metered)
    assert sample(held, "wm_phase2_queue_depth") == 1
    assert sample(after, "wm_phase2_queue_depth") == 0

    def moved(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    add, commit = f"{SERVICE}/AddMessages", f"{SERVICE}/CreateCommit"
    get = f"{SERVICE}/GetSession"
    assert moved("wm_rpcs_total", method=add, code="OK") == 3
    assert moved("wm_rpcs_total", method=commit, code="OK") == 3
    assert moved("wm_rpcs_total", method=get, code="NOT_FOUND") == 1
    assert moved("wm_rpcs_total", method=get, code="UNAUTHENTICATED") == 1
    assert moved("wm_rpc_duration_seconds_count", method=add, code="OK") == 3
    assert moved("wm_rpc_duration_seconds_sum", method=commit, code="OK") > 0
    assert moved("wm_phase2_duration_seconds_count", outcome="completed") == 3
    assert moved("wm_llm_tokens_total", kind="input") == 300  # 100 per call (the provider)
    assert moved("wm_llm_tokens_total", kind="output") == 60
    guards = [
        s
        for s in _samples(after, "wm_guard_interventions_total")
        if s[0].get("section") == "Files & Context"
    ]
    assert guards and all(value >= 1 for _, value in guards)


def _samples(exposition: str, name: str) -> list[tuple[dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (dict(item.labels), float(item.value))
        for family in text_string_to_metric_families(exposition)
        for item in family.samples
        if item.name == name
    ]


async def test_metrics_are_off_unless_configured(app: Application) -> None:
    assert app.metrics_port is None
