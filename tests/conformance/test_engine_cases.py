"""The engine conformance cases (engine_cases.json), run by the Python ContextEngine and
ToolExecutor against a real server on loopback; the TypeScript suite runs the same file
(clients/typescript/test/engine-cases.test.ts).

Between the client and the server sits a gRPC client interceptor: it records every request
the client sends and plays the case's faults (UNAVAILABLE before a call is sent, or after
the server answered: a lost answer). The channel has no service config, so the client's own
retries are off and what is recorded is the engine's behaviour.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage

from support.production import settings_for
from wm_client import WmClient
from wm_client.engine import ContextEngine
from wm_client.errors import WmError
from wm_client.stream import ResumePolicy
from wm_client.tools import ToolExecutor
from wm_proto.v1 import resources_pb2 as pb
from wm_server.app import Application, start_application

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "engine_cases.json").read_text(encoding="utf-8")
)["cases"]
SESSION = "s"
# Short enough that a re-opened stream does not make a case slow.
POLICY = ResumePolicy(give_up_after=10.0, initial_backoff=0.05)


@dataclass
class Recorder:
    """The requests the client sent, in order, and the faults still to play."""

    faults: dict[tuple[str, int], str]
    sent: list[tuple[str, ProtoMessage]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def record(self, method: str | bytes, request: ProtoMessage) -> str | None:
        name = (method.decode() if isinstance(method, bytes) else method).rsplit("/", 1)[-1]
        self.sent.append((name, request))
        self.counts[name] += 1
        return self.faults.get((name, self.counts[name]))


def _unavailable(why: str) -> grpc.aio.AioRpcError:
    empty = grpc.aio.Metadata()
    return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, empty, empty, details=why)


class _FaultyUnary(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def intercept_unary_unary(
        self,
        continuation: Callable[[Any, Any], Awaitable[Any]],
        details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        fault = self.recorder.record(details.method, request)
        if fault == "unavailable":
            raise _unavailable("injected: the connection was refused")
        call = await continuation(details, request)
        if fault == "answer_lost":
            await call  # the server did the work
            raise _unavailable("injected: the answer was lost")
        return call


class _FaultyStream(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def intercept_unary_stream(
        self,
        continuation: Callable[[Any, Any], Awaitable[Any]],
        details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        if self.recorder.record(details.method, request) == "unavailable":
            raise _unavailable("injected: the connection was refused")
        return await continuation(details, request)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Application]:
    application = await start_application(settings_for(tmp_path))
    try:
        yield application
    finally:
        await application.stop(grace=0.5)


def _message(data: dict[str, Any]) -> pb.Message:
    return json_format.ParseDict(data, pb.Message())


def _texts(messages: Any) -> list[str]:
    return ["".join(p.text for p in m.parts if p.WhichOneof("kind") == "text") for m in messages]


def _stage(event: Any) -> str:
    if isinstance(event, BaseException):
        return f"error: {event!r}"
    return str(pb.CommitStage.Name(event.stage)).removeprefix("COMMIT_STAGE_").lower()


async def _step(
    step: dict[str, Any],
    engine: ContextEngine,
    tools: ToolExecutor,
    history: list[pb.Message],
) -> dict[str, Any]:
    """Run one step; what it returned, in the case file's terms."""
    if step["do"] == "after_turn":
        turn = [_message(m) for m in step["turn"]]
        history.extend(turn)
        keep = step.get("keep_recent")
        result = await engine.after_turn(
            SESSION,
            turn,
            step["token_budget"],
            commit_ratio=step.get("commit_ratio", 0.5),
            keep_recent=keep,
        )
        return {
            "stored": result.stored,
            "unsent_messages": result.unsent_messages,
            "flushed_messages": result.flushed_messages,
            "commit_started": result.commit_started,
        }
    if step["do"] == "assemble":
        own = list(history) if step.get("own_messages") else None
        context = await engine.assemble(SESSION, step["token_budget"], messages=own)
        return {"fallback": context.fallback, "texts": _texts(context.messages)}
    if step["do"] == "compact":
        compacted = await engine.compact(SESSION, tokens_before=step.get("tokens_before"))
        return {"outcome": compacted.outcome.value}
    if step["do"] == "wait_idle":
        return {"terminals": [_stage(e) for e in await engine.wait_idle()]}
    assert step["do"] == "tool", step
    try:
        run = await tools.run(step["name"], step["input"])
    except WmError as error:
        return {"raises": error.code.name}
    return {"is_error": run.is_error}


def _request_json(request: ProtoMessage) -> dict[str, Any]:
    return json_format.MessageToDict(request)


def _check_requests(case: dict[str, Any], sent: list[tuple[str, ProtoMessage]]) -> None:
    assert [name for name, _ in sent] == [r["rpc"] for r in case["requests"]]
    ids: dict[str, str] = {}
    for (name, request), expected in zip(sent, case["requests"], strict=True):
        data = _request_json(request)
        label = expected.get("request_id")
        if label is not None:
            actual = data.get("requestId", "")
            assert actual, (name, data)
            assert ids.setdefault(label, actual) == actual, (label, name)
        if "texts" in expected:
            assert _texts(request.messages) == expected["texts"], name
        for key, value in expected.get("fields", {}).items():
            assert data.get(key) == value, (name, key, data)
    assert len(set(ids.values())) == len(ids), "two labels must be two request ids"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
async def test_the_python_engine_passes_the_case(case: dict[str, Any], server: Application) -> None:
    faults = {(f["rpc"], f["call"]): f["kind"] for f in case.get("faults", [])}
    recorder = Recorder(faults)
    channel = grpc.aio.insecure_channel(
        server.address,
        options=[("grpc.enable_retries", 0)],
        interceptors=[_FaultyUnary(recorder), _FaultyStream(recorder)],
    )
    async with WmClient(server.address) as plain:
        if "session_config" in case:
            config = json_format.ParseDict(case["session_config"], pb.SessionConfig())
            await plain.create_session(SESSION, config=config)
        async with WmClient(channel=channel, resume_policy=POLICY) as client:
            engine = ContextEngine(client)
            tools = ToolExecutor(client, SESSION)
            history: list[pb.Message] = []
            try:
                for index, step in enumerate(case["steps"]):
                    got = await _step(step, engine, tools, history)
                    for key, value in step.get("expect", {}).items():
                        assert got[key] == value, (index, step["do"], key, got)
            finally:
                await engine.aclose()
            await channel.close()
        _check_requests(case, recorder.sent)
        session = await plain.get_session(SESSION)
        assert session.total_message_count == case["stored_messages"]
