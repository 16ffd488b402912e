"""Server reflection answers under grpc.reflection.v1 and v1alpha, to real reflection clients:
the library's v1alpha descriptor database, and a v1 client on the v1 method path."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2 as wire  # v1 encodes exactly as v1alpha

from support.production import reflected_services
from wm_server.app import Application

V1_METHOD = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
EXPECTED = {
    "wm.v1.WorkingMemoryService",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
}


def _v1(
    address: str, *requests: wire.ServerReflectionRequest
) -> list[wire.ServerReflectionResponse]:
    """One v1 reflection stream (a blocking call: run it in a thread)."""
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(
            V1_METHOD,
            request_serializer=wire.ServerReflectionRequest.SerializeToString,
            response_deserializer=wire.ServerReflectionResponse.FromString,
        )
        replies: Iterator[wire.ServerReflectionResponse] = call(iter(requests), timeout=10)
        return list(replies)


def _files(reply: wire.ServerReflectionResponse) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    files = {}
    for raw in reply.file_descriptor_response.file_descriptor_proto:
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
        files[proto.name] = proto
    return files


async def test_v1alpha_lists_both_reflection_versions(app: Application) -> None:
    with grpc.insecure_channel(app.address) as channel:
        services = await asyncio.to_thread(reflected_services, channel)
    assert set(services) == EXPECTED


async def test_v1_lists_services_and_describes_them(app: Application) -> None:
    listed, wm, itself = await asyncio.to_thread(
        _v1,
        app.address,
        wire.ServerReflectionRequest(list_services=""),
        wire.ServerReflectionRequest(file_containing_symbol="wm.v1.WorkingMemoryService"),
        wire.ServerReflectionRequest(file_containing_symbol="grpc.reflection.v1.ServerReflection"),
    )
    assert {s.name for s in listed.list_services_response.service} == EXPECTED
    files = _files(wm)
    service_file = next(f for f in files.values() if f.package == "wm.v1" and f.service)
    methods = {m.name for s in service_file.service for m in s.method}
    assert {"GetSession", "CreateCommit", "WatchCommit"} <= methods
    (v1_file,) = _files(itself).values()
    assert v1_file.name == "grpc/reflection/v1/reflection.proto"
    assert v1_file.package == "grpc.reflection.v1"
    (method,) = v1_file.service[0].method
    assert method.input_type == ".grpc.reflection.v1.ServerReflectionRequest"
    assert method.client_streaming and method.server_streaming
    unknown = await asyncio.to_thread(
        _v1, app.address, wire.ServerReflectionRequest(file_containing_symbol="no.such.Thing")
    )
    assert unknown[0].error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
