"""The gRPC edge: servicer, status mapping and proto conversion."""
