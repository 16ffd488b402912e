"""Generated protobuf and gRPC stubs of the wm.v1 contract. Do not edit."""
