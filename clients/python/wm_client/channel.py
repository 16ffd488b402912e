"""Where the server is and how to open a channel to it.

Why a shared service config: retries of UNAVAILABLE and per-method timeouts are declared once,
in this package's data (``wm_client/data/wm_grpc_service_config.json``, its only copy, so an
installed client needs no source tree), and every client (this one, the TypeScript client, a
mesh) reads that same file. Retries are safe
because every mutating call carries a request_id, and the streaming RPCs have no retry policy
at all: a broken stream is resumed by the application with WatchCommit (see ``stream``).
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

import grpc

from wm_client.data import SERVICE_CONFIG_FILE, packaged

DEFAULT_PORT = 50051
DEFAULT_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"
ADDRESS_VARIABLE = "WM_ADDRESS"
# Large enough for an assembled context or an archive with its raw messages.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

ChannelOptions = list[tuple[str, Any]]


def default_address() -> str:
    """The server address: ``WM_ADDRESS`` (the variable the server listens on) or the default.

    A server bound to a wildcard (``0.0.0.0:50051``, ``[::]:50051``) is reached on loopback.
    """
    address = os.environ.get(ADDRESS_VARIABLE, "").strip() or DEFAULT_ADDRESS
    return reachable_address(address)


def with_default_port(address: str) -> str:
    """``host`` → ``host:50051``: gRPC would otherwise dial a bare host on port 443, which is
    never where this service listens unless it is said. Target URIs (``dns:///…``,
    ``unix:…``) are left to gRPC."""
    address = address.strip()
    if "://" in address or address.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return address
    if address.startswith("["):  # [v6] or [v6]:port
        return address if "]:" in address else f"{address}:{DEFAULT_PORT}"
    if address.count(":") > 1:  # a bare IPv6 address
        return f"[{address}]:{DEFAULT_PORT}"
    if ":" not in address:
        return f"{address}:{DEFAULT_PORT}"
    return address


def reachable_address(address: str) -> str:
    """Turn a listening address into one a client can dial (wildcard hosts → loopback, the
    default port when none is given)."""
    address = with_default_port(address)
    host, sep, port = address.rpartition(":")
    if sep and host in ("0.0.0.0", "[::]", "::", ""):
        return f"127.0.0.1:{port}"
    return address


@cache
def service_config_text() -> str:
    """The service config JSON shipped with the package."""
    return packaged(SERVICE_CONFIG_FILE).read_text("utf-8")


def service_config() -> dict[str, Any]:
    """The service config as a dictionary (a fresh copy each call)."""
    value: dict[str, Any] = json.loads(service_config_text())
    return value


def channel_options(extra: ChannelOptions | None = None) -> ChannelOptions:
    """Channel arguments: the service config with retries on, generous message sizes, and a
    short reconnect backoff so a restarted server is found again within seconds."""
    options: ChannelOptions = [
        ("grpc.service_config", json.dumps(service_config(), separators=(",", ":"))),
        ("grpc.enable_retries", 1),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.min_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 3000),
        # Our own subchannels: another channel's backoff after a restart must not delay ours.
        ("grpc.use_local_subchannel_pool", 1),
    ]
    options.extend(extra or [])
    return options


def open_channel(address: str, extra: ChannelOptions | None = None) -> grpc.aio.Channel:
    """An insecure channel (loopback or a mesh that terminates TLS) with the service config."""
    return grpc.aio.insecure_channel(reachable_address(address), options=channel_options(extra))
