"""The inspector's query parameters, read in one place.

A value a page cannot use (not a number, negative, past what the API's field carries, not one
of the choices) is the caller's mistake: 400 naming the parameter, never a 500 from a
conversion that failed on the way, nor a round trip to an RPC that would refuse it anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

# The largest number a query string may name: the API's versions and sequences are int64.
MAX_INT64 = 2**63 - 1
_MAX_DIGITS = len(str(MAX_INT64))  # checked before int(): Python refuses over 4,300 digits


def whole_number(raw: str, name: str) -> int:
    """``raw`` as a number from 0 to :data:`MAX_INT64` (empty: 0), or 400 naming ``name``."""
    value = raw.strip() or "0"
    if (
        not value.isascii()
        or not value.isdigit()
        or len(value.lstrip("0")) > _MAX_DIGITS
        or int(value) > MAX_INT64
    ):
        raise web.HTTPBadRequest(
            text=f"{name} must be a whole number from 0 to {MAX_INT64}, got {value[:40]!r}"
        )
    return int(value)


def query_number(request: web.Request, name: str) -> int:
    """The whole number of query parameter ``name`` (0 when absent)."""
    return whole_number(request.query.get(name, ""), name)


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
