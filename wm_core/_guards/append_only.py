"""Errors & Corrections is a history: it only grows.

An UPDATE is read as "here is the section with my additions": the items that are not already
there (whole-item comparison) are appended and nothing is removed. Items the UPDATE merely
repeats are reported as dropped only when they are not a verbatim copy of the old body.
"""

from __future__ import annotations

from wm_core._document.items import bullet_items, fresh_items
from wm_core._guards.verdict import Verdict
from wm_core._ops.section_ops import KEEP, OpKind, SectionOp


def guard_append_only(op: SectionOp, old: str) -> Verdict | None:
    if op.kind is not OpKind.UPDATE:
        return None
    new = op.content.strip()
    # The usual shape is "the section as it was, plus new lines": only the tail is new.
    repeated = new.startswith(old) and new[len(old) : len(old) + 1] in ("", "\n")
    fresh, duplicates = fresh_items(bullet_items(new[len(old) :] if repeated else new), old)
    if not fresh:
        return Verdict(
            KEEP,
            "append-only section: the UPDATE adds nothing new, section kept",
            dropped=tuple(duplicates),
        )
    return Verdict(
        SectionOp(OpKind.APPEND, items=tuple(fresh)),
        f"append-only section: UPDATE turned into an APPEND of {len(fresh)} new item(s)",
        dropped=tuple(duplicates),
        deduplicated=True,
    )
