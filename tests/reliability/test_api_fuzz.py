"""Fuzz every request message of wm.v1 against a real server process.

Strategies are derived from the generated message descriptors, so a field added to the
contract is fuzzed without touching this file. Every field gets random values and the
values that sit on a documented limit (ids of 128 and 129 characters, keep_recent_count
10000 and 10001, budgets, page sizes), extreme integers, enum numbers the contract does not
define (proto3 enums are open), repeated fields past their limits, and now and then a string
of several megabytes. Names of real sessions, commits and archives are mixed in so that the
fuzzer reaches past "not found" into the real code paths.

The promise checked for every call: the answer is OK or a documented error code with the
documented details (ErrorInfo in domain wm always, BadRequest field violations for
INVALID_ARGUMENT), never INTERNAL, UNKNOWN or a hang; afterwards the process still runs,
health says SERVING, and a normal session works end to end.
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.api import field_behavior_pb2
from google.protobuf import message as protobuf_message
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from reliability_support import BIG_CLIENT

from support import builders as b
from support import commit_flow
from support.server_process import ServerProcess
from wm_core import SECTIONS
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

SERVICE = api.DESCRIPTOR.services_by_name["WorkingMemoryService"]
METHODS = {method.name: method for method in SERVICE.methods}
# The server's receive limit: max(4 MiB, 4 × WM_MAX_MESSAGE_BYTES of 1 MiB).
TRANSPORT_LIMIT = 4 * 1024 * 1024
DOCUMENTED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,  # WatchCommit after the end of an ended commit's log
}
# Authentication is off and the server is not shutting down, so UNAUTHENTICATED and
# UNAVAILABLE, although documented, would be wrong here.
MAIN = "fz-main"
MAIN_NAME = f"sessions/{MAIN}"
# Examples per RPC: the rich requests get more. Derandomized, so a run is reproducible.
EXAMPLES = {"AddMessages": 150, "ApplyWorkingMemoryOps": 80, "AssembleContext": 60}


def fuzz_settings(rpc: str) -> settings:
    """Moderate, reproducible runs; no deadline (a megabyte request may take a while)."""
    return settings(
        max_examples=EXAMPLES.get(rpc, 40),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# --- the server and its data ------------------------------------------------------------------


@dataclass
class Target:
    """The running server and the real ids the fuzzer mixes into its values."""

    server: ServerProcess
    channel: grpc.Channel
    stub: service_grpc.WorkingMemoryServiceStub
    commits: list[str]  # names
    page_tokens: list[str]


def _seed(stub: service_grpc.WorkingMemoryServiceStub) -> tuple[list[str], list[str]]:
    """A session with two archives, a working memory and commits, plus a few more sessions."""
    commits: list[str] = []
    for batch in range(2):
        stub.AddMessages(
            api.AddMessagesRequest(
                parent=MAIN_NAME,
                create_session_if_missing=True,
                messages=[
                    b.user(f"Hello fuzz world, round {batch}: fix src/app.py"),
                    b.tool_call(f"t{batch}", "read_file", {"path": "src/app.py"}),
                    b.tool_result(f"t{batch}", "Traceback: ValueError", is_error=True),
                    b.assistant("Which test fails? Let me look."),
                ],
            )
        )
        started, events = commit_flow.commit_sync(stub, MAIN)
        assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
        commits.append(started.name)
    for name in ("fz-other", "fz-victim-1", "fz-victim-2"):
        stub.CreateSession(api.CreateSessionRequest(session_id=name))
    tokens = [
        stub.ListSessions(api.ListSessionsRequest(page_size=1)).next_page_token,
        stub.ListCommits(api.ListCommitsRequest(parent=MAIN_NAME, page_size=1)).next_page_token,
        stub.ListArchives(api.ListArchivesRequest(parent=MAIN_NAME, page_size=1)).next_page_token,
        stub.ListMessages(
            api.ListMessagesRequest(parent=f"{MAIN_NAME}/archives/archive_001", page_size=1)
        ).next_page_token,
    ]
    assert all(tokens)
    return commits, tokens


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    data_dir = tmp_path_factory.mktemp("fuzz")
    server = ServerProcess(data_dir, WM_HEARTBEAT_SECONDS="0.5").start()
    channel = grpc.insecure_channel(server.address, options=BIG_CLIENT)
    try:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        commits, tokens = _seed(stub)
        yield Target(server, channel, stub, commits, tokens)
        channel.close()
        assert server.terminate() == 0  # and after all that, it still shuts down cleanly
    finally:
        channel.close()
        server.kill()


def _assert_serving(target: Target) -> None:
    assert target.server.proc is not None and target.server.proc.poll() is None, "server died"
    health = health_pb2_grpc.HealthStub(target.channel)
    for service in ("", SERVICE.full_name):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


# --- strategies from descriptors ------------------------------------------------------------

# Sizes of the one huge string some examples carry: past the 1 MiB message limit, and past
# the 4 MiB transport limit (in characters; "é" doubles the bytes).
HUGE_SIZES = [1024 * 1024 + 1, 3 * 1024 * 1024, 5 * 1024 * 1024]


def _nested(depth: int) -> str:
    """A valid JSON object ``depth`` objects deep."""
    return '{"a":' * depth + "1" + "}" * depth


# Past the decoder's recursion limit; just under it (valid at the edge, but not when decoded
# again deeper in the stack); and at and past the server's limit of 100 levels.
DEEP_JSON = ["[" * 100_000, _nested(50_000), _nested(980), _nested(100), _nested(101)]
EDGE_TEXT = ["", " ", "\x00", "\n", "%", "_", "\\", '"', "'", "𝔘𝔫𝔦", "a" * 128, "a" * 129]
ARCHIVE_IDS = [
    "archive_001",
    "archive_002",
    "archive_003",
    "archive_000",
    "archive_1",
    "archive_",
    "archive_-1",
    "archive_٠٠١",  # digits, but not ASCII ones
    "archive_" + "9" * 19,
    "archive_" + "9" * 40,
    "archive_" + "9" * 5000,
    "ARCHIVE_001",
]


def _pools(target: Target) -> dict[str, list[str]]:
    """Interesting values per field name (``Message.field`` wins over ``field``)."""
    ids = [MAIN, MAIN, MAIN, "fz-other", "missing", "a" * 129, "bad id!", "../x", "é", "-"]
    sessions = [f"sessions/{i}" for i in ids] + [MAIN, "", "sessions/", "sessions/-"]
    archives = [f"{MAIN_NAME}/archives/{a}" for a in ARCHIVE_IDS] + [
        "sessions/fz-other/archives/archive_001",
        "archive_001",
        f"{MAIN_NAME}/archives/",
    ]
    commits = [*target.commits, *target.commits, f"{MAIN_NAME}/commits/c-missing"]
    commits += [f"{MAIN_NAME}/commits/" + "x" * 1000, target.commits[0].rsplit("/", 1)[-1]]
    versions = ["latest", "latest", "1", "2", "0", "-1", "9" * 18, "9" * 19, "x"]
    memories = ["memories/mem_00000000000000000000", "mem_00000000000000000000"]
    memories += ["memories/mem_x", "", "memories/" + "m" * 1000]
    owners = ["users/fz-user", "users/fz-user", "agents/fz-agent", f"sessions/{MAIN}"]
    owners += ["sessions/missing", "users/bad user!", "fz-user", "", "users/-", "groups/g"]
    outputs = [f"{MAIN_NAME}/toolOutputs/out.m1.0", f"{MAIN_NAME}/toolOutputs/out.x"]
    return {
        "session_id": ids,
        "parent": sessions,
        "ListMessagesRequest.parent": sessions + archives,
        "name": sessions,
        "Session.name": sessions,
        "DeleteSessionRequest.name": [f"sessions/fz-victim-{n}" for n in (1, 2)]
        + ["sessions/missing", "sessions/bad id!"],
        "request_id": ["", "rid-1", "rid-2", "x" * 128, "x" * 129],
        "WatchCommitRequest.name": commits,
        "GetCommitRequest.name": commits,
        "RetryCommitRequest.name": commits,
        "GetArchiveRequest.name": archives,
        "archive": archives,
        "archives": archives,
        "GetWorkingMemoryRequest.name": [f"{MAIN_NAME}/workingMemories/{v}" for v in versions]
        + ["sessions/missing/workingMemories/latest", MAIN_NAME],
        "GetToolOutputRequest.name": outputs,
        "tool_output": outputs,
        "GetMemoryRequest.name": memories,
        "DeleteMemoryRequest.name": memories,
        "RetireMemoryRequest.name": memories,
        "Memory.name": memories,
        "supersedes": memories,
        "owner": owners,
        "ToolUse.name": ["read_file", "f", "a" * 256, "a" * 257],
        "page_token": [*target.page_tokens, "garbage", "=", "AAAA", "e30"],
        "query": ["fuzz", "FUZZ WORLD", "src/app.py", "ValueError", "x" * 1001, " "],
        "section": [*SECTIONS, "Bogus", "session title", "## Open Issues"],
        "Message.id": ["m-1", "m-1", "dup:1", "a" * 128, "a" * 129, "bad id"],
        "input_json": ['{"path": "a.py"}', "[]", "null", "not json", "{", *DEEP_JSON],
        "content": ["- item", "## Open Issues\n- split me", "`src/app.py`"],
        "system_prompt": ["You are helpful.", "é" * (512 * 1024 + 1)],
        "user_id": ["", "", "fz-user", "bad user!"],
        "agent_id": ["", "", "fz-agent"],
        # A user of its own: forgetting it must not take the other RPCs' data with it.
        "PurgeUserDataRequest.user_id": ["fz-purged", "", "bad user!", "u" * 129],
        "text": ["Prefers tabs", "", " ", "x" * 2001],
    }


INT_EDGES = {
    "int32": [0, 1, -1, 12, 13, 49, 50, 51, 1000, 1001, 10_000, 10_001, 2**31 - 1, -(2**31)],
    "int64": [0, 1, -1, 19_999, 40_000, 10_000_000, 10_000_001, 2**62, 2**63 - 1, -(2**63)],
}
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# Repeated fields sometimes get exactly their documented limit, or one more.
LIST_LIMITS = {"messages": [1000, 1001], "parts": [256, 257], "ops": [7, 8], "items": [300]}


def _strings(key: str, pools: dict[str, list[str]], small: bool) -> st.SearchStrategy[str]:
    _, _, field_name = key.partition(".")
    pool = pools.get(key) or pools.get(field_name) or EDGE_TEXT
    if small:  # an element copied up to a thousand times stays short
        pool = [value for value in pool if len(value) <= 200] or EDGE_TEXT
    ids = st.text(alphabet=string.ascii_letters + string.digits + "._:-", min_size=1, max_size=12)
    choices = [st.sampled_from(pool), st.sampled_from(pool), st.sampled_from(EDGE_TEXT)]
    choices.append(st.text(max_size=40))
    # A resource name of the pool with another id at its end: well formed, mostly not found
    # (as a random id was, before requests named their resources), so that the fuzzer gets
    # past the names' patterns as often as it got past the ids' checks.
    named = [value for value in pool if "/" in value and len(value) <= 200]
    renamed = st.builds(
        lambda name, i: f"{name.rsplit('/', 1)[0]}/{i}", st.sampled_from(named or ["x"]), ids
    )
    choices += [renamed, renamed, renamed] if named else [ids]
    return st.one_of(*choices)


def _scalar(
    field: FieldDescriptor, key: str, pools: dict[str, list[str]], small: bool
) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return _strings(key, pools, small)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    if kind in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64):
        width = "int32" if kind == FieldDescriptor.TYPE_INT32 else "int64"
        low, high = INT_RANGES[width]
        return st.one_of(st.sampled_from(INT_EDGES[width]), st.integers(low, high))
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        edges = [
            0.0,
            -0.0,
            0.5,
            1.0,
            -1.0,
            1e308,
            -1e308,
            float("nan"),
            float("inf"),
            -float("inf"),
        ]
        return st.one_of(
            st.sampled_from(edges),
            st.floats(width=32 if kind == FieldDescriptor.TYPE_FLOAT else 64),
        )
    raise AssertionError(f"no strategy for {field.full_name} (type {kind}): add one")


def message_strategy(
    descriptor: Descriptor, pools: dict[str, list[str]], *, small: bool = False
) -> st.SearchStrategy[protobuf_message.Message]:
    """Any value of the message: each field unset or fuzzed, at most one member per oneof.

    A repeated field is a short list, or (unless ``small``) its documented limit or one past
    it, filled with copies of one ``small`` element so that limits never multiply.
    """
    cls = message_factory.GetMessageClass(descriptor)
    in_oneof = {f.name for oneof in descriptor.oneofs for f in oneof.fields}

    def element(field: FieldDescriptor, small_element: bool) -> st.SearchStrategy[Any]:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            return st.deferred(
                lambda: message_strategy(field.message_type, pools, small=small_element)
            )
        return _scalar(field, f"{descriptor.name}.{field.name}", pools, small_element)

    def value(field: FieldDescriptor) -> st.SearchStrategy[Any]:
        if not field.is_repeated:
            return element(field, small)
        short = st.lists(element(field, small), max_size=3)
        if small:
            return short
        sizes = st.sampled_from(LIST_LIMITS.get(field.name, [100]))
        full = st.builds(lambda item, n: [item] * n, element(field, True), sizes)
        return st.one_of(short, short, full)

    def maybe(field: FieldDescriptor) -> st.SearchStrategy[Any]:
        """Unset now and then; a field the contract marks REQUIRED is set more often."""
        behaviors = field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
        if field_behavior_pb2.REQUIRED in behaviors:
            return st.one_of(value(field), value(field), value(field), st.none())
        return st.none() | value(field)

    plain = {f.name: maybe(f) for f in descriptor.fields if f.name not in in_oneof}
    oneofs = [
        st.one_of(st.none(), *[st.tuples(st.just(f.name), value(f)) for f in oneof.fields])
        for oneof in descriptor.oneofs
    ]

    def build(values: dict[str, Any], chosen: tuple[tuple[str, Any] | None, ...]) -> Any:
        msg = cls()
        items = [(k, v) for k, v in values.items() if v is not None]
        items += [pair for pair in chosen if pair is not None]
        for name, item in items:
            field = descriptor.fields_by_name[name]
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                target = getattr(msg, name)  # a map: its entries, by key
                for entry in item:
                    target[entry.key] = entry.value
            elif field.is_repeated:
                getattr(msg, name).extend(item)
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                getattr(msg, name).CopyFrom(item)
            else:
                setattr(msg, name, item)
        return msg

    generic = st.builds(build, st.fixed_dictionaries(plain), st.tuples(*oneofs))
    if descriptor.full_name in PLAUSIBLE:
        plausible = PLAUSIBLE[descriptor.full_name]
        return st.one_of(plausible, plausible, generic)
    return generic


_IDS = st.text(alphabet=string.ascii_letters + string.digits + "._:-", min_size=1, max_size=16)
_TEXT = st.text(max_size=200)
_PART = st.one_of(
    st.builds(lambda text: pb.Part(text=text), _TEXT),
    st.builds(
        lambda call_id, name, args: pb.Part(
            tool_use=pb.ToolUse(id=call_id, name=name, input_json=args)
        ),
        _IDS,
        _IDS,
        st.sampled_from(["{}", '{"path": "src/app.py"}', '{"q": [1, {"r": null}]}', ""]),
    ),
    st.builds(
        lambda call_id, content, failed: pb.Part(
            tool_result=pb.ToolResult(tool_use_id=call_id, content=content, is_error=failed)
        ),
        _IDS,
        _TEXT,
        st.booleans(),
    ),
)
# Values that pass validation, so the fuzzer also reaches storage, commits and guards.
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "wm.v1.Message": st.builds(
        lambda message_id, role, parts: pb.Message(id=message_id, role=role, parts=parts),
        st.one_of(st.just(""), _IDS),
        st.sampled_from([pb.ROLE_USER, pb.ROLE_ASSISTANT, pb.ROLE_SYSTEM, pb.ROLE_TOOL]),
        st.lists(_PART, min_size=1, max_size=3),
    ),
    "wm.v1.SectionOp": st.builds(
        lambda section, kind, content, items: pb.SectionOp(
            section=section, kind=kind, content=content, items=items
        ),
        st.sampled_from(SECTIONS),
        st.sampled_from(
            [pb.SECTION_OP_KIND_KEEP, pb.SECTION_OP_KIND_UPDATE, pb.SECTION_OP_KIND_APPEND]
        ),
        _TEXT,
        st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=4),
    ),
}


def _string_slots(msg: protobuf_message.Message) -> list[tuple[Any, Any]]:
    """Every place a string is set in ``msg``: (message, field name) or (list, index)."""
    slots: list[tuple[Any, Any]] = []
    for field, value in msg.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            slots.extend((value, key) for key in value)  # a map's values, by key
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            for child in value if field.is_repeated else [value]:
                slots.extend(_string_slots(child))
        elif field.type == FieldDescriptor.TYPE_STRING:
            if field.is_repeated:
                slots.extend((value, i) for i in range(len(value)))
            else:
                slots.append((msg, field.name))
    return slots


def with_one_huge_string(
    requests: st.SearchStrategy[protobuf_message.Message],
) -> st.SearchStrategy[protobuf_message.Message]:
    """Sometimes make one string of the request megabytes long (never more than one)."""
    huge = st.tuples(
        st.integers(0, 10**6), st.sampled_from(["a", "é"]), st.sampled_from(HUGE_SIZES)
    )

    def inflate(
        request: protobuf_message.Message, choice: tuple[int, str, int] | None
    ) -> protobuf_message.Message:
        slots = _string_slots(request)
        if choice is None or not slots:
            return request
        index, char, size = choice
        holder, where = slots[index % len(slots)]
        if isinstance(holder, protobuf_message.Message):
            setattr(holder, where, char * size)
        else:  # a repeated field by index, or a map by key (a key is a str too)
            holder[where] = char * size
        return request

    return st.builds(inflate, requests, st.one_of(st.none(), st.none(), st.none(), huge))


# --- the checks --------------------------------------------------------------------------------


def _check_error(error: grpc.RpcError, request: protobuf_message.Message) -> None:
    """A documented code with the documented details; only the transport's refusal of an
    oversized request may come without them."""
    code = error.code()  # type: ignore[attr-defined]
    text = f"{code} {error.details()} for a {type(request).__name__}"  # type: ignore[attr-defined]
    assert code in DOCUMENTED, text
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        # Only the transport answers without details: a request over its size limit.
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, text
        assert request.ByteSize() > TRANSPORT_LIMIT, text
        return
    infos, violations = [], []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            infos.append(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend(bad.field_violations)
    assert len(infos) == 1 and infos[0].domain == "wm" and infos[0].reason, text
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        assert violations and all(v.field for v in violations), text


def call(target: Target, rpc: str, request: protobuf_message.Message) -> grpc.StatusCode:
    """One call, checked; returns its code. A stream is read up to its first event, then
    cancelled (a Phase 2 that cannot finish is never waited on)."""
    method: Callable[..., Any] = getattr(target.stub, rpc)
    try:
        if METHODS[rpc].server_streaming:
            stream = method(request, timeout=20)
            try:
                event = next(stream, None)
                assert event is None or event.commit
            finally:
                stream.cancel()
        else:
            method(request, timeout=20)
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()  # type: ignore[attr-defined]
        if code == grpc.StatusCode.CANCELLED and METHODS[rpc].server_streaming:
            return grpc.StatusCode.OK  # our own cancel after the first event
        _check_error(error, request)
        return code
    return grpc.StatusCode.OK


# --- the tests ---------------------------------------------------------------------------------


def _tool_use_message(input_json: str) -> pb.Message:
    return pb.Message(
        role=pb.ROLE_ASSISTANT,
        parts=[pb.Part(tool_use=pb.ToolUse(id="t-deep", name="f", input_json=input_json))],
    )


NO_MEMORY = "memories/mem_00000000000000000000"
# Requests the fuzzer found to break the server, kept as explicit examples after the fix.
REGRESSIONS: dict[str, list[protobuf_message.Message]] = {
    # int() refused the 5000-digit archive number: INTERNAL (now INVALID_ARGUMENT).
    "SearchArchives": [
        api.SearchArchivesRequest(
            parent=MAIN_NAME, query="fuzz", archive=f"{MAIN_NAME}/archives/{ARCHIVE_IDS[10]}"
        )
    ],
    # SQLite refused an archive number past 64 bits: INTERNAL (now INVALID_ARGUMENT).
    "GetArchive": [api.GetArchiveRequest(name=f"{MAIN_NAME}/archives/archive_" + "9" * 19)],
    # 1000 invalid messages gave 100 violations and a 23 KB status: past the client's
    # metadata limit, so the client saw RESOURCE_EXHAUSTED without details.
    # Also: JSON nested past the decoder's recursion limit raised RecursionError (INTERNAL);
    # nested just under it, it was stored and broke AssembleContext and Phase 2 later.
    "AddMessages": [
        api.AddMessagesRequest(parent=MAIN_NAME, messages=[pb.Message()] * 1000),
        *[
            api.AddMessagesRequest(parent=MAIN_NAME, messages=[_tool_use_message(deep)])
            for deep in (DEEP_JSON[0], DEEP_JSON[2])
        ],
    ],
    # A huge unknown commit id was echoed into the NOT_FOUND status: same overflow.
    "GetCommit": [api.GetCommitRequest(name=f"{MAIN_NAME}/commits/" + "é" * 1_000_000)],
    "RetryCommit": [api.RetryCommitRequest(name=f"{MAIN_NAME}/commits/" + "c" * 20_000)],
    # Not regressions: requests that pass validation, so each memory RPC reaches real work
    # however rarely the fuzzer draws exactly one owner and a known type.
    "ListMemories": [api.ListMemoriesRequest(owner="users/fz-user")],
    "SearchMemories": [api.SearchMemoriesRequest(owner="users/fz-user", query="tabs")],
    "CreateMemory": [
        api.CreateMemoryRequest(
            owner="users/fz-user",
            memory=pb.Memory(type=pb.MEMORY_TYPE_PREFERENCE, text="Prefers tabs"),
        )
    ],
    "UpdateMemory": [api.UpdateMemoryRequest(memory=pb.Memory(name=NO_MEMORY, text="x"))],
    "DeleteMemory": [api.DeleteMemoryRequest(name=NO_MEMORY)],
    "RetireMemory": [api.RetireMemoryRequest(name=NO_MEMORY, reason="no longer true")],
    "GetMemory": [api.GetMemoryRequest(name=NO_MEMORY)],
}


@pytest.mark.parametrize("rpc", list(METHODS))
def test_fuzz_request_gets_ok_or_a_documented_error(target: Target, rpc: str) -> None:
    """Fuzz one RPC; afterwards the server must still be SERVING."""
    descriptor = METHODS[rpc].input_type
    requests = with_one_huge_string(message_strategy(descriptor, _pools(target)))

    seen: Counter[str] = Counter()

    @fuzz_settings(rpc)
    @given(request=requests)
    def fuzz(request: protobuf_message.Message) -> None:
        seen[call(target, rpc, request).name] += 1

    for regression in REGRESSIONS.get(rpc, []):
        fuzz = example(request=regression)(fuzz)
    fuzz()
    _assert_serving(target)
    print(rpc, dict(seen))
    # The fuzzer got past request validation too: into lookups, state checks and real work.
    assert set(seen) - {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}, seen


def test_server_still_serves_a_normal_session_after_fuzzing(target: Target) -> None:
    """After every fuzzed call the same process works end to end."""
    _assert_serving(target)
    stub = target.stub
    session = "fz-after"
    stub.AddMessages(
        api.AddMessagesRequest(
            parent=f"sessions/{session}",
            create_session_if_missing=True,
            messages=[b.user("Deploy the fuzz-proof build"), b.assistant("Deploying now")],
        )
    )
    _, events = commit_flow.commit_sync(stub, session)
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED and events[-1].terminal
    wm = stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name=f"sessions/{session}/workingMemories/latest")
    )
    assert wm.version == 1 and len(wm.sections) == len(SECTIONS)
    hits = stub.SearchArchives(
        api.SearchArchivesRequest(parent=f"sessions/{session}", query="fuzz-proof")
    )
    assert hits.total_matches == 1
    context = stub.AssembleContext(
        api.AssembleContextRequest(name=f"sessions/{session}", token_budget=50_000)
    )
    assert context.working_memory_version == 1


def test_tool_input_nesting_is_bounded_at_the_edge(target: Target) -> None:
    """JSON nested 980 levels decodes once at the edge but not again deeper in the stack, so
    it is refused on the way in (the server's limit is 100 levels), and what is accepted
    stays readable by every later step: assembly, Phase 2 and search."""
    stub = target.stub
    session = "fz-deep"
    for depth in (101, 980, 50_000):
        with pytest.raises(grpc.RpcError) as caught:
            stub.AddMessages(
                api.AddMessagesRequest(
                    parent=f"sessions/{session}",
                    create_session_if_missing=True,
                    messages=[_tool_use_message(_nested(depth))],
                )
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        _check_error(caught.value, api.AddMessagesRequest())
    stub.AddMessages(
        api.AddMessagesRequest(
            parent=f"sessions/{session}",
            create_session_if_missing=True,
            messages=[
                b.user("Read the deep config"),
                _tool_use_message(_nested(100)),
                b.tool_result("t-deep", "deep config read"),
            ],
        )
    )
    context = stub.AssembleContext(
        api.AssembleContextRequest(
            name=f"sessions/{session}",
            token_budget=100_000,
            format=api.CONTEXT_FORMAT_ANTHROPIC_MESSAGES,
        )
    )
    assert context.included_message_count == 3 and context.rendered_json
    _, events = commit_flow.commit_sync(stub, session)
    assert events[-1].terminal and events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    hits = stub.SearchArchives(
        api.SearchArchivesRequest(parent=f"sessions/{session}", query="deep config")
    )
    assert hits.total_matches == 2


@pytest.mark.parametrize(
    ("rpc", "bad_request"),
    [
        ("AddMessages", api.AddMessagesRequest(parent=MAIN_NAME, messages=[pb.Message()] * 1000)),
        ("GetCommit", api.GetCommitRequest(name=f"{MAIN_NAME}/commits/" + "é" * 1_000_000)),
        ("RetryCommit", api.RetryCommitRequest(name=f"{MAIN_NAME}/commits/" + "c" * 20_000)),
    ],
    ids=["1000-invalid-messages", "huge-commit-id", "long-commit-id"],
)
def test_error_status_fits_the_default_client_metadata_limit(
    target: Target, rpc: str, bad_request: protobuf_message.Message
) -> None:
    """A status grows with the request (violations, echoed ids); past gRPC's default 8 KiB
    metadata limit a client sees a detail-less RESOURCE_EXHAUSTED instead of the answer."""
    with pytest.raises(grpc.RpcError) as caught:
        getattr(target.stub, rpc)(bad_request, timeout=20)
    error = caught.value
    _check_error(error, bad_request)
    assert error.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)  # type: ignore[attr-defined]
    trailers = error.trailing_metadata()  # type: ignore[attr-defined]
    size = sum(len(key) + len(value) for key, value in trailers)
    assert size < 8 * 1024, size
    if rpc == "AddMessages":
        assert "more field violations not shown" in error.details()  # type: ignore[attr-defined]
