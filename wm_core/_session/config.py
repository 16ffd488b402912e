"""A session's configuration, and when a session commits by itself: the auto-commit policy
and the rules that apply it.

A server-side policy lets a session without a smart client still get a working memory: the
ingest path asks ``threshold_trigger`` after every write, in the transaction that wrote, and
an idle sweeper asks ``idle_due``. Both answer from the session's counters alone, so every
replica decides the same way and the database lock makes one of them act.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from enum import StrEnum


class Trigger(StrEnum):
    """What started a commit (mirrors wm.v1.CommitTrigger)."""

    CLIENT = "client"
    PENDING_TOKENS = "pending_tokens"
    MESSAGE_COUNT = "message_count"
    IDLE = "idle"


# What a threshold commit keeps when the policy does not say.
DEFAULT_AUTO_KEEP = 10


@dataclass(frozen=True, slots=True)
class AutoCommitPolicy:
    """Triggers that are None (or 0) are off; a policy with none on never commits."""

    pending_token_threshold: int | None = None
    message_count_threshold: int | None = None
    idle_timeout_seconds: float | None = None
    min_commit_interval_seconds: float | None = None
    keep_recent_count: int | None = None
    keep_recent_turns: int | None = None  # when set, threshold commits keep turns

    @property
    def active(self) -> bool:
        return bool(
            self.pending_token_threshold
            or self.message_count_threshold
            or self.idle_timeout_seconds
        )

    @property
    def keep(self) -> int:
        """Messages a threshold commit keeps (0 when it keeps turns: their size varies)."""
        if self.keep_recent_turns:
            return 0
        return DEFAULT_AUTO_KEEP if self.keep_recent_count is None else self.keep_recent_count

    def interval_passed(self, now: float, last_commit_time: float | None) -> bool:
        wait = self.min_commit_interval_seconds or 0.0
        return last_commit_time is None or now - last_commit_time >= wait


def threshold_trigger(
    policy: AutoCommitPolicy,
    *,
    pending_tokens: int,
    message_count: int,
    now: float,
    last_commit_time: float | None,
) -> Trigger | None:
    """The trigger a write just crossed, or None. Pending tokens win over the message count
    (they are what a commit relieves); a threshold commit must also have something to
    archive beyond what it keeps, or it would only make a skipped commit per write."""
    if not policy.interval_passed(now, last_commit_time) or message_count <= policy.keep:
        return None
    if policy.pending_token_threshold and pending_tokens >= policy.pending_token_threshold:
        return Trigger.PENDING_TOKENS
    if policy.message_count_threshold and message_count >= policy.message_count_threshold:
        return Trigger.MESSAGE_COUNT
    return None


def idle_due(
    policy: AutoCommitPolicy,
    *,
    message_count: int,
    last_add_time: float | None,
    now: float,
    last_commit_time: float | None,
) -> bool:
    """Whether an idle session must be committed whole: it has live messages, none arrived
    for the idle timeout, and the minimum interval since its last commit has passed."""
    idle = policy.idle_timeout_seconds
    if not idle or message_count <= 0 or last_add_time is None:
        return False
    return now - last_add_time >= idle and policy.interval_passed(now, last_commit_time)


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """A session's configuration, resolved when the session is created (the server's
    default under what the request set) and changed only by UpdateSession. None: not set
    anywhere, the server's behaviour applies."""

    auto_commit: AutoCommitPolicy = AutoCommitPolicy()
    memory_extraction: bool | None = None
    tool_output_inline_chars: int | None = None
    provider: str | None = None
    model: str | None = None

    @property
    def initial_keep(self) -> int:
        """The keep window a session counts pending tokens with before its first commit: the
        one its auto-commit policy will use, so that the threshold means what that commit
        archives (no policy: 0, every live message counts)."""
        return self.auto_commit.keep if self.auto_commit.active else 0

    def to_json(self) -> str:
        """Only what is set, in a stable order: the stored form."""
        policy = {k: v for k, v in asdict(self.auto_commit).items() if v is not None}
        top = {k: v for k, v in asdict(self).items() if k != "auto_commit" and v is not None}
        return json.dumps({"auto_commit": policy, **top} if policy else top, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> SessionSettings:
        return _settings_from_json(text)


@functools.lru_cache(maxsize=1024)
def _settings_from_json(text: str) -> SessionSettings:
    """Sessions share a handful of configurations, and every session read decodes one."""
    data = json.loads(text) if text else {}
    policy = AutoCommitPolicy(**data.pop("auto_commit", {}))
    return SessionSettings(auto_commit=policy, **data)
