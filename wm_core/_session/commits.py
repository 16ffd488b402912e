"""A commit's lifecycle as the domain states it: the states a commit moves through, why one
archives nothing, and how an archive is named to an agent.

The server stores these values and the API maps them to the proto's enums, the inspector and
the recall tools show the names; written here once, every one of them agrees.
"""

from __future__ import annotations

import re
from enum import StrEnum


class CommitState(StrEnum):
    """Lifecycle of a commit (mirrors wm.v1.CommitState); the value is what is stored."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"

    @property
    def terminal(self) -> bool:
        """No later change: the commit completed, failed or was skipped."""
        return self in (CommitState.COMPLETED, CommitState.FAILED, CommitState.SKIPPED)


class SkipReason(StrEnum):
    """Why a commit archived nothing."""

    NO_MESSAGES = "no_messages"
    WITHIN_KEEP_WINDOW = "within_keep_window"


# What an archive id looks like (as a regular expression, matched whole): ASCII digits only
# (\d would accept other scripts' digits), at most 18 of them so that the number fits a
# 64-bit integer (longer ids once made int() or SQLite raise).
ARCHIVE_ID_PATTERN = "archive_[0-9]{3,18}"
_ARCHIVE_ID = re.compile(ARCHIVE_ID_PATTERN)


def archive_name(seq: int) -> str:
    """archive_001 … archive_999, archive_1000 …: zero-padded to three digits, growing."""
    return f"archive_{seq:03d}"


def archive_number(archive_id: str) -> int | None:
    """The number an archive id names (``archive_name``'s inverse); None when it is not one
    (archive numbers start at 1)."""
    if not _ARCHIVE_ID.fullmatch(archive_id):
        return None
    return int(archive_id.partition("_")[2]) or None
