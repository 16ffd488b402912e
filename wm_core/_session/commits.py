"""A commit's lifecycle as the domain states it: the states a commit moves through, why one
archives nothing, and how an archive is named to an agent.

The server stores these values and the API maps them to the proto's enums, the inspector and
the recall tools show the names; written here once, every one of them agrees.
"""

from __future__ import annotations

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


def archive_name(seq: int) -> str:
    """archive_001 … archive_999, archive_1000 …: zero-padded to three digits, growing."""
    return f"archive_{seq:03d}"
