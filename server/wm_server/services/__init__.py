"""Application services: the use cases, free of gRPC, driven by the API adapters."""
