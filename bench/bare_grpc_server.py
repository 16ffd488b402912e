"""A grpc.aio server with nothing but the standard health service: no interceptor, no store.

``bench/service_bench.py`` starts it to measure the machine's floor for a sequential unary
call from a Python client, so the service's own figures can be read against it. Usage:
``python bench/bare_grpc_server.py 127.0.0.1:PORT [uvloop]``: on the standard asyncio loop (the
floor the service's ratios are taken against), or on uvloop, the loop the service itself runs
on by default, to show what is left of the wrappers' cost on the same loop.
"""

from __future__ import annotations

import asyncio
import sys

import grpc
from grpc_health.v1 import health, health_pb2_grpc


async def serve(address: str) -> None:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_insecure_port(address)
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    if sys.argv[2:] == ["uvloop"]:
        import uvloop

        uvloop.run(serve(sys.argv[1]))
    else:
        asyncio.run(serve(sys.argv[1]))
