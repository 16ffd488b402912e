"""Open Issues: an issue leaves the list by being marked resolved, not by being forgotten.

"Kept" means the first 40 characters of the item (without the restore marker) still appear in
the new content, so "[resolved] " prefixes and annotations count as keeping it. An UPDATE that
drops an unresolved item gets it back with one visible marker, on every round: the reference
restores an item once and lets a second drop through silently, so a model that keeps
forgetting an issue loses it. Here an item goes only when the old list already shows it as
resolved ("[resolved]", "resolved:", "done", a check mark, ~~strikethrough~~); an item
dropped again is restored again, with its marker not stacked.
"""

from __future__ import annotations

import re
from typing import Final

from wm_core._document.items import bullet_items
from wm_core._guards.verdict import Verdict
from wm_core._ops.section_ops import OpKind, SectionOp
from wm_core._tokens.limits import OPEN_ISSUE_SNIPPET_CHARS

RESTORE_MARKER: Final = "[silently dropped, restored]"
_RESTORED_PREFIX: Final = f"- {RESTORE_MARKER} "

_STATUS_WORDS = r"resolved|done|fixed|closed|answered|solved|obsolete|won'?t fix|wontfix"
# How an item says it is settled: a status tag anywhere ("[resolved]", "(done)"), a status word
# opening the item ("Resolved: ...", "DONE - ...") or closing it ("... \u2014 resolved"), a check
# mark or a checked box, or text struck through from the start. "unresolved", "(fixed in
# staging only)" and "not done yet" are not settled.
_STATUS_TAG = re.compile(rf"[\[(]\s*(?:{_STATUS_WORDS})\s*[\])]", re.IGNORECASE)
_STATUS_LEAD = re.compile(rf"(?:{_STATUS_WORDS})\b\s*[:\-\u2013\u2014.!]", re.IGNORECASE)
_STATUS_TAIL = re.compile(rf"[\-\u2013\u2014:]\s*(?:{_STATUS_WORDS})\s*[.!]?$", re.IGNORECASE)
_SETTLED_START: Final = ("~~", "\u2705", "\u2714", "\u2611", "[x]", "[X]")
_SETTLED_END: Final = ("\u2705", "\u2714", "\u2611", "\u2714\ufe0f")
# The rules match case-insensitively, which in Unicode also admits look-alikes ("ſolved"); they
# apply only when the item opens with the first letter of a status word or a mark, a tag only
# when a space or such a letter follows its bracket, and a closing status word only when the
# item ends with the last letter of one (or "." or "!") and within its last characters.
_STATUS_INITIALS: Final = frozenset("rdfcasowRDFCASOW~[✅✔☑")
_TAG_SECOND: Final = frozenset("rdfcasowRDFCASOW")
_STATUS_FINALS: Final = frozenset("dexDEX.!")
_TAIL_CHARS: Final = 16
_MARKUP = "_* `"
_MARKER_AND_SPACE = re.compile(re.escape(RESTORE_MARKER) + "[ \t]*")


def without_marker(item: str) -> str:
    """The item as the model wrote it, before any restore marker was put in front of it."""
    if RESTORE_MARKER not in item:
        return item
    return _MARKER_AND_SPACE.sub("", item).strip()


def _snippet(bare: str) -> str:
    return bare[:OPEN_ISSUE_SNIPPET_CHARS].lower().strip(_MARKUP).strip()


def issue_snippet(item: str) -> str:
    """The part of an old item that must still appear in a rewrite for it to count as kept."""
    return _snippet(without_marker(item))


def is_resolved(item: str) -> bool:
    """Whether an item is marked as settled, and so may leave the list."""
    return bool(settled([without_marker(item)]))


def _settled_by_its_ends(text: str) -> bool:
    if text[:1] in _STATUS_INITIALS and (
        text.startswith(_SETTLED_START) or _STATUS_LEAD.match(text) is not None
    ):
        return True
    return text.endswith(_SETTLED_END) or (
        text[-1:] in _STATUS_FINALS and _STATUS_TAIL.search(text[-_TAIL_CHARS:]) is not None
    )


def settled(items: list[str]) -> set[int]:
    """The positions of the items (without restore markers) that are marked as settled.

    The status tags are searched for in all the items joined by newlines, so a tag may open at
    the end of one item and close in the next; it then settles the item it opens in.
    """
    texts = [item.strip(_MARKUP) for item in items]
    found = {index for index, text in enumerate(texts) if _settled_by_its_ends(text)}
    joined = "\n".join(texts)
    for tag in _STATUS_TAG.finditer(joined):
        second = joined[tag.start() + 1]
        if second.isspace() or second in _TAG_SECOND:
            found.add(joined.count("\n", 0, tag.start()))
    return found


def guard_open_issues(op: SectionOp, old: str) -> Verdict | None:
    if op.kind is not OpKind.UPDATE:
        return None
    new = op.content.strip()
    new_lower = new.lower()
    missing: list[str] = []  # without their markers
    again: list[bool] = []  # restored before
    # A rewrite usually keeps the items in order: each snippet is looked for after the previous
    # one first, so the whole new text is not searched once per item.
    hint = 0
    for item in bullet_items(old):
        bare = without_marker(item)
        snippet = _snippet(bare)
        if not snippet:
            continue
        found = new_lower.find(snippet, hint)
        if found == -1 and hint:  # then only an occurrence starting before the hint is left
            found = new_lower.find(snippet, 0, hint + len(snippet) - 1)
        if found == -1:
            missing.append(bare)
            again.append(RESTORE_MARKER in item)
        else:
            hint = found + len(snippet)
    if not missing:
        return None
    done = settled(missing)
    if done:
        missing = [item for index, item in enumerate(missing) if index not in done]
        again = [flag for index, flag in enumerate(again) if index not in done]
        if not missing:
            return None  # only settled issues left the list
    restored = "\n".join(_RESTORED_PREFIX + item for item in missing)  # "- <marker> <item>"
    content = (new + ("\n" if new else "") + restored).strip()
    repeated = sum(again)
    repeat = f" ({repeated} of them dropped again after an earlier restore)" if repeated else ""
    return Verdict(
        SectionOp(OpKind.UPDATE, content=content),
        f"{len(missing)} unresolved issue(s) dropped without being marked resolved; "
        f"restored{repeat}",
        restored=tuple(missing),
    )
