"""How long the inspector's pages take for a large session: 2,000 messages, 50 commits.

Usage (from the repository root)::

    .venv/bin/python bench/inspector_bench.py [--messages 2000] [--commits 50] [--rounds 15]

Starts a real server (SQLite, offline provider, the inspector on), fills one session of a
user with ``--messages`` messages committed in ``--commits`` commits (each Phase 2 waited
for), plus 200 memories of its user, then fetches every page ``--rounds`` times over HTTP
and prints the median and p95 wall time of each, against the target of 200 ms. Figures,
never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.server_process import ServerProcess, free_port  # noqa: E402
from wm_proto.v1 import resources_pb2 as pb  # noqa: E402
from wm_proto.v1 import working_memory_service_pb2 as api  # noqa: E402
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc  # noqa: E402

TARGET_MS = 200.0
SESSION = "bench-inspector"


def message(i: int) -> pb.Message:
    role = pb.ROLE_USER if i % 2 == 0 else pb.ROLE_ASSISTANT
    text = f"step {i}: edit src/module_{i % 40}.py and run the tests; result {i * 7 % 101} ok"
    return pb.Message(id=f"m{i}", role=role, parts=[pb.Part(text=text)])


async def fill(address: str, messages: int, commits: int) -> str:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        await stub.CreateSession(
            api.CreateSessionRequest(session_id=SESSION, session=pb.Session(user_id="u-bench"))
        )
        per_commit = messages // commits
        last = ""
        for c in range(commits):
            batch = [message(i) for i in range(c * per_commit, (c + 1) * per_commit)]
            await stub.AddMessages(
                api.AddMessagesRequest(
                    parent="sessions/" + SESSION, messages=batch, request_id=f"b{c}"
                )
            )
            started = await stub.CreateCommit(
                api.CreateCommitRequest(
                    parent="sessions/" + SESSION, keep_recent_count=0, request_id=f"c{c}"
                )
            )
            async for event in stub.WatchCommit(api.WatchCommitRequest(name=started.name)):
                if event.terminal:
                    break
            last = started.name.rsplit("/", 1)[1]
        for m in range(200):
            await stub.CreateMemory(
                api.CreateMemoryRequest(
                    owner="users/u-bench",
                    memory=pb.Memory(type=pb.MEMORY_TYPE_ENTITY, text=f"fact number {m} holds"),
                    request_id=f"mem{m}",
                )
            )
        return last


async def measure(base: str, paths: list[str], rounds: int) -> list[tuple[str, float, float]]:
    rows = []
    async with aiohttp.ClientSession() as http:
        for path in paths:
            times = []
            for _ in range(rounds + 1):
                start = time.perf_counter()
                async with http.get(base + path) as answer:
                    await answer.read()
                    assert answer.status == 200, (path, answer.status)
                times.append((time.perf_counter() - start) * 1000)
            times = times[1:]  # the first fetch warms the server's caches
            times.sort()
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            rows.append((path, statistics.median(times), p95))
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        port = free_port()
        server = ServerProcess(
            Path(folder),
            WM_LOG_LEVEL="warning",
            WM_TENANT_MUTATION_BURST="1000000",
            WM_INSPECTOR_ADDRESS=f"127.0.0.1:{port}",
        ).start(timeout=60)
        try:
            started = time.perf_counter()
            commit = await fill(server.address, args.messages, args.commits)
            filled = time.perf_counter() - started
            base = f"http://127.0.0.1:{port}"
            paths = [
                "/",
                "/overview",
                f"/sessions/{SESSION}",
                f"/sessions/{SESSION}/memory?version={args.commits}&against={args.commits - 1}",
                f"/sessions/{SESSION}/commits/{commit}",
                "/memories?user=u-bench",
                f"/recall?q=module_7+tests&session={SESSION}",
            ]
            rows = await measure(base, paths, args.rounds)
        finally:
            server.terminate()
    print(
        f"# inspector pages: {args.messages:,} messages in {args.commits} commits, 200 memories"
        f" (filled in {filled:.1f} s); {args.rounds} fetches each"
    )
    print(f"| page | p50 ms | p95 ms | target p50 ≤ {TARGET_MS:.0f} ms |")
    print("|---|---|---|---|")
    for path, p50, p95 in rows:
        verdict = "met" if p50 <= TARGET_MS else "NOT met"
        print(f"| `{path}` | {p50:.1f} | {p95:.1f} | {verdict} |")


if __name__ == "__main__":
    asyncio.run(main())
