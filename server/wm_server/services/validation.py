"""Rules for identifiers and request-level values, shared by every service.

The shapes of ids (a session's, a user's or an agent's) are the proto's rules, checked at the
edge for every request (``api.request_rules``) before a service runs: the services take
their ids from names and fields that passed them, so no copy of those patterns lives here.
"""

from __future__ import annotations

import itertools
import secrets
import uuid

from wm_server import contract
from wm_server.errors import invalid

MAX_REQUEST_ID = contract.MAX_REQUEST_ID
MAX_KEEP_RECENT = contract.MAX_KEEP_RECENT
# The lowest tool-output inline threshold a session config may set (characters).
MIN_INLINE_CHARS = 1_000


def request_id(value: str) -> str | None:
    if len(value) > MAX_REQUEST_ID:
        raise invalid("request_id", f"at most {MAX_REQUEST_ID} characters")
    return value or None


# What google.protobuf.Timestamp can carry: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z (a
# time outside it cannot be written as JSON or RFC 3339, so it is refused on the way in and
# never stored).
TIMESTAMP_MIN_SECONDS = -62_135_596_800
TIMESTAMP_MAX_SECONDS = 253_402_300_799


def timestamp_seconds(seconds: int, nanos: int, field: str) -> float:
    """A client's Timestamp as epoch seconds, or INVALID_ARGUMENT naming ``field``."""
    if not TIMESTAMP_MIN_SECONDS <= seconds <= TIMESTAMP_MAX_SECONDS:
        raise invalid(
            field, "must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z", "OUT_OF_RANGE"
        )
    if not 0 <= nanos <= 999_999_999:
        raise invalid(field, "nanos must be 0-999999999", "OUT_OF_RANGE")
    return seconds + nanos / 1e9


def in_timestamp_range(seconds: float) -> bool:
    """Whether stored epoch seconds can be shown as a Timestamp (data written before the
    range was checked may not be: it reads as unset rather than failing the read). The end
    is inclusive: a float rounds the last second's nanos up to it (see :func:`clamped`)."""
    return TIMESTAMP_MIN_SECONDS <= seconds <= TIMESTAMP_MAX_SECONDS + 1


def clamped(seconds: float) -> float:
    """Stored seconds within :func:`in_timestamp_range` as a Timestamp can carry them: the
    last second's nanos, rounded up to the next second by the float (its spacing there is
    ~30 µs), read as the middle of that second."""
    return min(seconds, TIMESTAMP_MAX_SECONDS + 0.5)


def new_session_id() -> str:
    return f"s-{uuid.uuid4().hex}"


# Server-made message ids: a random per-process prefix and a counter. Unique across restarts
# and replicas (96 random bits per process), and about thirty times cheaper than a uuid4 each.
_MESSAGE_PREFIX = secrets.token_hex(12)
_message_counter = itertools.count(1)


def new_message_id() -> str:
    return f"m-{_MESSAGE_PREFIX}-{next(_message_counter):x}"


def new_commit_id() -> str:
    return f"c-{uuid.uuid4().hex}"
