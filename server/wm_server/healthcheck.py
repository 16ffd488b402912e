"""``python -m wm_server.healthcheck``: exit 0 when the server answers SERVING on
grpc.health.v1, 1 otherwise — the container image's HEALTHCHECK.

Why a module of the server package and not grpc_health_probe: the image then needs no extra
binary, and the probe asks what the kubelet's gRPC probe asks (the overall status "" by
default, or ``--service wm.v1.WorkingMemoryService``, which turns NOT_SERVING as soon as a
shutdown starts). It reads the address the server listens on (``WM_ADDRESS``; a wildcard host
is dialled on loopback) and imports nothing but gRPC, so it stays cheap every few seconds.
Plaintext only, like the kubelet's probe: with WM_TLS_* set, probe through the mesh instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from wm_client.channel import default_address, reachable_address

SERVING = 0
NOT_SERVING = 1


def check(address: str, service: str = "", timeout: float = 3.0) -> tuple[int, str]:
    """The exit code and a one-line reason."""
    with grpc.insecure_channel(reachable_address(address)) as channel:
        # The stub package types HealthStub for asyncio channels only; this one is sync.
        stub: Any = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            return NOT_SERVING, f"{address}: {code.name if code else 'error'}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    code = SERVING if reply.status == health_pb2.HealthCheckResponse.SERVING else NOT_SERVING
    return code, f"{address} {service or '(overall)'}: {status}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="default: WM_ADDRESS, on loopback")
    parser.add_argument("--service", default="", help='the health service name (default "")')
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    args = parser.parse_args(argv)
    code, reason = check(args.address or default_address(), args.service, args.timeout)
    print(reason, file=sys.stdout if code == SERVING else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
