"""Rules for identifiers and request-level values, shared by every service."""

from __future__ import annotations

import itertools
import re
import secrets
import uuid

from wm_server.errors import invalid

SESSION_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,128}")
MESSAGE_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
OWNER_ID_PATTERN = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
MAX_REQUEST_ID = 128
MAX_KEEP_RECENT = 10_000
# The lowest tool-output inline threshold a session config may set (characters).
MIN_INLINE_CHARS = 1_000
MAX_BATCH = 1000


def session_id(value: str, field: str = "session_id") -> str:
    if not value:
        raise invalid(field, "required", "REQUIRED")
    if not SESSION_ID_PATTERN.fullmatch(value):
        raise invalid(field, "must be 1-128 characters of [A-Za-z0-9._-]", "INVALID_FORMAT")
    return value


def owner_id(value: str, field: str) -> str:
    """A user or agent id (Session.user_id, Session.agent_id, a memory owner); may be empty
    where the caller allows none."""
    if value and not OWNER_ID_PATTERN.fullmatch(value):
        raise invalid(field, "must be 1-128 characters of [A-Za-z0-9._:@-]", "INVALID_FORMAT")
    return value


def request_id(value: str) -> str | None:
    if len(value) > MAX_REQUEST_ID:
        raise invalid("request_id", f"at most {MAX_REQUEST_ID} characters")
    return value or None


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
