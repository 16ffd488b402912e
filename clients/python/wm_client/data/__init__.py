"""The package data, each file the only copy in the repository.

Why here and nowhere else: an installed ``wm-client`` has no source tree, so the files it needs
at run time (the service config its channels load, the conversation ``wm demo`` replays) must
live in the package; every other reader (the server's tests, the Node client, benchmarks)
reads them from here. ``tests/clients/test_client_package.py`` fails when a second copy of
either appears anywhere in the repository.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

SERVICE_CONFIG_FILE = "wm_grpc_service_config.json"
DEMO_CONVERSATION_FILE = "coding_session.jsonl"
PACKAGED_FILES = (SERVICE_CONFIG_FILE, DEMO_CONVERSATION_FILE)


def packaged(name: str) -> Traversable:
    """One of :data:`PACKAGED_FILES`, wherever the package is installed."""
    if name not in PACKAGED_FILES:
        raise KeyError(f"{name!r} is not data of wm_client (one of {PACKAGED_FILES})")
    return resources.files(__name__) / name
