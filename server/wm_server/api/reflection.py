"""Server reflection under both names: ``grpc.reflection.v1`` (what current tools ask first)
and ``grpc.reflection.v1alpha`` (what older ones know).

grpcio-reflection ships only v1alpha. The v1 protocol is the same file under a new package:
the same messages, fields and numbers (grpc/grpc ``src/proto/grpc/reflection/v1``). So its
descriptor is made here from the v1alpha one, renamed, and added to the default pool, where
reflection (and a client asking about ``grpc.reflection.v1.ServerReflection`` itself) finds it;
and the v1 method is served by the library's own servicer, whose messages encode exactly as v1
ones do. Nothing is vendored or generated, and the two versions cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as alpha_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc as alpha_grpc

from wm_server.api.registration import GenericOnly

ALPHA_PACKAGE = "grpc.reflection.v1alpha"
V1_PACKAGE = "grpc.reflection.v1"
V1_FILE = "grpc/reflection/v1/reflection.proto"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
_METHOD = "ServerReflectionInfo"


def v1_file_descriptor(pool: descriptor_pool.DescriptorPool | None = None) -> FileDescriptor:
    """The v1 reflection file in ``pool`` (the default pool), added on the first call."""
    pool = pool or descriptor_pool.Default()
    try:
        return pool.FindFileByName(V1_FILE)
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    alpha_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = V1_FILE
    proto.package = V1_PACKAGE
    proto.ClearField("options")
    alpha_prefix, v1_prefix = f".{ALPHA_PACKAGE}.", f".{V1_PACKAGE}."
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(alpha_prefix):
                field.type_name = v1_prefix + field.type_name.removeprefix(alpha_prefix)
    for service in proto.service:
        for method in service.method:
            method.input_type = v1_prefix + method.input_type.removeprefix(alpha_prefix)
            method.output_type = v1_prefix + method.output_type.removeprefix(alpha_prefix)
    pool.Add(proto)
    return pool.FindFileByName(V1_FILE)


def enable_reflection(service_names: Iterable[str], server: GenericOnly) -> None:
    """Serve reflection, v1 and v1alpha, listing ``service_names`` and both reflection
    services."""
    v1_file_descriptor()
    names = (*service_names, V1_SERVICE_NAME, reflection.SERVICE_NAME)
    servicer = reflection.aio.ReflectionServicer(names)
    server.add(alpha_grpc.add_ServerReflectionServicer_to_server, servicer)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=alpha_pb2.ServerReflectionRequest.FromString,
        response_serializer=alpha_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {_METHOD: handler}),)
    )
