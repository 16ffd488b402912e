"""Sessions that manage themselves: SessionConfig and server-side auto-commit, end to end.

Real server processes: one on a SQLite file, two replicas on one PostgreSQL database (each
test's calls alternate between them), the offline model so Phase 2 completes. What must hold:
a crossed threshold makes exactly one commit with its trigger, in the AddMessages that
crossed it, on whichever replica; the minimum interval holds under a burst; an idle session
is committed whole once, however many replicas sweep; UpdateSession writes only the fields
its mask names; a bad config is refused with field violations and changes nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2, field_mask_pb2

from support import builders as b
from support import commit_flow
from support import wm_names as names
from support.errors import details
from support.postgres import PostgresServer, postgres_server  # noqa: F401 (fixture)
from support.server_process import ServerProcess
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import start_application
from wm_server.config import ConfigurationError, Settings

Stub = service_grpc.WorkingMemoryServiceStub
DEFAULT_KEEP = 3  # the servers' WM_DEFAULT_SESSION_CONFIG keeps this many

BACKENDS = [
    pytest.param("sqlite", id="sqlite-1-server"),
    pytest.param("postgres", id="postgres-2-replicas", marks=pytest.mark.postgres),
]


@dataclass
class Cluster:
    backend: str
    servers: list[ServerProcess]


@pytest.fixture(scope="module", params=BACKENDS)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    backend: str = request.param
    base = tmp_path_factory.mktemp(f"auto-commit-{backend}")
    env = {
        "WM_LLM_PROVIDER": "offline",
        "WM_AUTO_COMMIT_SWEEP_SECONDS": "0.2",
        "WM_DEFAULT_SESSION_CONFIG": json.dumps({"autoCommit": {"keepRecentCount": DEFAULT_KEEP}}),
        "WM_HEARTBEAT_SECONDS": "1",
        "WM_LOG_LEVEL": "warning",
    }
    pg: PostgresServer | None = None
    url = ""
    if backend == "postgres":
        pg = request.getfixturevalue("postgres_server")
        url = pg.create_database("wm_auto_commit")
        env["WM_DATABASE_URL"] = url
    servers = [ServerProcess(base / f"replica-{n}", **env) for n in range(2 if pg else 1)]
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda server: server.start(60), servers))
        yield Cluster(backend, servers)
    finally:
        for server in servers:
            server.kill()
        if pg is not None:
            pg.drop_database(url)


@pytest.fixture
async def stubs(cluster: Cluster) -> AsyncIterator[list[Stub]]:
    channels = [grpc.aio.insecure_channel(server.address) for server in cluster.servers]
    yield [Stub(channel) for channel in channels]
    for channel in channels:
        await channel.close()


def _seconds(value: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(int(value * 1e9))
    return duration


def _policy(**fields: object) -> pb.SessionConfig:
    return pb.SessionConfig(auto_commit=pb.AutoCommitPolicy(**fields))  # type: ignore[arg-type]


async def _create(stub: Stub, config: pb.SessionConfig | None = None) -> str:
    name = f"s-{uuid.uuid4().hex[:10]}"
    await stub.CreateSession(
        api.CreateSessionRequest(session_id=name, session=pb.Session(config=config))
    )
    return name


async def _commits(stub: Stub, session: str) -> list[pb.Commit]:
    listed = await stub.ListCommits(
        api.ListCommitsRequest(parent=names.session(session), page_size=100)
    )
    return list(listed.commits)


async def _add(stub: Stub, session: str, *messages: pb.Message) -> api.AddMessagesResponse:
    return await stub.AddMessages(
        api.AddMessagesRequest(parent=names.session(session), messages=messages)
    )


async def test_a_crossed_token_threshold_commits_once_in_that_write(stubs: list[Stub]) -> None:
    session = await _create(stubs[0], _policy(pending_token_threshold=300, keep_recent_count=2))
    answers = []
    for n, stub in zip(range(8), itertools.cycle(stubs), strict=False):
        answers.append(await _add(stub, session, b.sized(100, f"m{n}")))
    started = [a.auto_commit for a in answers if a.auto_commit]
    commits = await _commits(stubs[0], session)
    assert [c.name for c in commits] == started[::-1] and len(started) >= 1
    assert {c.trigger for c in commits} == {pb.COMMIT_TRIGGER_PENDING_TOKENS}
    first = min(commits, key=lambda c: c.create_time.ToNanoseconds())
    assert first.keep_recent_count == 2 and first.archived_message_count >= 3
    # The first crossing: pending tokens (outside the keep window of 2) reached 300.
    index = next(i for i, a in enumerate(answers) if a.auto_commit)
    assert answers[index - 1].pending_tokens < 300 <= (index + 1 - 2) * 100
    events = [
        e async for e in stubs[-1].WatchCommit(
            api.WatchCommitRequest(name=started[0])
        )
    ]  # fmt: skip
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED  # an ordinary, watchable commit


async def test_message_count_threshold_and_client_commits_say_their_trigger(
    stubs: list[Stub],
) -> None:
    session = await _create(stubs[0], _policy(message_count_threshold=5, keep_recent_count=1))
    started = [
        (await _add(stubs[n % len(stubs)], session, b.user(f"m{n}", f"m{n}"))).auto_commit
        for n in range(13)
    ]
    # 5 live → commit keeps 1; 4 more → 5 again → commit; and once more at the 13th.
    assert [n for n, c in enumerate(started) if c] == [4, 8, 12]
    _, events = await commit_flow.commit(stubs[0], session)
    triggers = [c.trigger for c in await _commits(stubs[0], session)]
    assert events[0].stage == pb.COMMIT_STAGE_ARCHIVED or events[0].stage == pb.COMMIT_STAGE_SKIPPED
    assert triggers == [pb.COMMIT_TRIGGER_CLIENT] + [pb.COMMIT_TRIGGER_MESSAGE_COUNT] * 3


async def test_the_minimum_interval_holds_under_a_burst(stubs: list[Stub]) -> None:
    policy = _policy(
        message_count_threshold=2, keep_recent_count=0, min_commit_interval=_seconds(3600)
    )
    session = await _create(stubs[0], policy)
    answers = await asyncio.gather(
        *(_add(stubs[n % len(stubs)], session, b.user(f"burst {n}")) for n in range(24))
    )
    assert sum(1 for a in answers if a.auto_commit) == 1
    assert len(await _commits(stubs[0], session)) == 1


async def test_concurrent_writes_on_every_replica_make_one_commit_per_crossing(
    stubs: list[Stub],
) -> None:
    session = await _create(stubs[0], _policy(message_count_threshold=10, keep_recent_count=0))

    async def writer(n: int) -> list[str]:
        stub = stubs[n % len(stubs)]
        return [
            (await _add(stub, session, b.user(f"w{n}-{k}", f"w{n}-{k}"))).auto_commit
            for k in range(6)
        ]

    started = [c for ids in await asyncio.gather(*(writer(n) for n in range(8))) for c in ids if c]
    commits = await _commits(stubs[0], session)
    assert sorted(started) == sorted(c.name for c in commits)  # one answer per commit
    assert all(c.archived_message_count == 10 for c in commits)  # each exactly at its crossing
    live = (
        await stubs[-1].GetSession(api.GetSessionRequest(name=names.session(session)))
    ).message_count
    assert len(commits) == 48 // 10 and live == 48 - 10 * len(commits)


async def test_an_idle_session_is_committed_whole_once(stubs: list[Stub]) -> None:
    session = await _create(stubs[0], _policy(idle_timeout=_seconds(1), keep_recent_count=4))
    for n in range(5):
        await _add(stubs[n % len(stubs)], session, b.user(f"tail {n}"))
    assert not await _commits(stubs[0], session)  # no threshold: nothing until idle
    for _ in range(60):
        await asyncio.sleep(0.1)
        if await _commits(stubs[0], session):
            break
    await asyncio.sleep(1.5)  # every replica swept again meanwhile
    commits = await _commits(stubs[-1], session)
    assert len(commits) == 1
    assert commits[0].trigger == pb.COMMIT_TRIGGER_IDLE and commits[0].archived_message_count == 5
    assert (
        await stubs[0].GetSession(api.GetSessionRequest(name=names.session(session)))
    ).message_count == 0


async def test_an_idle_timeout_turned_on_later_commits_the_session(stubs: list[Stub]) -> None:
    # Without an idle timeout the session's last-add time is not kept up on every
    # AddMessages; turning one on must still make the session committed once it is idle.
    session = await _create(stubs[0])
    for n in range(3):
        await _add(stubs[n % len(stubs)], session, b.user(f"before {n}"))
    await asyncio.sleep(0.5)  # a few sweeps: nothing is due without a timeout
    assert not await _commits(stubs[0], session)
    await stubs[-1].UpdateSession(
        api.UpdateSessionRequest(
            session=pb.Session(
                name=names.session(session), config=_policy(idle_timeout=_seconds(1))
            ),
            update_mask=field_mask_pb2.FieldMask(paths=["config.auto_commit.idle_timeout"]),
        )
    )
    for _ in range(60):
        await asyncio.sleep(0.1)
        if await _commits(stubs[0], session):
            break
    commits = await _commits(stubs[-1], session)
    assert len(commits) == 1 and commits[0].trigger == pb.COMMIT_TRIGGER_IDLE
    assert commits[0].archived_message_count == 3


async def test_config_is_resolved_over_the_default_and_read_back(stubs: list[Stub]) -> None:
    plain = await stubs[0].GetSession(
        api.GetSessionRequest(name=names.session(await _create(stubs[0])))
    )
    assert plain.config == _policy(keep_recent_count=DEFAULT_KEEP)  # the server's default
    given = pb.SessionConfig(
        auto_commit=pb.AutoCommitPolicy(pending_token_threshold=1000, idle_timeout=_seconds(600)),
        memory_extraction=False,
        tool_output_inline_chars=50_000,
        model=pb.ModelChoice(provider="offline"),
    )
    session = await _create(stubs[0], given)
    read = (await stubs[-1].GetSession(api.GetSessionRequest(name=names.session(session)))).config
    expected = pb.SessionConfig()
    expected.CopyFrom(given)
    expected.auto_commit.keep_recent_count = DEFAULT_KEEP
    assert read == expected


async def test_update_session_writes_only_the_masked_fields(stubs: list[Stub]) -> None:
    config = _policy(pending_token_threshold=1000, message_count_threshold=50,
                     idle_timeout=_seconds(600), keep_recent_count=7)  # fmt: skip
    session = await _create(stubs[0], config)

    async def update(paths: list[str], change: pb.SessionConfig) -> pb.SessionConfig:
        answer = await stubs[-1].UpdateSession(
            api.UpdateSessionRequest(
                session=pb.Session(name=names.session(session), config=change),
                update_mask=field_mask_pb2.FieldMask(paths=paths),
            )
        )
        stored = await stubs[0].GetSession(api.GetSessionRequest(name=names.session(session)))
        assert stored.config == answer.config
        return answer.config

    after = await update(
        ["config.auto_commit.message_count_threshold"],
        _policy(message_count_threshold=7, pending_token_threshold=1),  # the second is unnamed
    )
    assert (after.auto_commit.message_count_threshold, after.auto_commit.pending_token_threshold,
            after.auto_commit.idle_timeout.seconds) == (7, 1000, 600)  # fmt: skip
    after = await update(["config.auto_commit.keep_recent_count"], pb.SessionConfig())
    assert after.auto_commit.keep_recent_count == DEFAULT_KEEP  # named and unset: the default
    after = await update(["config.auto_commit.idle_timeout"], _policy(idle_timeout=_seconds(0)))
    assert (
        after.auto_commit.HasField("idle_timeout") and after.auto_commit.idle_timeout.seconds == 0
    )
    after = await update([], pb.SessionConfig(memory_extraction=True))  # no mask: what is set
    assert after.memory_extraction and after.auto_commit.pending_token_threshold == 1000
    after = await update(["config"], _policy(message_count_threshold=3))
    assert after == _policy(message_count_threshold=3, keep_recent_count=DEFAULT_KEEP)


async def test_bad_configs_are_refused_and_change_nothing(stubs: list[Stub]) -> None:
    async def refused(call: object) -> list[str]:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call  # type: ignore[misc]
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        return details(caught.value)[1]

    name = f"s-{uuid.uuid4().hex[:10]}"
    bad = pb.SessionConfig(
        auto_commit=pb.AutoCommitPolicy(
            pending_token_threshold=-1, idle_timeout=_seconds(0.5), keep_recent_count=20_000
        ),
        tool_output_inline_chars=10,
        model=pb.ModelChoice(provider="anthropic"),
    )
    fields = await refused(
        stubs[0].CreateSession(
            api.CreateSessionRequest(session_id=name, session=pb.Session(config=bad))
        )
    )
    # The contract's rules are checked at the edge, all at once, before the server's own
    # (a provider the server is not configured for): that one is refused on its own.
    assert sorted(fields) == [
        "session.config.auto_commit.idle_timeout",
        "session.config.auto_commit.keep_recent_count",
        "session.config.auto_commit.pending_token_threshold",
        "session.config.tool_output_inline_chars",
    ]
    unconfigured = pb.SessionConfig(model=pb.ModelChoice(provider="anthropic"))
    fields = await refused(
        stubs[0].CreateSession(
            api.CreateSessionRequest(session_id=name, session=pb.Session(config=unconfigured))
        )
    )
    assert fields == ["session.config.model"]
    with pytest.raises(grpc.aio.AioRpcError) as absent:
        await stubs[0].GetSession(api.GetSessionRequest(name=names.session(name)))
    assert absent.value.code() == grpc.StatusCode.NOT_FOUND

    session = await _create(stubs[0], _policy(message_count_threshold=50))
    before = (await stubs[0].GetSession(api.GetSessionRequest(name=names.session(session)))).config
    for paths, change, field in [
        (["config.auto_commit.idle_timeout"], _policy(idle_timeout=_seconds(-1)),
         "session.config.auto_commit.idle_timeout"),
        (["name"], pb.SessionConfig(), "update_mask"),
        (["config.auto_commit.nonsense"], pb.SessionConfig(), "update_mask"),
        (["config.model"], pb.SessionConfig(model=pb.ModelChoice(provider="offline", model="x")),
         "session.config.model"),
    ]:  # fmt: skip
        request = api.UpdateSessionRequest(
            session=pb.Session(name=names.session(session), config=change),
            update_mask=field_mask_pb2.FieldMask(paths=paths),
        )
        assert await refused(stubs[-1].UpdateSession(request)) == [field]
    after = (await stubs[0].GetSession(api.GetSessionRequest(name=names.session(session)))).config
    assert after == before


@pytest.mark.parametrize(
    ("default", "complaint"),
    [
        ('{"autoCommit": {"pendingTokenThreshold": -5}}', "pending_token_threshold"),
        ('{"model": {"provider": "anthropic"}}', "anthropic"),
        ("{not json", "WM_DEFAULT_SESSION_CONFIG"),
        ('{"autoCommit": {"idleTimeoutt": "5s"}}', "idleTimeoutt"),
    ],
)
async def test_a_bad_default_config_stops_the_start(
    tmp_path: Path, default: str, complaint: str
) -> None:
    settings = Settings(
        address="127.0.0.1:0", data_dir=tmp_path, llm_provider="offline",
        default_session_config=default,
    )  # type: ignore[call-arg]  # fmt: skip
    with pytest.raises(ConfigurationError, match="WM_DEFAULT_SESSION_CONFIG") as caught:
        await start_application(settings)
    assert complaint in str(caught.value)


async def test_a_turn_policy_keeps_the_newest_turn_whole(stubs: list[Stub]) -> None:
    session = await _create(stubs[0], _policy(message_count_threshold=6, keep_recent_turns=1))
    turn = [
        b.user("Why does the build fail?", "u1"), b.assistant("Reading the log.", "a1"),
        b.user("And the tests?", "u2"), b.assistant("Two fail.", "a2"),
        b.user("Fix the first one.", "u3"), b.tool_call("t1", "edit", {"file": "x.py"}, "a3"),
    ]  # fmt: skip
    answers = [await _add(stubs[n % len(stubs)], session, m) for n, m in enumerate(turn)]
    assert [bool(a.auto_commit) for a in answers] == [False] * 5 + [True]
    commit = await stubs[0].GetCommit(api.GetCommitRequest(name=answers[-1].auto_commit))
    assert commit.archived_message_count == 4 and commit.kept_message_count == 2  # u3 and a3
    assert commit.trigger == pb.COMMIT_TRIGGER_MESSAGE_COUNT
    more = await _add(stubs[0], session, b.tool_result("t1", "done", message_id="r1"))
    assert not more.auto_commit  # 3 live, all in the newest turn: nothing to archive


async def test_a_session_sets_its_own_tool_output_threshold(stubs: list[Stub]) -> None:
    output = "line of a long log\n" * 300  # 5,700 characters: inline by the server's default
    low = await _create(stubs[0], pb.SessionConfig(tool_output_inline_chars=2_000))
    plain = await _create(stubs[0])
    for session in (low, plain):
        await _add(stubs[0], session, b.tool_call("t1", "bash", {}, "c1"))
        await _add(stubs[-1], session, b.tool_result("t1", output, message_id="r1"))
    read = await stubs[0].GetToolOutput(
        api.GetToolOutputRequest(name=names.tool_output(low, "out.r1.0"))
    )
    assert read.content == output
    with pytest.raises(grpc.aio.AioRpcError) as inline:
        await stubs[0].GetToolOutput(
            api.GetToolOutputRequest(name=names.tool_output(plain, "out.r1.0"))
        )
    assert inline.value.code() == grpc.StatusCode.NOT_FOUND
