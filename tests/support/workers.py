"""Which process of a pytest-xdist run this is."""

from __future__ import annotations

import pytest


def is_xdist_worker(config: pytest.Config) -> bool:
    """True in a worker; False in the controller and in a run without xdist (the processes
    that own the session's start and end)."""
    return hasattr(config, "workerinput")
