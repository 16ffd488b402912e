"""The Phase 2 worker's settings (from ``config.Settings``, made by the composition root)."""

from __future__ import annotations

from dataclasses import dataclass, field

from wm_core import DEFAULT_LIMITS, MAX_PENDING_TOKENS, WmLimits
from wm_server.breaker import BreakerSettings
from wm_server.phase2.chunked import InputBudget


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 4
    max_attempts: int = 3
    retry_base_delay: float = 1.0
    lease_seconds: float = 60.0
    poll_seconds: float = 1.0
    max_wait_seconds: float = 3600.0  # how long a job waits out a provider outage
    retry_max_delay: float = 300.0  # the backoff's ceiling
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    input: InputBudget = field(default_factory=InputBudget)
    limits: WmLimits = DEFAULT_LIMITS
    max_pending_items: int = 30  # refused items a session keeps for the next update
    max_pending_tokens: int = MAX_PENDING_TOKENS  # what they may take in all
    max_chunks: int = 16  # chunks of one commit's input before its messages are cut
    memory_extraction: bool = True  # the server's switch (sessions can turn it off too)
    # While model calls go on, their events are written at a request at most this often
    # (the first request of an attempt always): a watcher sees a long commit progress, and
    # a commit whose calls answer sooner writes three transactions (``phase2/store.py``).
    progress_seconds: float = 1.0
