"""The gRPC servicer: a thin adapter from wm.v1 messages to the application services.

Each method converts the request, calls one service method and converts the answer back;
validation and behaviour live in the services. RPCs whose issue has not landed yet are
inherited from the generated base class and answer UNIMPLEMENTED.
"""

from __future__ import annotations

from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc


class WorkingMemoryServicer(service_grpc.WorkingMemoryServiceServicer):
    """wm.v1.WorkingMemoryService."""
