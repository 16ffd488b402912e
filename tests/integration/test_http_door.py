"""The HTTP door: the contract over the Connect protocol, served by a real server on loopback
(real SQLite file) and called with a real HTTP client (aiohttp) and, where present, curl."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import shlex
import shutil
import struct
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from multidict import CIMultiDict

from support import builders as b
from support import commit_flow
from support import wm_names as names
from support.production import sample, scrape
from support.production import settings_for as make_settings
from support.providers import ProgrammableProvider
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.telemetry.observability import ACCESS_LOG

SERVICE = "wm.v1.WorkingMemoryService"
# The README's line, verbatim; the test swaps in the port the server picked.
README_CURL = (
    "curl -X POST -H 'content-type: application/json' -d '{\"name\":\"sessions/s1\"}'"
    " http://127.0.0.1:8081/wm.v1.WorkingMemoryService/GetSession"
)
ALPHA_KEY = "alpha-0123456789abcdef-key"
BETA_KEY = "beta-fedcba9876543210-key"
_ENVELOPE = struct.Struct(">BI")


# --- a small Connect client (the protocol, written from its specification) ------------------
@dataclass
class Reply:
    status: int
    headers: CIMultiDict[str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class StreamReply:
    status: int
    headers: CIMultiDict[str]
    messages: list[bytes] = field(default_factory=list)
    end: dict[str, Any] = field(default_factory=dict)


class Connect:
    def __init__(self, session: aiohttp.ClientSession, base: str, key: str | None = None) -> None:
        self.session = session
        self.base = base
        self.key = key

    def _headers(self, content_type: str, extra: dict[str, str] | None) -> dict[str, str]:
        headers = {"content-type": content_type, "connect-protocol-version": "1"}
        if self.key:
            headers["authorization"] = f"Bearer {self.key}"
        headers.update(extra or {})
        return headers

    async def post(
        self, method: str, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> Reply:
        async with self.session.post(
            f"{self.base}/{SERVICE}/{method}",
            data=body,
            headers=self._headers(content_type, headers),
        ) as response:
            return Reply(response.status, CIMultiDict(response.headers), await response.read())

    async def json(
        self, method: str, request: Message, headers: dict[str, str] | None = None
    ) -> Reply:
        return await self.post(
            method, json_format.MessageToJson(request).encode(), "application/json", headers
        )

    async def proto(
        self, method: str, request: Message, headers: dict[str, str] | None = None
    ) -> Reply:
        return await self.post(method, request.SerializeToString(), "application/proto", headers)

    async def stream(
        self,
        method: str,
        request: Message,
        codec: str = "json",
        headers: dict[str, str] | None = None,
    ) -> StreamReply:
        payload = (
            json_format.MessageToJson(request).encode()
            if codec == "json"
            else request.SerializeToString()
        )
        async with self.session.post(
            f"{self.base}/{SERVICE}/{method}",
            data=_ENVELOPE.pack(0, len(payload)) + payload,
            headers=self._headers(f"application/connect+{codec}", headers),
        ) as response:
            reply = StreamReply(response.status, CIMultiDict(response.headers))
            data = await response.read()
        offset = 0
        while offset < len(data):
            flags, length = _ENVELOPE.unpack_from(data, offset)
            message = data[offset + _ENVELOPE.size : offset + _ENVELOPE.size + length]
            offset += _ENVELOPE.size + length
            if flags & 0x02:
                reply.end = json.loads(message)
                assert offset == len(data), "the end-of-stream message is the last one"
            else:
                reply.messages.append(message)
        return reply


def events(reply: StreamReply, codec: str = "json") -> list[pb.CommitEvent]:
    if codec == "json":
        return [json_format.Parse(m, pb.CommitEvent()) for m in reply.messages]
    return [pb.CommitEvent.FromString(m) for m in reply.messages]


def decoded_details(error: dict[str, Any]) -> dict[str, Message]:
    """The error's details, decoded from their base64 protobuf value (never from debug)."""
    out: dict[str, Message] = {}
    kinds: dict[str, type[Message]] = {
        "google.rpc.ErrorInfo": error_details_pb2.ErrorInfo,
        "google.rpc.BadRequest": error_details_pb2.BadRequest,
        "google.rpc.RetryInfo": error_details_pb2.RetryInfo,
    }
    for detail in error.get("details", []):
        value = detail["value"]
        raw = base64.b64decode(value + "=" * (-len(value) % 4))
        out[detail["type"]] = kinds[detail["type"]].FromString(raw)
    return out


def error_info(error: dict[str, Any]) -> error_details_pb2.ErrorInfo:
    info = decoded_details(error)["google.rpc.ErrorInfo"]
    assert isinstance(info, error_details_pb2.ErrorInfo)
    assert info.domain == "wm"
    return info


# --- fixtures --------------------------------------------------------------------------------
async def _start(tmp_path: Path, **overrides: object) -> Application:
    settings = make_settings(
        tmp_path, http_address="127.0.0.1:0", heartbeat_seconds=0.5, **overrides
    )
    return await start_application(settings, provider=ProgrammableProvider())


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[Application]:
    application = await _start(tmp_path, metrics_address="127.0.0.1:0")
    yield application
    await application.stop(grace=0.5)


@pytest.fixture
async def http(app: Application) -> AsyncIterator[Connect]:
    assert app.http is not None
    async with aiohttp.ClientSession() as session:
        yield Connect(session, f"http://127.0.0.1:{app.http.port}")


async def _conversation(http: Connect, session: str) -> None:
    reply = await http.json(
        "AddMessages",
        api.AddMessagesRequest(
            parent=names.session(session),
            messages=[b.user("fix the parser"), b.assistant("done: parser fixed")],
            create_session_if_missing=True,
        ),
    )
    assert reply.status == 200, reply.body


async def _create_commit(http: Connect, session: str) -> str:
    """CreateCommit over the door (unary); the commit's name, to watch."""
    reply = await http.json("CreateCommit", commit_flow.create_request(session))
    assert reply.status == 200, reply.body
    name: str = reply.json()["name"]
    return name


# --- unary -----------------------------------------------------------------------------------
async def test_the_readme_curl_line_gets_a_session(app: Application, http: Connect) -> None:
    created = await http.json("CreateSession", api.CreateSessionRequest(session_id="s1"))
    assert created.status == 200
    assert app.http is not None
    port = app.http.port
    async with http.session.post(
        f"{http.base}/{SERVICE}/GetSession",
        data='{"name":"sessions/s1"}',
        headers={"content-type": "application/json"},  # what curl sends: nothing else
    ) as response:
        assert response.status == 200
        assert response.headers["content-type"].startswith("application/json")
        assert json.loads(await response.read())["name"] == "sessions/s1"
        assert response.headers["x-request-id"]
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("no curl binary: the same request was made with aiohttp above")
    command = shlex.split(README_CURL.replace("8081", str(port)))
    done = await asyncio.to_thread(
        subprocess.run, [curl, "-s", "-S", *command[1:]], capture_output=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["name"] == "sessions/s1"
    assert "createTime" in body


@pytest.mark.parametrize("codec", ["json", "proto"])
async def test_create_add_and_assemble(http: Connect, codec: str) -> None:
    call = http.json if codec == "json" else http.proto
    session = f"unary-{codec}"

    def parse(reply: Reply, message_type: type[Message]) -> Any:
        assert reply.status == 200, reply.body
        assert reply.headers["content-type"].startswith(f"application/{codec}")
        if codec == "json":
            return json_format.Parse(reply.body, message_type())
        return message_type.FromString(reply.body)

    created = parse(
        await call("CreateSession", api.CreateSessionRequest(session_id=session)), pb.Session
    )
    assert created.name == f"sessions/{session}"
    added = parse(
        await call(
            "AddMessages",
            api.AddMessagesRequest(
                parent=names.session(session),
                messages=[b.user("where is the bug?"), b.assistant("in the tokenizer")],
            ),
        ),
        api.AddMessagesResponse,
    )
    assert added.message_count == 2 and len(added.added_message_ids) == 2
    assembled = parse(
        await call(
            "AssembleContext",
            api.AssembleContextRequest(name=names.session(session), token_budget=50_000),
        ),
        api.AssembleContextResponse,
    )
    assert assembled.included_message_count == 2
    texts = [p.text for m in assembled.messages for p in m.parts if p.text]
    assert texts == ["where is the bug?", "in the tokenizer"]


async def test_invalid_argument_carries_field_violations(http: Connect) -> None:
    reply = await http.json("GetSession", api.GetSessionRequest(name="sessions/not a valid id!"))
    assert reply.status == 400
    assert reply.headers["content-type"].startswith("application/json")
    error = reply.json()
    assert error["code"] == "invalid_argument"
    assert "name" in error["message"]
    details = decoded_details(error)
    assert error_info(error).reason == "INVALID_REQUEST"
    bad = details["google.rpc.BadRequest"]
    assert isinstance(bad, error_details_pb2.BadRequest)
    assert [v.field for v in bad.field_violations] == ["name"]
    # debug is the same detail in JSON, for people reading the wire
    assert error["details"][1]["debug"]["fieldViolations"][0]["field"] == "name"


async def test_not_found_and_undecodable_bodies(http: Connect) -> None:
    missing = await http.json("GetSession", api.GetSessionRequest(name="sessions/nobody"))
    assert missing.status == 404
    assert missing.json()["code"] == "not_found"
    assert error_info(missing.json()).reason == "SESSION_NOT_FOUND"
    broken = await http.post("GetSession", b'{"name": ', "application/json")
    assert broken.status == 400
    assert error_info(broken.json()).reason == "MALFORMED_REQUEST"
    garbage = await http.post("GetSession", b"\xff\xff\xff", "application/proto")
    assert garbage.status == 400
    assert error_info(garbage.json()).reason == "MALFORMED_REQUEST"


async def test_unknown_method_wrong_verb_and_wrong_content_type(http: Connect) -> None:
    unknown = await http.json("NoSuchMethod", api.GetSessionRequest(name="sessions/s"))
    assert unknown.status == 404
    assert unknown.json()["code"] == "unimplemented"
    async with http.session.get(f"{http.base}/{SERVICE}/GetSession") as response:
        assert response.status == 405
        assert json.loads(await response.read())["code"] == "unimplemented"
    text = await http.post("GetSession", b"s1", "text/plain")
    assert text.status == 415
    streaming_type = await http.post("GetSession", b"{}", "application/connect+json")
    assert streaming_type.status == 415
    unary_type = await http.post("WatchCommit", b"{}", "application/json")
    assert unary_type.status == 415


async def test_gzip_request_bodies_and_unsupported_encodings(http: Connect) -> None:
    import gzip

    await http.json("CreateSession", api.CreateSessionRequest(session_id="zipped"))
    body = gzip.compress(b'{"name": "sessions/zipped"}')
    reply = await http.post("GetSession", body, "application/json", {"content-encoding": "gzip"})
    assert reply.status == 200 and reply.json()["name"] == "sessions/zipped"
    refused = await http.post("GetSession", body, "application/json", {"content-encoding": "br"})
    assert refused.status == 501
    assert refused.json()["code"] == "unimplemented"
    assert "gzip" in refused.json()["message"]


async def test_request_ids_echo_and_retries_return_the_same_outcome(
    app: Application, http: Connect
) -> None:
    request = api.AddMessagesRequest(
        parent="sessions/retried",
        messages=[b.user("only once", message_id="m-1")],
        create_session_if_missing=True,
        request_id="2b0c8a52-6d36-4c4e-9f55-8d5f7f0d4c11",
    )
    first = await http.json("AddMessages", request, {"x-request-id": "trace-http-1"})
    second = await http.json("AddMessages", request)
    assert first.status == second.status == 200
    assert first.headers["x-request-id"] == "trace-http-1"
    assert first.headers["trailer-x-request-id"] == "trace-http-1"
    assert second.headers["x-request-id"] != "trace-http-1"  # a fresh one when none is sent
    assert first.json() == second.json()
    assert first.json()["messageCount"] == "1"  # int64: a string in proto3 JSON
    # the same id over gRPC is the same request: still one message stored
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        again = await stub.AddMessages(request, timeout=10)
        assert again.message_count == 1
        assert list(again.added_message_ids) == first.json()["addedMessageIds"]


async def test_an_http_call_writes_its_access_line_and_moves_the_rpc_metric(
    app: Application, http: Connect
) -> None:
    assert app.metrics_port is not None
    series = {"method": f"{SERVICE}/GetSession", "code": "NOT_FOUND"}
    before = sample(await asyncio.to_thread(scrape, app.metrics_port), "wm_rpcs_total", **series)
    buffer = io.StringIO()
    ACCESS_LOG.configure(buffer, logging.INFO)
    try:
        reply = await http.json(
            "GetSession", api.GetSessionRequest(name="sessions/ghost"), {"x-request-id": "access-1"}
        )
        assert reply.status == 404
    finally:
        ACCESS_LOG.configure(None, logging.DEBUG)
    after = sample(await asyncio.to_thread(scrape, app.metrics_port), "wm_rpcs_total", **series)
    assert after == before + 1
    lines = [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]
    access = [line for line in lines if line.get("request_id") == "access-1"]
    assert len(access) == 1
    line = access[0]
    assert line["event"] == "rpc"
    assert line["method"] == f"/{SERVICE}/GetSession"
    assert line["code"] == "NOT_FOUND"
    assert line["session_id"] == "ghost"
    assert line["tenant"] == "default"
    assert line["duration_ms"] >= 0


# --- streams ---------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["json", "proto"])
async def test_commit_streams_to_its_terminal_event(http: Connect, codec: str) -> None:
    session = f"stream-{codec}"
    await _conversation(http, session)
    commit = await _create_commit(http, session)
    reply = await http.stream(
        "WatchCommit", api.WatchCommitRequest(name=commit), codec, {"x-request-id": "commit-1"}
    )
    assert reply.status == 200
    assert reply.headers["content-type"] == f"application/connect+{codec}"
    assert reply.headers["x-request-id"] == "commit-1"  # sent before the first event
    got = events(reply, codec)
    assert got[0].sequence == 1 and got[0].stage == pb.COMMIT_STAGE_ARCHIVED
    assert got[0].phase1.archived and got[0].commit == commit
    assert got[-1].stage == pb.COMMIT_STAGE_COMPLETED
    sequences = [e.sequence for e in got]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
    assert "error" not in reply.end
    assert reply.end["metadata"]["x-request-id"] == ["commit-1"]


async def test_watch_commit_resumes_after_a_sequence(http: Connect) -> None:
    await _conversation(http, "watched")
    commit = await _create_commit(http, "watched")
    whole = events(await http.stream("WatchCommit", api.WatchCommitRequest(name=commit)))
    assert whole[0].commit == commit and whole[-1].stage == pb.COMMIT_STAGE_COMPLETED
    resumed = await http.stream(
        "WatchCommit", api.WatchCommitRequest(name=commit, after_sequence=1)
    )
    replayed = [e for e in events(resumed) if e.stage != pb.COMMIT_STAGE_HEARTBEAT]
    assert [e.sequence for e in replayed] == [e.sequence for e in whole[1:]]
    assert replayed[-1].stage == pb.COMMIT_STAGE_COMPLETED
    assert "error" not in resumed.end


async def test_stream_errors_travel_in_the_end_of_stream_message(http: Connect) -> None:
    reply = await http.stream(
        "WatchCommit", api.WatchCommitRequest(name="sessions/bad id!/commits/c")
    )
    assert reply.status == 200 and reply.messages == []
    error = reply.end["error"]
    assert error["code"] == "invalid_argument"
    bad = decoded_details(error)["google.rpc.BadRequest"]
    assert isinstance(bad, error_details_pb2.BadRequest)
    assert [v.field for v in bad.field_violations] == ["name"]
    missing = await http.stream(
        "WatchCommit", api.WatchCommitRequest(name=names.commit("nobody", "commit_001"))
    )
    assert missing.end["error"]["code"] == "not_found"
    assert missing.end["metadata"]["x-request-id"]


async def test_connect_timeout_ends_a_tailing_stream_with_deadline_exceeded(
    tmp_path: Path,
) -> None:
    provider = ProgrammableProvider(gate=asyncio.Event())  # Phase 2 waits: the watch tails
    settings = make_settings(tmp_path, http_address="127.0.0.1:0", heartbeat_seconds=0.2)
    app = await start_application(settings, provider=provider)
    try:
        assert app.http is not None
        async with aiohttp.ClientSession() as session:
            http = Connect(session, f"http://127.0.0.1:{app.http.port}")
            await _conversation(http, "slow")
            commit = await _create_commit(http, "slow")
            first = await http.stream(
                "WatchCommit",
                api.WatchCommitRequest(name=commit),
                headers={"connect-timeout-ms": "300"},
            )
            assert first.end["error"]["code"] == "deadline_exceeded"
            assert events(first)[0].commit == commit
            bad = await http.stream(
                "WatchCommit",
                api.WatchCommitRequest(name=commit),
                headers={"connect-timeout-ms": "soon"},
            )
            assert bad.status == 200  # a stream's errors are in its end-of-stream message
            assert bad.end["error"]["code"] == "invalid_argument"
            assert "connect-timeout-ms" in bad.end["error"]["message"]
    finally:
        provider.gate.set()
        await app.stop(grace=0.5)


# --- authentication and tenants ----------------------------------------------------------------
async def test_keys_tenants_and_their_isolation(tmp_path: Path) -> None:
    app = await _start(tmp_path, api_keys=f"alpha:{ALPHA_KEY}, beta:{BETA_KEY}")
    try:
        assert app.http is not None
        base = f"http://127.0.0.1:{app.http.port}"
        async with aiohttp.ClientSession() as session:
            anonymous = Connect(session, base)
            alpha = Connect(session, base, ALPHA_KEY)
            beta = Connect(session, base, BETA_KEY)
            refused = await anonymous.json("ListSessions", api.ListSessionsRequest())
            assert refused.status == 401
            assert refused.json()["code"] == "unauthenticated"
            assert error_info(refused.json()).reason == "API_KEY_MISSING"
            wrong = await Connect(session, base, ALPHA_KEY + "x").json(
                "ListSessions", api.ListSessionsRequest()
            )
            assert error_info(wrong.json()).reason == "API_KEY_INVALID"
            stream = await anonymous.stream(
                "WatchCommit", api.WatchCommitRequest(name="sessions/x/commits/c")
            )
            assert stream.end["error"]["code"] == "unauthenticated"
            made = await alpha.json("CreateSession", api.CreateSessionRequest(session_id="mine"))
            assert made.status == 200
            assert (
                await alpha.json("GetSession", api.GetSessionRequest(name="sessions/mine"))
            ).status == 200
            foreign = await beta.json("GetSession", api.GetSessionRequest(name="sessions/mine"))
            assert foreign.status == 404
            assert foreign.json()["code"] == "not_found"
            listed = (await beta.json("ListSessions", api.ListSessionsRequest())).json()
            assert listed.get("sessions", []) == []
    finally:
        await app.stop(grace=0.5)


# --- TLS and shutdown ----------------------------------------------------------------------------
async def test_the_door_uses_the_grpc_certificate(tmp_path: Path) -> None:
    import ssl

    from support.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "pki")
    cert = ca.server()
    app = await _start(tmp_path, tls_cert=cert.cert_path, tls_key=cert.key_path)
    try:
        assert app.http is not None
        trust = ssl.create_default_context(cafile=str(ca.cert_path))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as session:
            http = Connect(session, f"https://127.0.0.1:{app.http.port}")
            reply = await http.json("CreateSession", api.CreateSessionRequest(session_id="tls"))
            assert reply.status == 200
            assert reply.json()["name"] == "sessions/tls"
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientError):  # plaintext is not served on that port
                await Connect(session, f"http://127.0.0.1:{app.http.port}").json(
                    "GetSession", api.GetSessionRequest(name="sessions/tls")
                )
    finally:
        await app.stop(grace=0.5)


async def test_mutual_tls_asks_the_door_s_callers_for_a_certificate_of_the_ca(
    tmp_path: Path,
) -> None:
    import ssl

    from support.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "pki")
    cert = ca.server()
    app = await _start(
        tmp_path,
        tls_cert=cert.cert_path,
        tls_key=cert.key_path,
        tls_client_ca=ca.cert_path,
        api_keys=f"alpha:{ALPHA_KEY}",
    )
    try:
        assert app.http is not None
        base = f"https://127.0.0.1:{app.http.port}"
        with_cert = ssl.create_default_context(cafile=str(ca.cert_path))
        client = ca.client()
        with_cert.load_cert_chain(client.cert_path, client.key_path)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=with_cert)) as session:
            reply = await Connect(session, base, ALPHA_KEY).json(
                "CreateSession", api.CreateSessionRequest(session_id="mtls")
            )
            assert reply.status == 200
            keyless = await Connect(session, base).json(
                "GetSession", api.GetSessionRequest(name="sessions/mtls")
            )
            assert keyless.status == 401  # a certificate is not a key
        without_cert = ssl.create_default_context(cafile=str(ca.cert_path))
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=without_cert)
        ) as session:
            with pytest.raises(aiohttp.ClientError):
                await Connect(session, base, ALPHA_KEY).json(
                    "GetSession", api.GetSessionRequest(name="sessions/mtls")
                )
    finally:
        await app.stop(grace=0.5)


async def test_shutdown_ends_open_streams_and_closes_the_port(tmp_path: Path) -> None:
    provider = ProgrammableProvider(gate=asyncio.Event())
    settings = make_settings(tmp_path, http_address="127.0.0.1:0", heartbeat_seconds=0.2)
    app = await start_application(settings, provider=provider)
    assert app.http is not None
    base = f"http://127.0.0.1:{app.http.port}"
    try:
        async with aiohttp.ClientSession() as session:
            http = Connect(session, base)
            await _conversation(http, "open")
            commit = await _create_commit(http, "open")
            watch = asyncio.create_task(
                http.stream("WatchCommit", api.WatchCommitRequest(name=commit))
            )
            await asyncio.sleep(0.5)  # the stream is open, tailing Phase 2
            await app.stop(grace=2.0)
            reply = await asyncio.wait_for(watch, 10)
            assert events(reply)[0].stage == pb.COMMIT_STAGE_ARCHIVED
            assert reply.end["error"]["code"] == "unavailable"
            with pytest.raises(aiohttp.ClientConnectionError):
                await http.json("GetSession", api.GetSessionRequest(name="sessions/open"))
    finally:
        provider.gate.set()
        await app.stop(grace=0.5)


# --- configuration -----------------------------------------------------------------------------
NON_LOOPBACK = "192.0.2.1"  # TEST-NET-1: no interface here has it (see test_auth)


async def test_the_door_is_off_by_default(tmp_path: Path) -> None:
    app = await start_application(make_settings(tmp_path), provider=ProgrammableProvider())
    try:
        assert app.http is None
    finally:
        await app.stop(grace=0.5)


async def test_a_door_beyond_loopback_without_keys_is_refused(tmp_path: Path) -> None:
    from wm_server.config import ConfigurationError

    settings = make_settings(tmp_path, http_address=f"{NON_LOOPBACK}:0")
    with pytest.raises(ConfigurationError) as caught:
        await start_application(settings)
    assert f"refusing to listen on {NON_LOOPBACK}:0 without authentication" in str(caught.value)
    assert not (tmp_path / "wm.sqlite3").exists()


async def test_a_port_in_use_stops_the_start_naming_the_variable(
    app: Application, tmp_path: Path
) -> None:
    from wm_server.config import ConfigurationError

    assert app.http is not None
    taken = f"127.0.0.1:{app.http.port}"
    with pytest.raises(ConfigurationError) as caught:
        await start_application(
            make_settings(tmp_path / "second", http_address=taken), provider=ProgrammableProvider()
        )
    assert f"WM_HTTP_ADDRESS: cannot listen on {taken}" in str(caught.value)


async def test_health_is_served_on_the_door(http: Connect) -> None:
    async with http.session.post(
        f"{http.base}/grpc.health.v1.Health/Check",
        data=json.dumps({"service": SERVICE}),
        headers={"content-type": "application/json"},
    ) as response:
        assert response.status == 200
        assert json.loads(await response.read()) == {"status": "SERVING"}


async def test_a_caller_that_leaves_a_stream_frees_its_slot_and_is_logged_cancelled(
    tmp_path: Path,
) -> None:
    provider = ProgrammableProvider(gate=asyncio.Event())  # Phase 2 waits: the stream tails
    settings = make_settings(
        tmp_path, http_address="127.0.0.1:0", heartbeat_seconds=0.2, metrics_address="127.0.0.1:0"
    )
    app = await start_application(settings, provider=provider)
    buffer = io.StringIO()
    ACCESS_LOG.configure(buffer, logging.INFO)
    try:
        assert app.http is not None and app.metrics_port is not None
        active = {"tenant": "default", "kind": "stream"}
        async with aiohttp.ClientSession() as session:
            http = Connect(session, f"http://127.0.0.1:{app.http.port}")
            await _conversation(http, "left")
            commit = await _create_commit(http, "left")
            payload = json.dumps({"name": commit}).encode()
            async with session.post(
                f"{http.base}/{SERVICE}/WatchCommit",
                data=_ENVELOPE.pack(0, len(payload)) + payload,
                headers={"content-type": "application/connect+json", "x-request-id": "leaver"},
            ) as response:
                flags, length = _ENVELOPE.unpack(await response.content.readexactly(5))
                first = json_format.Parse(
                    await response.content.readexactly(length), pb.CommitEvent()
                )
                assert flags == 0 and first.stage == pb.COMMIT_STAGE_ARCHIVED
                exposition = await asyncio.to_thread(scrape, app.metrics_port)
                assert sample(exposition, "wm_tenant_active_calls", **active) == 1
                response.close()  # the caller goes away mid-stream
        for _ in range(100):
            ACCESS_LOG.flush()
            if '"leaver"' in buffer.getvalue():
                break
            await asyncio.sleep(0.05)
        lines = [json.loads(x) for x in buffer.getvalue().splitlines() if x.strip()]
        (line,) = [x for x in lines if x.get("request_id") == "leaver"]
        assert line["code"] == "CANCELLED"
        assert line["messages_sent"] >= 1
        exposition = await asyncio.to_thread(scrape, app.metrics_port)
        assert sample(exposition, "wm_tenant_active_calls", **active) == 0
    finally:
        ACCESS_LOG.configure(None, logging.DEBUG)
        provider.gate.set()
        await app.stop(grace=0.5)
