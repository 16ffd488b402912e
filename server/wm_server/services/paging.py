"""Page sizes and opaque page tokens (AIP-158), bound to the list, its query and the tenant.

A token carries only a cursor; what it was issued for (the list, the tenant, the session whose
commits or archives are listed) enters its MAC but not its bytes, so a token replayed on
another list, by another tenant or for another session fails the check like a forged one.
The key comes from ``WM_PAGE_TOKEN_KEY``; without it a random key is made once and kept in the
database (``load_tokens``), so every replica sharing the database accepts the others' tokens
while nobody outside can sign one. The server never signs with a key of its own process: the
services that page take their ``PageTokens`` as a required constructor argument, built once by
the composition root (``app.py``), so a service wired without the deployment's key is a
TypeError at start rather than tokens another replica refuses. A cursor must fit the store's
signed 64-bit integers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Sequence

from wm_server.errors import invalid
from wm_server.security.tenancy import current_tenant
from wm_server.storage.database import Database

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
MAX_CURSOR = 2**63 - 1  # the largest integer the stores hold
PAGE_TOKEN_INVALID = "PAGE_TOKEN_INVALID"
KEY_NAME = "page_token_key"  # its row in the database's secrets

_VERSION = b"\x01"
_CURSOR_BYTES = 8
_MAC_BYTES = 16


def page_size(requested: int) -> int:
    """0 → default; above the maximum → the maximum; negative → INVALID_ARGUMENT."""
    if requested < 0:
        raise invalid("page_size", "must not be negative")
    if requested == 0:
        return DEFAULT_PAGE_SIZE
    return min(requested, MAX_PAGE_SIZE)


def not_a_token() -> Exception:
    return invalid(
        "page_token",
        "not a page token of this list (tokens are bound to the list, its session and the"
        " caller, and are issued by the server only)",
        PAGE_TOKEN_INVALID,
        error_reason=PAGE_TOKEN_INVALID,
    )


class PageTokens:
    """Issues and checks the page tokens of one deployment (one key)."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def random(cls) -> PageTokens:
        """A key of this process only, chosen explicitly by a caller that is one process (a
        test, a benchmark); the server loads the deployment's key instead (``load_tokens``)."""
        return cls(secrets.token_bytes(32))

    def _mac(self, kind: str, scope: str, cursor: bytes) -> bytes:
        bound = "\x00".join((kind, current_tenant(), scope)).encode()
        return hmac.new(self._key, _VERSION + cursor + b"\x00" + bound, hashlib.sha256).digest()[
            :_MAC_BYTES
        ]

    def encode(self, kind: str, cursor: int, scope: str = "") -> str:
        """The token of ``cursor`` in list ``kind`` (of ``scope``, e.g. a session id)."""
        return self.encode_numbers(kind, (cursor,), scope)

    def decode(self, kind: str, token: str, scope: str = "") -> int | None:
        """The cursor of ``token``; None for an empty token; INVALID_ARGUMENT
        (``PAGE_TOKEN_INVALID``) when it was not issued for this list, scope and tenant."""
        numbers = self.decode_numbers(kind, token, 1, scope)
        return None if numbers is None else numbers[0]

    def encode_numbers(self, kind: str, cursor: Sequence[int], scope: str = "") -> str:
        """A token of several numbers a list continues from (a read position and its end)."""
        if not cursor or not all(0 <= n <= MAX_CURSOR for n in cursor):
            raise ValueError(f"cursor out of range: {cursor}")
        packed = b"".join(n.to_bytes(_CURSOR_BYTES, "big") for n in cursor)
        raw = _VERSION + packed + self._mac(kind, scope, packed)
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def decode_numbers(
        self, kind: str, token: str, count: int, scope: str = ""
    ) -> list[int] | None:
        """The ``count`` numbers of a token of ``encode_numbers``; None for an empty token;
        INVALID_ARGUMENT (``PAGE_TOKEN_INVALID``) for any other."""
        if not token:
            return None
        size = len(_VERSION) + count * _CURSOR_BYTES + _MAC_BYTES
        if len(token) > 2 * size or not token.isascii():
            raise not_a_token()
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise not_a_token() from None
        if len(raw) != size or raw[:1] != _VERSION:
            raise not_a_token()
        packed, mac = raw[1 : 1 + count * _CURSOR_BYTES], raw[1 + count * _CURSOR_BYTES :]
        if not hmac.compare_digest(mac, self._mac(kind, scope, packed)):
            raise not_a_token()
        numbers = [
            int.from_bytes(packed[i : i + _CURSOR_BYTES], "big")
            for i in range(0, len(packed), _CURSOR_BYTES)
        ]
        if any(n > MAX_CURSOR for n in numbers):
            raise not_a_token()
        return numbers


async def load_tokens(database: Database, configured: str | None) -> PageTokens:
    """The deployment's tokens: the configured key, else the one kept in the database (made
    by whichever replica started first; the others read it)."""
    if configured:
        return PageTokens(configured.encode())
    candidate = secrets.token_urlsafe(32)
    async with database.unit_of_work() as uow:
        key = await uow.secrets.get_or_create(KEY_NAME, candidate)
        await uow.commit()
    return PageTokens(key.encode())
