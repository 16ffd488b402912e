"""Giving the C heap's free pages back to the system after a large build.

Why: building an owner's 100,000 memories for recall reads them a page at a time (rows as
Python objects, their vectors as bytes, numpy temporaries), and glibc's malloc keeps most of
what those freed: after its first large free it raises its mmap threshold (up to 32 MB), so
later arrays of a few MB come from the heap and its per-thread arenas, which it only shrinks
from the top. Measured in process (bench/memory_search_bench.py's 100,000 memories): RSS 354
MB after the build, 278 MB after ``malloc_trim(0)``, which took 9 ms and stayed there over the
next 50 searches. So a large build ends with a trim. Elsewhere than glibc there is no
``malloc_trim`` and this does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

_trim: Callable[[int], int] | None = getattr(ctypes.CDLL(None), "malloc_trim", None)


def release() -> None:
    """Return the free pages of every malloc arena to the system (glibc; else nothing)."""
    if _trim is not None:
        _trim(0)
