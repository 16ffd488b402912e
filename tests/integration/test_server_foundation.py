"""The server answers health checks and reflection on a loopback port."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from wm_server.app import Application

EXPECTED_RPCS = {
    "CreateSession", "GetSession", "UpdateSession", "ListSessions", "DeleteSession",
    "AddMessages", "ListMessages", "CreateCommit",
    "WatchCommit", "GetCommit", "ListCommits", "RetryCommit", "CompactSession", "GetWorkingMemory",
    "ApplyWorkingMemoryOps", "AssembleContext", "ListArchives", "GetArchive", "SearchArchives",
    "GetToolDefinitions", "GetToolOutput", "SearchToolOutputs", "SearchMemories",
    "ListMemories", "GetMemory", "CreateMemory", "UpdateMemory", "DeleteMemory", "RetireMemory", "RemoveRecentMessages",
    "PreviewMemoryExtraction", "PurgeUserData",
}  # fmt: skip


async def test_health_reports_serving_for_server_and_service(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "wm.v1.WorkingMemoryService"):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_health_goes_not_serving_on_shutdown(app: Application) -> None:
    async with grpc.aio.insecure_channel(app.address) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        await app.health.enter_graceful_shutdown()
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


def _reflect(address: str) -> tuple[list[str], set[str]]:
    with grpc.insecure_channel(address) as ch:
        db = ProtoReflectionDescriptorDatabase(ch)
        services = list(db.get_services())
        from google.protobuf.descriptor_pool import DescriptorPool

        pool = DescriptorPool(db)
        service = pool.FindServiceByName("wm.v1.WorkingMemoryService")
        return services, {m.name for m in service.methods}


async def test_reflection_lists_the_service_with_every_rpc(app: Application) -> None:
    services, methods = await asyncio.to_thread(_reflect, app.address)
    assert "wm.v1.WorkingMemoryService" in services
    assert "grpc.health.v1.Health" in services
    assert methods == EXPECTED_RPCS


async def test_methods_are_served_through_the_generic_handlers_alone(
    app: Application, channel: grpc.aio.Channel
) -> None:
    """grpc.aio keeps a pending request per method registered by name and waits on all of them
    for every call it accepts; served through the generic handlers it keeps one. Every method
    still answers (the other suites call each), and an unknown one is UNIMPLEMENTED."""
    health = health_pb2_grpc.HealthStub(channel)
    await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
    accepting = [
        task.get_coro().__qualname__  # type: ignore[union-attr]
        for task in asyncio.all_tasks()
        if "request" in getattr(task.get_coro(), "__qualname__", "")
    ]
    assert "AioServer._request_call" in accepting
    assert [name for name in accepting if "registered" in name] == []
    unknown = channel.unary_unary("/wm.v1.WorkingMemoryService/NoSuchMethod")
    try:
        await unknown(b"", timeout=5)
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.UNIMPLEMENTED
    else:
        raise AssertionError("an unknown method answered")
