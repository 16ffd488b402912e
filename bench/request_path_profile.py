"""Where a request's time goes: a cProfile of the real server under a sequential load.

Usage: python bench/request_path_profile.py [--calls N] [--top N]

A child process runs the service as ``wm-server`` does (SQLite file, offline provider, the
access log rendered at info level to a file, metrics on), with cProfile switched on in its
event-loop thread only while the parent sends one kind of RPC: the health Check, unary
AddMessages of one message, GetSession. For each kind it prints the wall time per call seen by
the client without the profiler, then the profiled cost per call of each wrapper step: the
interceptor's steps (request id and admission, decoding, binding the log context, finishing),
the access-log line, the metrics, the error-mapping layer, the handler itself; decoding and
encoding (done by gRPC's Cython layer, which cProfile cannot see) are timed directly on the
same messages. cProfile inflates pure-Python code by its own per-call cost, so read the steps
against each other and against the profiled total, not as absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shutil
import signal
import sys
import tempfile
import time
import timeit
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.server_process import free_port  # noqa: E402
from wm_proto.v1 import resources_pb2 as pb  # noqa: E402
from wm_proto.v1 import working_memory_service_pb2 as api  # noqa: E402
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc  # noqa: E402

# (label, path fragment of the file, function name): the steps looked up in each profile. A
# step of a layout that is not there (before or after a refactoring) prints "-".
STEPS: tuple[tuple[str, str, str], ...] = (
    ("interceptor: intercept_service (method lookup)", "api/interceptors.py", "intercept_service"),
    ("interceptor: whole wrapper (all its steps)", "api/interceptors.py", "handle"),
    ("  request id, auth, tenant, admission", "api/interceptors.py", "_admit"),
    ("  request decode + log context", "api/interceptors.py", "_request"),
    ("  finish: code, budget, metrics, log", "api/interceptors.py", "_finish"),
    ("    access-log line (structlog, rendered)", "structlog/_native.py", "meth"),
    ("    access-log line: collected", "wm_server/telemetry/observability.py", "emit"),
    (
        "access-log lines: rendered + written, after",
        "wm_server/telemetry/observability.py",
        "flush",
    ),
    ("    metrics (counter + histogram)", "wm_server/telemetry/metrics.py", "rpc_finished"),
    ("    metrics (counter + histogram)", "wm_server/telemetry/metrics.py", "finished"),
    ("error-mapping layer (@unary)", "api/handlers.py", "wrapper"),
    ("handler: servicer method", "api/servicer.py", "{method}"),
    ("handler: health servicer", "grpc_health/v1/_async.py", "Check"),
)
WORKLOADS = ("Check", "AddMessages", "GetSession")


# --- the child: the server, profiled on demand ---------------------------------------------
def serve(address: str, data_dir: str, out_dir: str) -> None:
    from wm_server.app import start_application
    from wm_server.config import load_settings
    from wm_server.telemetry.observability import configure_logging

    os.environ.update(
        WM_ADDRESS=address,
        WM_DATA_DIR=data_dir,
        WM_LLM_PROVIDER="offline",
        WM_METRICS_ADDRESS="127.0.0.1:0",
        WM_TENANT_MUTATION_BURST="1000000",
    )
    settings = load_settings()
    configure_logging("info")

    async def main() -> None:
        app = await start_application(settings)
        loop = asyncio.get_running_loop()
        profiler: list[cProfile.Profile] = []
        stop = asyncio.Event()

        def begin() -> None:
            # CPU time of the loop's thread: the other processes of a shared machine do not
            # count, and neither does the loop's wait for the network
            profile = cProfile.Profile(time.thread_time)
            profiler.append(profile)
            profile.enable()

        def end() -> None:
            profile = profiler[-1]
            profile.disable()
            profile.dump_stats(os.path.join(out_dir, f"{len(profiler)}.prof"))
            print("dumped", flush=True, file=sys.stdout)

        loop.add_signal_handler(signal.SIGUSR1, begin)
        loop.add_signal_handler(signal.SIGUSR2, end)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        print("ready", flush=True, file=sys.stdout)
        await stop.wait()
        await app.stop(grace=1)

    asyncio.run(main())


# --- the parent: load, profiles, the table -------------------------------------------------
def message(i: int) -> pb.Message:
    return pb.Message(role=pb.ROLE_USER, parts=[pb.Part(text=f"message {i}: " + "lorem " * 30)])


async def timed(fn: Callable[[], Awaitable[object]], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        await fn()
    return (time.perf_counter() - start) / count


def step_costs(path: Path, method: str, calls: int) -> tuple[float, dict[str, float]]:
    """The profiled total per call and, per step label, the cumulative time per call."""
    stats = pstats.Stats(str(path))
    table = stats.stats  # type: ignore[attr-defined]
    # the sum of own times, less the loop's idle wait in epoll
    busy = (
        entry[2]
        for key, entry in table.items()
        if key[2] != "<method 'poll' of 'select.epoll' objects>"
    )
    total = sum(busy) / calls
    costs: dict[str, float] = {}
    for label, fragment, name in STEPS:
        wanted = name.replace("{method}", method)
        for (filename, _line, function), entry in table.items():
            if fragment in filename.replace(os.sep, "/") and function == wanted:
                costs[label] = costs.get(label, 0.0) + entry[3] / calls
    return total, costs


def codec_costs() -> dict[str, tuple[float, float]]:
    """Decode of the request and encode of the response, per call (µs), as gRPC does them."""
    add = api.AddMessagesRequest(
        parent="sessions/" + "unary", messages=[message(1)]
    ).SerializeToString()
    get = api.GetSessionRequest(name="sessions/" + "read").SerializeToString()
    check = health_pb2.HealthCheckRequest().SerializeToString()
    pairs = {
        "Check": (
            lambda: health_pb2.HealthCheckRequest.FromString(check),
            health_pb2.HealthCheckResponse(status=1).SerializeToString,
        ),
        "AddMessages": (
            lambda: api.AddMessagesRequest.FromString(add),
            api.AddMessagesResponse(
                session="sessions/unary",
                message_count=100,
                pending_tokens=4000,
                added_message_ids=["m"],
            ).SerializeToString,
        ),
        "GetSession": (
            lambda: api.GetSessionRequest.FromString(get),
            pb.Session(
                name="sessions/read", message_count=10, pending_tokens=400
            ).SerializeToString,
        ),
    }
    out = {}
    for kind, (decode, encode) in pairs.items():
        n = 20_000
        out[kind] = (
            timeit.timeit(decode, number=n) / n * 1e6,
            timeit.timeit(encode, number=n) / n * 1e6,
        )
    return out


async def drive(calls: int, top: int, save: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        address = f"127.0.0.1:{free_port()}"
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--serve",
            address,
            str(Path(tmp) / "data"),
            tmp,
            stdout=asyncio.subprocess.PIPE,
            stderr=(Path(tmp) / "server.log").open("wb"),
        )
        assert child.stdout is not None
        assert (await child.stdout.readline()).strip() == b"ready"
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = service_grpc.WorkingMemoryServiceStub(channel)
                health = health_pb2_grpc.HealthStub(channel)
                await stub.CreateSession(api.CreateSessionRequest(session_id="unary"))
                await stub.AddMessages(
                    api.AddMessagesRequest(
                        parent="sessions/" + "read",
                        create_session_if_missing=True,
                        messages=[message(i) for i in range(10)],
                    )
                )
                counter = iter(range(10**9))
                check = health_pb2.HealthCheckRequest()
                get = api.GetSessionRequest(name="sessions/" + "read")
                kinds: dict[str, Callable[[], Awaitable[object]]] = {
                    "Check": lambda: health.Check(check),
                    "AddMessages": lambda: stub.AddMessages(
                        api.AddMessagesRequest(
                            parent="sessions/" + "unary", messages=[message(next(counter))]
                        )
                    ),
                    "GetSession": lambda: stub.GetSession(get),
                }
                wall: dict[str, float] = {}
                for number, kind in enumerate(WORKLOADS, start=1):
                    call = kinds[kind]
                    await timed(call, 300)
                    wall[kind] = await timed(call, calls)
                    child.send_signal(signal.SIGUSR1)
                    await asyncio.sleep(0.2)
                    await timed(call, calls)
                    child.send_signal(signal.SIGUSR2)
                    assert (await child.stdout.readline()).strip() == b"dumped"
                    assert (Path(tmp) / f"{number}.prof").exists()
        finally:
            child.send_signal(signal.SIGTERM)
            await child.wait()
        report(Path(tmp), calls, wall, top)
        if save is not None:
            keep(Path(tmp), save)


def keep(folder: Path, save: Path) -> None:
    save.mkdir(parents=True, exist_ok=True)
    for number, kind in enumerate(WORKLOADS, start=1):
        shutil.copy(folder / f"{number}.prof", save / f"{kind}.prof")


def report(folder: Path, calls: int, wall: dict[str, float], top: int) -> None:
    codecs = codec_costs()
    print(f"Request path profile: {calls} sequential calls per kind, cProfile in the server")
    header = f"  {'step (µs per call)':<48}" + "".join(f"{k:>14}" for k in WORKLOADS)
    print(header)
    profiles = {
        kind: step_costs(folder / f"{n}.prof", kind, calls)
        for n, kind in enumerate(WORKLOADS, start=1)
    }

    def line(label: str, values: list[str]) -> None:
        print(f"  {label:<48}" + "".join(f"{v:>14}" for v in values))

    line("client wall time per call, no profiler", [f"{wall[k] * 1e6:,.0f}" for k in WORKLOADS])
    line(
        "server loop thread CPU, profiled",
        [f"{profiles[k][0] * 1e6:,.1f}" for k in WORKLOADS],
    )
    line("decode request (timed directly)", [f"{codecs[k][0]:.1f}" for k in WORKLOADS])
    labels = list(dict.fromkeys(label for label, _, _ in STEPS))
    for label in labels:
        line(
            label,
            [
                f"{profiles[k][1][label] * 1e6:,.1f}" if label in profiles[k][1] else "-"
                for k in WORKLOADS
            ],
        )
    line("encode response (timed directly)", [f"{codecs[k][1]:.1f}" for k in WORKLOADS])
    if top:
        for n, kind in enumerate(WORKLOADS, start=1):
            print(f"\n--- {kind}: top {top} functions by own time ---")
            stats = pstats.Stats(str(folder / f"{n}.prof"))
            stats.sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="profiled calls per kind")
    parser.add_argument("--top", type=int, default=0, help="also print the top N functions")
    parser.add_argument("--save", type=Path, help="copy the profiles (1-3.prof) into this folder")
    parser.add_argument(
        "--serve", nargs=3, metavar=("ADDRESS", "DATA", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    asyncio.run(drive(args.calls, args.top, args.save))


if __name__ == "__main__":
    main()
