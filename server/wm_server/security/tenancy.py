"""The tenant of the current request, set by the auth interceptor for each RPC.

While authentication is off every caller is the single default tenant; with API keys each key
maps to its own tenant. Services read it from here so that every store call is scoped.
"""

from __future__ import annotations

from contextvars import ContextVar

DEFAULT_TENANT = "default"

_current: ContextVar[str] = ContextVar("wm_tenant", default=DEFAULT_TENANT)


def current_tenant() -> str:
    return _current.get()


def set_tenant(tenant: str) -> None:
    _current.set(tenant)
