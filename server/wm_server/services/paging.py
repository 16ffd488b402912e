"""Opaque page tokens: a versioned, signed cursor that clients must not build themselves."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from wm_server.errors import invalid

_KEY = b"wm.v1.page-token"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000


def page_size(requested: int) -> int:
    """0 → default; above the maximum → the maximum; negative → INVALID_ARGUMENT."""
    if requested < 0:
        raise invalid("page_size", "must not be negative")
    if requested == 0:
        return DEFAULT_PAGE_SIZE
    return min(requested, MAX_PAGE_SIZE)


def encode(kind: str, cursor: int | list[int]) -> str:
    """A token for ``cursor`` (a position, or several numbers a list continues from)."""
    body = json.dumps({"k": kind, "c": cursor}, separators=(",", ":")).encode()
    mac = hmac.new(_KEY, body, hashlib.sha256).digest()[:8]
    return base64.urlsafe_b64encode(mac + body).decode().rstrip("=")


def decode(kind: str, token: str) -> int | None:
    """The cursor inside ``token``; None for an empty token; INVALID_ARGUMENT if forged."""
    cursor = _decode(kind, token, int)
    return None if cursor is None else int(cursor)


def decode_numbers(kind: str, token: str, count: int) -> list[int] | None:
    """The ``count`` numbers inside a token made by ``encode(kind, [...])``; None for an
    empty token; INVALID_ARGUMENT if forged or of another list."""
    cursor = _decode(kind, token, list)
    if cursor is None:
        return None
    if len(cursor) != count or not all(type(n) is int for n in cursor):
        raise invalid("page_token", "not a page token of this list", "INVALID_PAGE_TOKEN")
    return [int(n) for n in cursor]


def _decode(kind: str, token: str, shape: type) -> Any:
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        mac, body = raw[:8], raw[8:]
        if not hmac.compare_digest(mac, hmac.new(_KEY, body, hashlib.sha256).digest()[:8]):
            raise ValueError("bad signature")
        data = json.loads(body)
        if data["k"] != kind or not isinstance(data["c"], shape) or isinstance(data["c"], bool):
            raise ValueError("wrong kind")
        return data["c"]
    except (ValueError, KeyError, TypeError) as exc:
        raise invalid("page_token", "not a page token of this list", "INVALID_PAGE_TOKEN") from exc
