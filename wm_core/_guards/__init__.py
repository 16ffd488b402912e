"""The section guards, and which section each one protects.

A guard sees a well-formed op and the non-empty old body, and returns a :class:`Verdict` when
it intervenes (None otherwise). Current State and Task & Goals are volatile: no guard.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Final

from wm_core._decisions import Guard
from wm_core._document.sections import (
    ERRORS_CORRECTIONS,
    FILES_CONTEXT,
    KEY_FACTS,
    OPEN_ISSUES,
    SESSION_TITLE,
)
from wm_core._guards.append_only import guard_append_only
from wm_core._guards.files import guard_files
from wm_core._guards.key_facts import guard_key_facts
from wm_core._guards.open_issues import guard_open_issues
from wm_core._guards.title import guard_title
from wm_core._guards.verdict import Verdict
from wm_core._ops.section_ops import SectionOp

GuardFunction = Callable[[SectionOp, str], Verdict | None]

GUARDS: Final[MappingProxyType[str, tuple[Guard, GuardFunction]]] = MappingProxyType(
    {
        SESSION_TITLE: (Guard.TITLE, guard_title),
        KEY_FACTS: (Guard.KEY_FACTS, guard_key_facts),
        FILES_CONTEXT: (Guard.FILES, guard_files),
        ERRORS_CORRECTIONS: (Guard.APPEND_ONLY, guard_append_only),
        OPEN_ISSUES: (Guard.OPEN_ISSUES, guard_open_issues),
    }
)

__all__ = ["GUARDS", "GuardFunction", "Verdict"]
