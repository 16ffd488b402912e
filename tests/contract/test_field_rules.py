"""Every field rule the proto states holds at the server, generated from the annotations.

For each RPC a valid base request (below); for every buf.validate rule on a field it carries
(nested messages included) the cases are generated from the rule itself: the boundary value is
accepted (the server answers anything but an INVALID_ARGUMENT naming the field: a NOT_FOUND
for a session that does not exist is the edge letting it through) and one step past it is refused with
INVALID_ARGUMENT and a BadRequest violation naming the field. A rule this generator cannot
make a case for fails ``test_every_rule_has_cases`` unless it is listed, with why, in
``NOT_GENERATED``; the message-level rules (CEL across fields) have their cases written out.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from support.providers import ProgrammableProvider
from wm_core import SECTIONS
from wm_proto.v1 import buf_validate_pb2 as rules
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.config import Settings

S = "sessions/fz"
TEXT_MESSAGE = {"id": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}
TOOL_MESSAGE = {
    "id": "m2",
    "role": "ROLE_ASSISTANT",
    "parts": [{"toolUse": {"id": "t1", "name": "grep", "inputJson": "{}"}}],
}
RESULT_MESSAGE = {
    "id": "m3",
    "role": "ROLE_USER",
    "parts": [{"toolResult": {"toolUseId": "t1", "content": "ok"}}],
}
MEMORY = {"type": "MEMORY_TYPE_PROFILE", "text": "The user is Dana.", "fields": {"k": "v"}}
CONFIG = {
    "autoCommit": {
        "pendingTokenThreshold": "1000",
        "messageCountThreshold": 10,
        "idleTimeout": "60s",
        "minCommitInterval": "1s",
        "keepRecentCount": 2,
        "keepRecentTurns": 1,
    },
    "toolOutputInlineChars": 5000,
    "model": {"provider": "programmable", "model": "m"},
}
MEM = "memories/mem_0123456789abcdef0123"

# A valid request of every RPC, touching every message a request can carry.
BASES: dict[str, dict[str, Any]] = {
    "CreateSession": {
        "sessionId": "fz-new",
        "requestId": "r",
        "session": {"config": CONFIG, "userId": "u1"},
    },
    "GetSession": {"name": S},
    "UpdateSession": {"session": {"name": S, "config": CONFIG}, "requestId": "r"},
    "ListSessions": {"pageSize": 10, "pageToken": ""},
    "DeleteSession": {"name": "sessions/fz-none", "requestId": "r"},
    "AddMessages": {
        "parent": "sessions/fz-none",
        "messages": [TEXT_MESSAGE, TOOL_MESSAGE, RESULT_MESSAGE],
        "requestId": "r",
    },
    "ListMessages": {"parent": S, "pageSize": 10},
    "RemoveRecentMessages": {"parent": "sessions/fz-none", "count": 1, "requestId": "r"},
    "CreateCommit": {"parent": "sessions/fz-none", "keepRecentCount": 2, "requestId": "r"},
    "CompactSession": {"name": "sessions/fz-none", "requestId": "r"},
    "GetCommit": {"name": f"{S}/commits/c1"},
    "ListCommits": {"parent": S, "pageSize": 5},
    "RetryCommit": {"name": f"{S}/commits/c1", "requestId": "r"},
    "GetWorkingMemory": {"name": f"{S}/workingMemories/latest"},
    "ApplyWorkingMemoryOps": {
        "parent": "sessions/fz-none",
        "ops": [{"section": "Open Issues", "kind": "SECTION_OP_KIND_APPEND", "items": ["x"]}],
        "expectedVersion": "0",
        "requestId": "r",
    },
    "AssembleContext": {
        "name": S,
        "tokenBudget": "20000",
        "systemPrompt": "Be brief.",
        "registeredTools": {"names": ["archive_search"]},
        "memoryRecall": {"enabled": True, "tokenBudget": "100", "pageSize": 3},
        "format": "CONTEXT_FORMAT_OPENAI_RESPONSES",
    },
    "ListArchives": {"parent": S, "pageSize": 5},
    "GetArchive": {"name": f"{S}/archives/archive_001"},
    "SearchArchives": {
        "parent": S,
        "query": "hello",
        "pageSize": 5,
        "mode": "SEARCH_MODE_RANKED",
        "minScore": 0.1,
    },
    "GetToolDefinitions": {"format": "TOOL_FORMAT_ANTHROPIC_MESSAGES"},
    "GetToolOutput": {"name": f"{S}/toolOutputs/out.m2.0", "lines": {"start": "1", "count": "10"}},
    "SearchToolOutputs": {"parent": S, "query": "x", "pageSize": 5},
    "SearchMemories": {
        "owner": "users/u1",
        "query": "Dana",
        "types": ["MEMORY_TYPE_PROFILE"],
        "pageSize": 5,
        "minScore": 0.1,
    },
    "ListMemories": {
        "owner": "users/u1",
        "types": ["MEMORY_TYPE_PROFILE"],
        "state": "MEMORY_STATE_ACTIVE",
        "pageSize": 5,
    },
    "GetMemory": {"name": MEM},
    "CreateMemory": {"owner": "users/u1", "memory": {**MEMORY, "supersedes": []}, "requestId": "r"},
    "UpdateMemory": {"memory": {"name": MEM, "text": "x"}, "reason": "why", "requestId": "r"},
    "DeleteMemory": {"name": MEM, "requestId": "r"},
    "PreviewMemoryExtraction": {"name": S, "messages": [TEXT_MESSAGE]},
    "RetireMemory": {"name": MEM, "reason": "gone", "requestId": "r"},
    "PurgeUserData": {"userId": "u-none", "requestId": "r"},
    "WatchCommit": {"name": f"{S}/commits/c1", "afterSequence": "0"},
}
# Fields whose base has one more message (or tool output) than the generated items need.
_BYTE_RANGE = {"name": f"{S}/toolOutputs/out.m2.0", "bytes": {"offset": "0", "length": "10"}}
EXTRA_BASES = {"GetToolOutput": _BYTE_RANGE}

# Rules no case can be generated for, and why.
NOT_GENERATED: dict[str, str] = {
    "UpdateMemoryRequest.memory": "IGNORE_ALWAYS: the server checks the fields the mask names",
}
# Fields whose boundary value no request can carry past the server's own check (only the
# "one past" case is generated): a page token is one the server issued or refused.
ONLY_REFUSED = {"page_token": "a token the server did not issue is refused whatever its size"}


@dataclass(frozen=True)
class Case:
    method: str
    path: str  # the field path a violation names, as the server writes it
    request: Message
    accepted: bool

    def __str__(self) -> str:
        return f"{self.method} {self.path} {'ok' if self.accepted else 'refused'}"


def _request(method: str, data: dict[str, Any]) -> Message:
    service = api.DESCRIPTOR.services_by_name["WorkingMemoryService"]
    name = service.methods_by_name[method].input_type.name
    message: Message = getattr(api, name)()
    json_format.ParseDict(data, message)
    return message


def _length_pattern(pattern: str) -> tuple[str, str, int] | None:
    """A pattern ending in a character class with a {1,N} length: (the fixed prefix the base
    value keeps, a character the class takes, N)."""
    found = re.search(r"\[(A-Za-z0-9[^\]]*)\]\{1,(\d+)\}\$$", pattern)
    return ("", "a", int(found.group(2))) if found else None


def _lengths(value: str, pattern: str) -> Iterator[tuple[str, bool]]:
    found = _length_pattern(pattern)
    if found is None:
        yield value, True
        yield value + " ", False  # a space matches no pattern of the contract
        return
    _, char, most = found
    head = value.rsplit("/", 1)[0] + "/" if "/" in value else ""
    yield head + char * most, True
    yield head + char * (most + 1), False


def predefined_pattern(rule: rules.StringRules) -> str | None:
    """The pattern of the contract's predefined rule set on ``rule`` (wm/v1/rules.proto: a
    CEL ``this.matches('...')``), if one is."""
    for field, value in rule.ListFields():
        if field.is_extension and value:
            expression = field.GetOptions().Extensions[rules.predefined].cel[0].expression
            found = re.search(r"this\.matches\('(.*?)'\)", expression)
            if found:
                return found.group(1).replace("\\\\", "\\")
    return None


def _string_values(rule: rules.StringRules, value: str) -> Iterator[tuple[str, bool]]:
    predefined = predefined_pattern(rule)
    if predefined is not None:
        yield from _lengths(value, predefined)
    if rule.HasField("pattern"):
        yield from _lengths(value, rule.pattern)
    if rule.HasField("max_len") and not rule.HasField("pattern"):
        yield "a" * rule.max_len, True
        yield "a" * (rule.max_len + 1), False
    if rule.HasField("min_len") and rule.min_len > 0 and not rule.HasField("pattern"):
        yield "a" * rule.min_len, True
        yield "a" * (rule.min_len - 1), False
    members = list(getattr(rule, "in"))
    if members:
        yield members[-1], True
        yield members[-1] + "x", False
    for refused in rule.not_in:
        yield refused, False


def _number_values(bounds: Any, step: float) -> Iterator[tuple[float, bool]]:
    if bounds.HasField("lte"):
        yield bounds.lte, True
        yield bounds.lte + step, False
    if bounds.HasField("gte"):
        yield bounds.gte, True
        yield bounds.gte - step, False


def _cases_for(
    method: str, base: Message, message: Message, field: FieldDescriptor, prefix: str
) -> Iterator[tuple[str, Message, bool]]:
    """(path, request, accepted) for every rule of ``field`` of ``message`` (inside base)."""
    options = field.GetOptions()
    if not options.HasExtension(rules.field):
        return
    rule: rules.FieldRules = options.Extensions[rules.field]
    path = f"{prefix}{field.name}"
    kind = rule.WhichOneof("type")

    def variant(apply: Any) -> Message:
        copy = type(base)()
        copy.CopyFrom(base)
        target = _walk(copy, prefix)
        apply(target)
        return copy

    if (rule.required and field.message_type is not None) or rule.required:
        yield path, variant(lambda t: t.ClearField(field.name)), False
    if kind == "string":
        current = getattr(message, field.name)
        for value, ok in _string_values(rule.string, current):
            yield path, variant(lambda t, v=value: setattr(t, field.name, v)), ok
    elif kind in ("int32", "int64"):
        for value, ok in _number_values(getattr(rule, kind), 1):
            yield path, variant(lambda t, v=int(value): setattr(t, field.name, v)), ok
    elif kind == "double":
        for value, ok in _number_values(rule.double, 0.001):
            yield path, variant(lambda t, v=value: setattr(t, field.name, v)), ok
    elif kind == "enum":
        values = [v.number for v in field.enum_type.values]
        if field.is_repeated:
            return
        if rule.enum.defined_only:
            yield path, variant(lambda t: setattr(t, field.name, max(values))), True
            yield path, variant(lambda t: setattr(t, field.name, 99)), False
        if 0 in rule.enum.not_in:
            yield path, variant(lambda t: setattr(t, field.name, 0)), False
    elif kind == "repeated":
        yield from _repeated_cases(path, field, rule.repeated, message, variant)
    elif kind == "map":
        most = rule.map.max_pairs

        def pairs(count: int) -> Any:
            def apply(t: Message) -> None:
                getattr(t, field.name).clear()
                getattr(t, field.name).update({f"k{i}": "v" for i in range(count)})

            return apply

        yield path, variant(pairs(most)), True
        yield path, variant(pairs(most + 1)), False
        yield (
            f"{path}[a b]",
            variant(lambda t: getattr(t, field.name).update({"a b": "v"})),
            False,
        )
        value_max = rule.map.values.string.max_len
        yield path, variant(lambda t: getattr(t, field.name).update({"k": "v" * value_max})), True
        yield (
            f"{path}[k]",
            variant(lambda t: getattr(t, field.name).update({"k": "v" * (value_max + 1)})),
            False,
        )
    elif kind == "duration":
        high = rule.duration.lte.seconds
        yield path, variant(lambda t: getattr(t, field.name).FromSeconds(high)), True
        yield path, variant(lambda t: getattr(t, field.name).FromSeconds(high + 1)), False
    for cel in rule.cel:
        if cel.id.endswith("not_blank"):
            yield path, variant(lambda t: setattr(t, field.name, "  ")), False
        elif cel.id == "idle_timeout.range":
            yield path, variant(lambda t: getattr(t, field.name).FromSeconds(2_592_000)), True
            yield path, variant(lambda t: getattr(t, field.name).FromSeconds(2_592_001)), False
            yield path, variant(lambda t: getattr(t, field.name).FromMilliseconds(500)), False


def _repeated_cases(
    path: str, field: FieldDescriptor, rule: rules.RepeatedRules, message: Message, variant: Any
) -> Iterator[tuple[str, Message, bool]]:
    items = list(getattr(message, field.name))
    sample: Any = items[0] if items else None
    if sample is None:
        sample = _SAMPLES.get(field.full_name)
    if sample is None:
        return

    def filled(count: int) -> Any:
        def apply(t: Message) -> None:
            container = getattr(t, field.name)
            del container[:]
            for index in range(count):
                if field.message_type is not None:
                    item = container.add()
                    item.CopyFrom(sample)
                    if field.message_type.name == "Message":
                        item.id = f"g{index}"
                    elif field.message_type.name == "SectionOp":
                        item.section = SECTIONS[index % len(SECTIONS)]
                else:
                    container.append(_unique(sample, index, field))

            return None

        return apply

    if rule.HasField("max_items"):
        yield path, variant(filled(rule.max_items)), True
        yield path, variant(filled(rule.max_items + 1)), False
    if rule.HasField("min_items") and rule.min_items > 0:
        yield path, variant(filled(rule.min_items - 1)), False
    after = f"{path}[{len(items)}]"  # the item appended after the base's own
    items = rule.items.string if rule.items.WhichOneof("type") == "string" else None
    if items is not None and (items.HasField("pattern") or predefined_pattern(items)):
        yield after, variant(lambda t: getattr(t, field.name).append(sample + " ")), False
    if rule.items.WhichOneof("type") == "string" and getattr(rule.items.string, "in"):
        yield after, variant(lambda t: getattr(t, field.name).append(sample + "x")), False
    if rule.items.WhichOneof("type") == "enum" and rule.items.enum.defined_only:
        yield after, variant(lambda t: getattr(t, field.name).append(99)), False


def _unique(sample: Any, index: int, field: FieldDescriptor) -> Any:
    if isinstance(sample, str) and field.name in ("archives",):
        return f"{S}/archives/archive_{index + 1:03d}"
    if isinstance(sample, str) and field.name == "supersedes":
        return f"memories/mem_{index:020x}"
    return sample


_SAMPLES: dict[str, Any] = {
    "wm.v1.PreviewMemoryExtractionRequest.archives": f"{S}/archives/archive_001",
    "wm.v1.Memory.supersedes": MEM,
}


def _walk(message: Message, prefix: str) -> Message:
    target = message
    for step in filter(None, prefix.rstrip(".").split(".")):
        name, _, index = step.partition("[")
        target = getattr(target, name)
        if index:
            target = target[int(index.rstrip("]"))]
    return target


def _ignored(field: FieldDescriptor) -> bool:
    options = field.GetOptions()
    return bool(
        options.HasExtension(rules.field)
        and options.Extensions[rules.field].ignore == rules.IGNORE_ALWAYS
    )


def _fields(message: Message, prefix: str = "") -> Iterator[tuple[Message, FieldDescriptor, str]]:
    """Every field of ``message`` and of the messages it holds, with its path prefix (not
    inside a field whose rules are ignored)."""
    for field in message.DESCRIPTOR.fields:
        if _ignored(field):
            continue
        yield message, field, prefix
        if field.message_type is None or field.message_type.full_name.startswith("google."):
            continue
        if field.is_repeated:
            if field.message_type.GetOptions().map_entry:
                continue
            for index, item in enumerate(getattr(message, field.name)):
                yield from _fields(item, f"{prefix}{field.name}[{index}].")
        elif message.HasField(field.name):
            yield from _fields(getattr(message, field.name), f"{prefix}{field.name}.")


def generated() -> list[Case]:
    cases: list[Case] = []
    bases = [(m, b) for m, b in BASES.items()] + list(EXTRA_BASES.items())
    for method, data in bases:
        base = _request(method, data)
        for message, field, prefix in _fields(base):
            for path, request, ok in _cases_for(method, base, message, field, prefix):
                if not (ok and field.name in ONLY_REFUSED):
                    cases.append(Case(method, path, request, ok))
    return cases


# The message-level rules (CEL across fields), written out.
CEL_CASES = [
    Case(
        "CreateCommit",
        "",
        _request("CreateCommit", {"parent": S, "keepRecentCount": 1, "keepRecentTurns": 1}),
        False,
    ),
    Case(
        "SearchArchives",
        "",
        _request("SearchArchives", {"parent": S, "query": "x", "userId": "u1"}),
        False,
    ),
    Case(
        "SearchArchives",
        "",
        _request(
            "SearchArchives",
            {"parent": "sessions/-", "query": "x", "userId": "u1", "agentId": "a1"},
        ),
        False,
    ),
    Case(
        "SearchArchives",
        "",
        _request("SearchArchives", {"parent": "sessions/-", "query": "x", "userId": "u1"}),
        True,
    ),
    Case(
        "SearchArchives",
        "",
        _request(
            "SearchArchives",
            {"parent": S, "query": "x", "archive": "sessions/other/archives/archive_001"},
        ),
        False,
    ),
    Case(
        "SearchToolOutputs",
        "",
        _request(
            "SearchToolOutputs",
            {"parent": S, "query": "x", "toolOutput": "sessions/other/toolOutputs/out.m1.0"},
        ),
        False,
    ),
    Case(
        "PreviewMemoryExtraction",
        "",
        _request(
            "PreviewMemoryExtraction",
            {"name": S, "archives": [f"{S}/archives/archive_001"], "messages": [TEXT_MESSAGE]},
        ),
        False,
    ),
]
CASES = generated()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stub(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    settings = Settings(  # type: ignore[call-arg]
        address="127.0.0.1:0",
        data_dir=Path(tmp_path_factory.mktemp("rules")),
        llm_provider="offline",
        shutdown_grace_seconds=1.0,
    )
    app: Application = await start_application(settings, provider=ProgrammableProvider())
    async with grpc.aio.insecure_channel(app.address) as channel:
        client = service_grpc.WorkingMemoryServiceStub(channel)
        await client.CreateSession(api.CreateSessionRequest(session_id="fz"))
        yield client
    await app.stop(grace=0.5)


async def _call(stub: Any, case: Case) -> grpc.aio.AioRpcError | None:
    method = getattr(stub, case.method)
    try:
        if case.method == "WatchCommit":
            async for _ in method(case.request, timeout=5):
                break
        else:
            await method(case.request, timeout=30)
    except grpc.aio.AioRpcError as error:
        return error
    return None


def _violations(error: grpc.aio.AioRpcError) -> list[str]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    found: list[str] = []
    for detail in status.details if status else []:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            found += [v.field for v in bad.field_violations]
    return found


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("case", CASES + CEL_CASES, ids=str)
async def test_a_rule_holds_at_its_boundary(stub: Any, case: Case) -> None:
    error = await _call(stub, case)
    if case.accepted:
        # Anything but a violation of this field: NOT_FOUND, or another rule of the server's
        # (a provider it does not have) naming another field, is the edge letting it through.
        refused = (
            error is not None
            and error.code() == grpc.StatusCode.INVALID_ARGUMENT
            and (not case.path or case.path in _violations(error) or not _violations(error))
        )
        assert not refused, f"{case}: refused at the boundary: {error and error.details()}"
        return
    assert error is not None, f"{case}: accepted past the boundary"
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    if case.path:
        assert case.path in _violations(error), (case.path, _violations(error))


def test_every_rule_has_cases() -> None:
    """No annotated field of a request escapes the generator (or it says why)."""
    covered = {(c.method, re.sub(r"\[[^\]]*\]", "", c.path).rsplit(".", 1)[-1]) for c in CASES}
    missing = []
    for method, data in BASES.items():
        for message, field, _prefix in _fields(_request(method, data)):
            options = field.GetOptions()
            if not options.HasExtension(rules.field):
                continue
            if f"{message.DESCRIPTOR.name}.{field.name}" in NOT_GENERATED:
                continue
            if (method, field.name) not in covered:
                missing.append(f"{method}: {message.DESCRIPTOR.name}.{field.name}")
    assert not missing, missing
