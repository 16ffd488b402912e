"""API keys: each key maps to one tenant; keys come from the environment or a file.

Keys are kept in memory only as SHA-256 digests, so a heap dump or a stray debug print does
not reveal a usable key. SHA-256 rather than a password hash (bcrypt, scrypt, argon2) because
API keys are long random strings, not human passwords: with at least ``MIN_KEY_LENGTH``
characters (32 random bytes recommended) a brute-force search of the digest is hopeless
anyway, and a deliberately slow hash would add milliseconds of CPU to every single RPC.

Every comparison goes through :func:`hmac.compare_digest` against every configured digest,
with no early exit, so response timing reveals neither how much of a key matched nor which
entry did.

Configuration: ``WM_API_KEYS`` holds comma-separated ``tenant:key`` pairs, ``WM_API_KEYS_FILE``
names a file with one ``tenant:key`` per line (blank lines and ``#`` comments are skipped).
Both may be used; a tenant may have several keys (rotation), a key may not appear twice.
Error messages name the variable (and line) but never echo a key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass

import structlog

from wm_server.config import ConfigurationError, Settings, is_loopback_host, split_host_port

# The logger keeps the name it had before the module moved: operators filter on it.
log = structlog.get_logger("wm_server.auth")

MIN_KEY_LENGTH = 16
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


@dataclass(frozen=True, slots=True)
class ApiKeyring:
    """The configured keys, as (digest, tenant) pairs."""

    entries: tuple[tuple[bytes, str], ...]

    def authenticate(self, key: str) -> str | None:
        """The tenant of ``key``, or None. Constant time in the key and in which entry
        matches: every digest is compared, the loop never stops early."""
        presented = _digest(key)
        tenant: str | None = None
        for digest, owner in self.entries:
            if hmac.compare_digest(presented, digest):
                tenant = owner
        return tenant

    @property
    def tenants(self) -> frozenset[str]:
        return frozenset(owner for _, owner in self.entries)

    def __len__(self) -> int:
        return len(self.entries)


def parse_pair(text: str, where: str) -> tuple[str, str]:
    """One ``tenant:key`` entry; ``where`` names its origin in error messages."""
    tenant, sep, key = text.strip().partition(":")
    tenant, key = tenant.strip(), key.strip()
    if not sep or not tenant or not key:
        raise ConfigurationError(f"{where}: expected tenant:key")
    if not TENANT_PATTERN.fullmatch(tenant):
        raise ConfigurationError(
            f"{where}: tenant {tenant!r} must be 1-63 letters, digits, '.', '_' or '-'"
        )
    if len(key) < MIN_KEY_LENGTH:
        raise ConfigurationError(
            f"{where}: the key of tenant {tenant!r} is shorter than {MIN_KEY_LENGTH} characters"
            " (use a long random key, e.g. `python -c 'import secrets;"
            " print(secrets.token_urlsafe(32))'`)"
        )
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        raise ConfigurationError(
            f"{where}: the key of tenant {tenant!r} must be printable ASCII without spaces"
        )
    return tenant, key


def build_keyring(pairs: Iterable[tuple[str, str, str]]) -> ApiKeyring | None:
    """A keyring from (tenant, key, origin) triples; None when there are none."""
    entries: list[tuple[bytes, str]] = []
    origins: dict[bytes, str] = {}
    for tenant, key, where in pairs:
        digest = _digest(key)
        if digest in origins:
            raise ConfigurationError(
                f"{where}: the same key is already configured at {origins[digest]}"
            )
        origins[digest] = where
        entries.append((digest, tenant))
    return ApiKeyring(tuple(entries)) if entries else None


def load_keyring(settings: Settings) -> ApiKeyring | None:
    """The keys of ``WM_API_KEYS`` and ``WM_API_KEYS_FILE``; None means authentication off."""
    triples: list[tuple[str, str, str]] = []
    if settings.api_keys is not None:
        raw = settings.api_keys.get_secret_value()
        for index, item in enumerate(raw.split(","), start=1):
            if item.strip():
                where = f"WM_API_KEYS entry {index}"
                triples.append((*parse_pair(item, where), where))
        if raw.strip() and not triples:
            raise ConfigurationError("WM_API_KEYS: no tenant:key pair (unset it to turn keys off)")
    if settings.api_keys_file is not None:
        path = settings.api_keys_file
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"WM_API_KEYS_FILE: cannot read {path}: {exc}") from None
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                where = f"WM_API_KEYS_FILE line {number}"
                triples.append((*parse_pair(stripped, where), where))
        if not triples:
            raise ConfigurationError(f"WM_API_KEYS_FILE: {path} holds no tenant:key line")
    return build_keyring(triples)


def check_bind_safety(settings: Settings, keyring: ApiKeyring | None) -> None:
    """Refuse to serve unauthenticated on a non-loopback address unless told to.

    Why: without keys every caller is the one default tenant and can read and delete every
    session, so listening beyond loopback that way must be a deliberate choice (for example
    behind a mesh or gateway that authenticates callers), never an accident of WM_ADDRESS.
    """
    if keyring is not None:
        return
    # The web inspector shows every session of the default tenant, and the HTTP door serves
    # the same contract: the same rule applies to both.
    for address in (settings.address, settings.inspector_address, settings.http_address):
        if address is None or is_loopback_host(split_host_port(address)[0]):
            continue
        if settings.allow_insecure:
            log.warning(
                "authentication_off",
                address=address,
                why="WM_ALLOW_INSECURE is set: every caller is the default tenant",
            )
            continue
        raise ConfigurationError(
            f"refusing to listen on {address} without authentication: it is not a"
            " loopback address and no API keys are configured. Set WM_API_KEYS or"
            " WM_API_KEYS_FILE, or set WM_ALLOW_INSECURE=1 to accept unauthenticated callers"
            " (for example behind a mesh or gateway that authenticates them)."
        )
