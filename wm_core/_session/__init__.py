"""The session rules: window accounting, the commit split, when a session commits itself, context assembly, the abstract.

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
from wm_core._session.config import (
    DEFAULT_AUTO_KEEP,
    AutoCommitPolicy,
    SessionSettings,
    Trigger,
    idle_due,
    threshold_trigger,
)
from wm_core._session.split import NeedRows, SplitRow, split_boundary
from wm_core._session.window import pending_delta, rebuild_rule

__all__ = [
    "DEFAULT_AUTO_KEEP",
    "AssembledContext",
    "AutoCommitPolicy",
    "Budget",
    "NeedRows",
    "SessionSettings",
    "SplitRow",
    "Trigger",
    "abstract_of",
    "anthropic_json",
    "assemble",
    "idle_due",
    "pending_delta",
    "plan_budget",
    "rebuild_rule",
    "split_boundary",
    "threshold_trigger",
    "trim_working_memory",
]
