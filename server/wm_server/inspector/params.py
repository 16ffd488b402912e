"""The inspector's query parameters, read in one place.

A value a page cannot use (not a number, negative, past what the API's field carries, not one
of the choices) is the caller's mistake: 400 naming the parameter, never a 500 from a
conversion that failed on the way, nor a round trip to an RPC that would refuse it anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

# The largest number a query string may name: the API's sequences are int64.
MAX_INT64 = 2**63 - 1
# The largest working-memory version: its name (sessions/{s}/workingMemories/{version})
# spells the version in at most 18 digits.
MAX_VERSION = 10**18 - 1


def whole_number(raw: str, name: str, maximum: int = MAX_INT64) -> int:
    """``raw`` as a number from 0 to ``maximum`` (empty: 0), or 400 naming ``name``."""
    value = raw.strip() or "0"
    if (
        not value.isascii()
        or not value.isdigit()
        # checked before int(): Python refuses over 4,300 digits
        or len(value.lstrip("0")) > len(str(maximum))
        or int(value) > maximum
    ):
        raise web.HTTPBadRequest(
            text=f"{name} must be a whole number from 0 to {maximum}, got {value[:40]!r}"
        )
    return int(value)


def query_number(request: web.Request, name: str, maximum: int = MAX_INT64) -> int:
    """The whole number of query parameter ``name`` (0 when absent)."""
    return whole_number(request.query.get(name, ""), name, maximum)


def query_fraction(request: web.Request, name: str) -> float:
    """Query parameter ``name`` as a number from 0 to 1 (0 when absent), or 400."""
    raw = request.query.get(name, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0  # refused below, with the same message
    if not 0.0 <= value <= 1.0:  # NaN too
        raise web.HTTPBadRequest(text=f"{name} must be a number from 0 to 1, got {raw[:40]!r}")
    return value


def query_choice(request: web.Request, name: str, choices: Sequence[str], default: str) -> str:
    """Query parameter ``name`` (``default`` when absent), one of ``choices``, or 400."""
    value = request.query.get(name, default)
    if value not in choices:
        raise web.HTTPBadRequest(
            text=f"{name} must be one of {', '.join(choices)}, got {value[:40]!r}"
        )
    return value
