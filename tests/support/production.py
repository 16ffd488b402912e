"""Helpers of the production-readiness tests (auth, TLS, observability, shutdown)."""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from support.sqlite_template import migrated_data_dir
from wm_server.config import Settings


def settings_for(data_dir: Path, **overrides: object) -> Settings:
    """Settings of an in-process server on a free loopback port; its folder is left as it is
    (a test of a refused start finds no database made)."""
    values: dict[str, object] = {
        "address": "127.0.0.1:0",
        "data_dir": data_dir,
        "llm_provider": "offline",
        "shutdown_grace_seconds": 1.0,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def migrated_settings(data_dir: Path, **overrides: object) -> Settings:
    """``settings_for`` with the SQLite database at this checkout's schema already in
    ``data_dir`` (``migrated_data_dir``), unless another database is given."""
    if "database_url" not in overrides:
        migrated_data_dir(data_dir)
    return settings_for(data_dir, **overrides)


async def code_of(call: Awaitable[Any] | AsyncIterator[Any]) -> grpc.StatusCode:
    """The status code of a unary call, or of a whole stream read to its end."""
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def reflected_services(channel: grpc.Channel) -> list[str]:
    """Service names listed by server reflection (a blocking call: run it in a thread)."""
    return list(ProtoReflectionDescriptorDatabase(channel).get_services())


def scrape(port: int) -> str:
    """The Prometheus text exposition of the metrics endpoint (blocking)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode("utf-8"))


def sample(exposition: str, name: str, **labels: str) -> float:
    """The value of one sample of ``name`` with exactly these labels (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(exposition):
        for item in family.samples:
            if item.name == name and item.labels == labels:
                return float(item.value)
    return 0.0
