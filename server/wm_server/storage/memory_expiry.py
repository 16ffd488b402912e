"""When a memory expires (issue 35), written once: at its ``expire_time``, else at its
creation plus its type's retention (``WM_MEMORY_RETENTION_DAYS``), else never. An expired
memory is not returned by any read from that moment (``MemoryRepository._where`` adds
``alive``), and the maintenance loop deletes it (as DeleteMemory) at its next round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

Retention = tuple[tuple[str, float], ...]  # (memory type, seconds), a type at most once


def expiry(retention: Retention, alias: str = "m") -> tuple[str, dict[str, Any]]:
    """The SQL expression of when a memory expires (NULL: never) and its parameters."""
    if not retention:
        return f"{alias}.expire_time", {}
    cases = " ".join(
        f"WHEN :keep_type{i} THEN {alias}.create_time + :keep_seconds{i}"
        for i in range(len(retention))
    )
    params: dict[str, Any] = {}
    for i, (kind, seconds) in enumerate(retention):
        params[f"keep_type{i}"] = kind
        params[f"keep_seconds{i}"] = seconds
    return f"COALESCE({alias}.expire_time, CASE {alias}.type {cases} END)", params


def expires_at(
    expire_time: float | None, create_time: float, kind: str, retention: Retention
) -> float | None:
    """``expiry`` for one memory in hand (the same rule, for a row already read)."""
    if expire_time is not None:
        return expire_time
    keep = dict(retention).get(kind)
    return None if keep is None else create_time + keep


def alive_mask(
    at: float,
    retention: Retention,
    expire_times: np.ndarray,
    create_times: np.ndarray,
    kinds: np.ndarray,
    names: Sequence[str],
) -> np.ndarray:
    """``alive`` for many memories held in arrays (expire_time NaN for NULL; ``kinds`` the
    index of each memory's type in ``names``): True for those not expired at ``at``."""
    when = expire_times
    if retention:
        keep = dict(retention)
        seconds = np.array([keep.get(n, np.nan) for n in names] or [np.nan], dtype=np.float64)
        when = np.where(np.isnan(expire_times), create_times + seconds[kinds], expire_times)
    return np.asarray(~(when <= at))  # NaN (never) compares false


def alive(at: float, retention: Retention, alias: str = "m") -> tuple[str, dict[str, Any]]:
    """A condition true for the memories not expired at ``at``."""
    when, params = expiry(retention, alias)
    return f"({when} IS NULL OR {when} > :alive_at)", {**params, "alive_at": at}


def retention_of(days: Mapping[str, float]) -> Retention:
    """Per-type retention in days as the (type, seconds) pairs the statements take."""
    return tuple(sorted((kind, value * 86_400.0) for kind, value in days.items() if value > 0))
