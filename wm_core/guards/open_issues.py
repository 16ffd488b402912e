"""Open Issues: an issue leaves the list by being marked resolved, not by being forgotten.

An UPDATE that drops an old item gets it back, once, with a visible marker; an item that
already carries the marker may then go. "Kept" means the first 40 characters of the item still
appear in the new content, so "[resolved] " prefixes and annotations count as keeping it.
"""

from __future__ import annotations

from typing import Final

from wm_core.guards.verdict import Verdict
from wm_core.items import bullet_items
from wm_core.limits import OPEN_ISSUE_SNIPPET_CHARS
from wm_core.ops import OpKind, SectionOp

RESTORE_MARKER: Final = "[silently dropped, restored]"


def issue_snippet(item: str) -> str:
    """The part of an old item that must still appear in a rewrite for it to count as kept."""
    return item[:OPEN_ISSUE_SNIPPET_CHARS].lower().strip("_* `").strip()


def guard_open_issues(op: SectionOp, old: str) -> Verdict | None:
    if op.kind != OpKind.UPDATE:
        return None
    new = op.content.strip()
    new_lower = new.lower()
    dropped: list[str] = []
    for item in bullet_items(old):
        if RESTORE_MARKER in item:
            continue  # restored once already
        snippet = issue_snippet(item)
        if snippet and snippet not in new_lower:
            dropped.append(item)
    if not dropped:
        return None
    restored = "\n".join(f"- {RESTORE_MARKER} {item}" for item in dropped)
    content = (new + ("\n" if new else "") + restored).strip()
    return Verdict(
        SectionOp(OpKind.UPDATE, content=content),
        f"{len(dropped)} issue(s) dropped without being marked resolved; restored once",
        restored=tuple(dropped),
    )
