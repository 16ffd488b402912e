"""Package data: the service config (a copy of protos/wm/v1/wm_grpc_service_config.json) and
the conversation `wm demo` replays."""
