"""Fixtures shared by every test layer."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never pick up a developer's real API key or server settings from the shell."""
    for name in list(os.environ):
        if name.startswith("WM_") or name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name, raising=False)
