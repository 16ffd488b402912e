"""What the server knows about each provider's models: their context windows.

Why a table: Phase 2 will bound its input by the model's context window, and a model whose
window is unknown cannot be bounded safely. So a model that matches no entry is refused at
start (or when a session names it) unless its window is given explicitly, instead of
failing commits later with "prompt too long".

Entries match a model name exactly or as a prefix followed by ``-`` (dated snapshots such as
``gpt-4o-2024-08-06`` share their family's window). The longest matching entry wins.
Figures are input+output token windows as the vendors document them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

CONTEXT_WINDOWS: Final[Mapping[str, Mapping[str, int]]] = {
    "openai": {
        "gpt-5": 400_000,
        "gpt-5-mini": 400_000,
        "gpt-5-nano": 400_000,
        "gpt-4.1": 1_047_576,
        "gpt-4.1-mini": 1_047_576,
        "gpt-4.1-nano": 1_047_576,
        "gpt-4o": 128_000,
        "gpt-4o-mini": 128_000,
        "gpt-4-turbo": 128_000,
        "gpt-3.5-turbo": 16_385,
        "o1": 200_000,
        "o3": 200_000,
        "o3-mini": 200_000,
        "o4-mini": 200_000,
    },
    # Every current Claude model has a 200K window (1M only behind a beta header).
    "anthropic": {"claude": 200_000},
}


def known_context_window(provider: str, model: str) -> int | None:
    """The context window of ``model`` from the table, or None when no entry matches."""
    table = CONTEXT_WINDOWS.get(provider, {})
    matches = [name for name in table if model == name or model.startswith(name + "-")]
    return table[max(matches, key=len)] if matches else None
