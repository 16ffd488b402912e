"""Running a use case again when the database aborted its transaction to resolve a conflict.

PostgreSQL may pick a transaction as a deadlock victim (two writers locking the same rows in
different orders: a session delete against a finishing Phase 2 job). Its unit of work left
nothing behind, so the whole use case runs again, a few times, before the caller sees
ABORTED with RetryInfo (``errors.StorageConflict``): re-sending that request is safe. The
clients' service config retries UNAVAILABLE only, since ABORTED also answers a working-memory
VERSION_MISMATCH, which a re-sent request would meet again (it needs a fresh read first).
A use case may only publish or wake anything after its unit of work committed.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from wm_server.errors import StorageConflict

P = ParamSpec("P")
T = TypeVar("T")
ATTEMPTS = 5


def retry_conflicts(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        for attempt in range(1, ATTEMPTS):
            try:
                return await fn(*args, **kwargs)
            except StorageConflict:
                await asyncio.sleep(random.uniform(0.005, 0.02) * attempt)
        return await fn(*args, **kwargs)

    return wrapper
