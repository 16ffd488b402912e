"""The session rules: window accounting, the commit split, context assembly, the abstract.

They decide what a session's counters say, what a commit archives and what the model sees
next, so the server's stores and services must all apply them the same way; written here,
pure, they are tested without a database. Import them from the ``wm_core`` facade.
"""

from __future__ import annotations

from wm_core._session.abstract import abstract_of
from wm_core._session.assembly import (
    AssembledContext,
    Budget,
    anthropic_json,
    assemble,
    plan_budget,
    trim_working_memory,
)
from wm_core._session.chunks import chunk_messages, cut_message
from wm_core._session.split import NeedRows, SplitRow, split_boundary
from wm_core._session.window import pending_delta, rebuild_rule

__all__ = [
    "AssembledContext",
    "Budget",
    "NeedRows",
    "SplitRow",
    "abstract_of",
    "anthropic_json",
    "assemble",
    "chunk_messages",
    "cut_message",
    "pending_delta",
    "plan_budget",
    "rebuild_rule",
    "split_boundary",
    "trim_working_memory",
]
