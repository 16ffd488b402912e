"""Key Facts & Decisions: consolidation only when it keeps the facts, and no unbounded growth.

Two layers judge a rewrite: it must keep at least 15 % of the bullets (volume) and 70 % of the
lexical anchors (dates, quantities, decision words, capitalised names) of the old section. A
rejected rewrite is not thrown away: its new items are salvaged as an APPEND. Above the size
thresholds APPENDs are throttled to 5 fresh items; above twice the thresholds new facts are
refused and one constant sentinel asks the model to consolidate. Refused items are reported in
the decision, never silently lost.

Our deviations from the reference: duplicates are whole items (``items.fresh_items``), and the
sentinel itself is left out of the volume and anchor measures, so that a consolidation is not
required to reproduce the engine's own warning.
"""

from __future__ import annotations

import re
from typing import Final

from wm_core.guards.verdict import Verdict
from wm_core.items import bullet_items, fresh_items
from wm_core.limits import (
    BULLET_THRESHOLD,
    EMERGENCY_BULLETS,
    EMERGENCY_TOKENS,
    MIN_ANCHOR_COVERAGE,
    MIN_BULLET_RATIO,
    OVERSIZED_APPEND_CAP,
    TOKEN_THRESHOLD,
)
from wm_core.ops import KEEP, OpKind, SectionOp
from wm_core.sizing import TokenSize

SENTINEL: Final = (
    "⚠️ [CONSOLIDATION REQUIRED: this section is over twice its size limit. Rewrite it as one "
    "consolidating UPDATE (group facts by topic, keep names, dates and exact values) before "
    "any new fact can be added.]"
)
_SENTINEL_MARK: Final = "[CONSOLIDATION REQUIRED:"

# The reference's anchor rules: dates, number phrases and decision words (case-insensitive),
# capitalised words (case-sensitive). Case-insensitive rules run on the lower-cased text, and
# every pattern starts with a literal or a single character class ("\b" before a digit is
# written as a lookbehind after it) so the regex engine skips ahead instead of trying every
# position. Dates and number phrases share one scan. The reference scans them separately, so
# it also finds a quantity that starts inside a date ("2024-05-10 am", "5 june 2024 years");
# those are looked up with cheap patterns. An amount directly followed by a date
# ("$2024-01-05") would make the shared scan drift from the reference's, so that rare text
# gets the two separate scans.
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_MONTH_NAMES: Final = frozenset(_MONTHS.split("|"))
_UNITS = (
    "years?|months?|weeks?|days?|kids?|children|hours?|miles?|times?|sessions?|rounds?|"
    "visits?|dollars?|euros?|pounds?|bedrooms?|paintings?|people|persons?|am|pm"
)
_AFTER_DIGIT = r"(?<!\w[0-9])(?<=[0-9])"  # "\b" before the digit just consumed
_DATE = (
    rf"{_AFTER_DIGIT}(?:[0-9]{{3}}-[0-9]{{2}}-[0-9]{{2}}\b|[0-9]?\s+(?:{_MONTHS})\s+[0-9]{{4}}\b)"
)
_QUANTITY = rf"{_AFTER_DIGIT}[0-9]*\s+(?:{_UNITS})\b"
_AMOUNT = r"(?<=\$)[0-9][0-9,]*"
_DATES_AND_NUMBERS = re.compile(rf"[0-9$](?:{_AMOUNT}|{_DATE}|{_QUANTITY})")
_DATES = re.compile(rf"[0-9]{_DATE}")
_NUMBERS = re.compile(rf"[0-9$](?:{_AMOUNT}|{_QUANTITY})")
_QUANTITY_AFTER_DASH = re.compile(rf"-([0-9]{_QUANTITY})")
_QUANTITY_AT = re.compile(rf"[0-9]{_QUANTITY}")
_AMOUNT_THEN_DATE = re.compile(rf"\$[0-9,]*[0-9](?:-|\s+(?:{_MONTHS})\b)")
_DECISION_WORDS: Final = tuple(
    (word, re.compile(rf"{word}(?<!\w{word})(?!\w)"))
    for word in ("because", "decided", "chose", "committed", "agreed", "resolved")
)
_CAPITALIZED = re.compile(r"[A-Z](?<!\w[A-Z])[a-zA-Z]{2,}\b")

_ANCHOR_STOPWORD_TEXT: Final = (
    "the a an and or of to in on for with by at from is are was were has have had been be "
    "will would could should may might shall this that these those not no but if then so as "
    "it its they their them she her he him his we our us you your who which what when where "
    "how why all each every both few more most other some such than too very also just about "
    "after before between into through during again further once here there over under out "
    "up down off own same only new old key facts decisions session working memory"
)
ANCHOR_STOPWORDS: Final = frozenset(_ANCHOR_STOPWORD_TEXT.split())


def lexical_anchors(text: str) -> set[str]:
    """The details a consolidation must keep: dates, quantities, decision words, names."""
    lowered = text.lower()
    anchors = set(map(str.lower, _CAPITALIZED.findall(text)))
    anchors -= ANCHOR_STOPWORDS
    if "$" in lowered and _AMOUNT_THEN_DATE.search(lowered):
        anchors.update(_DATES.findall(lowered))
        anchors.update(_NUMBERS.findall(lowered))
    else:
        found = _DATES_AND_NUMBERS.findall(lowered)
        anchors.update(found)
        if "-" in lowered:
            anchors.update(_QUANTITY_AFTER_DASH.findall(lowered))
        for date in found:
            words = date.split()
            if len(words) == 3 and words[1] in _MONTH_NAMES:
                position = lowered.find(date)
                while position != -1:
                    quantity = _QUANTITY_AT.match(lowered, position + len(date) - 4)
                    if quantity is not None:
                        anchors.add(quantity.group())
                    position = lowered.find(date, position + 1)
    for word, pattern in _DECISION_WORDS:
        if word in lowered and pattern.search(lowered):
            anchors.add(word)
    return anchors


def _is_sentinel(text: str) -> bool:
    return _SENTINEL_MARK in text


def _without_sentinel(text: str) -> str:
    return "\n".join(line for line in text.split("\n") if not _is_sentinel(line))


def guard_key_facts(op: SectionOp, old: str) -> Verdict | None:
    if op.kind == OpKind.KEEP:
        return None
    old_items = bullet_items(old)
    count = len(old_items)
    size = TokenSize(old)
    emergency = count > EMERGENCY_BULLETS or size.exceeds(EMERGENCY_TOKENS)
    oversized = emergency or count > BULLET_THRESHOLD or size.exceeds(TOKEN_THRESHOLD)
    if op.kind == OpKind.APPEND:
        if not oversized:
            return None
        return _throttle(op.items, old, old_items, emergency)
    return _judge_consolidation(op.content.strip(), old, old_items, emergency)


def _throttle(
    items: tuple[str, ...], old: str, old_items: list[str], emergency: bool
) -> Verdict | None:
    fresh, duplicates = fresh_items(items, old)
    size = f"{len(old_items)} bullets"
    if emergency:
        if _is_sentinel(old):
            return Verdict(
                KEEP,
                f"Key Facts at emergency size ({size}), consolidation already requested: "
                f"{len(fresh)} new fact(s) refused",
                dropped=tuple(duplicates),
                refused=tuple(fresh),
            )
        return Verdict(
            SectionOp(OpKind.APPEND, items=(SENTINEL,)),
            f"Key Facts at emergency size ({size}): consolidation requested, "
            f"{len(fresh)} new fact(s) refused",
            dropped=tuple(duplicates),
            refused=tuple(fresh),
            deduplicated=True,
        )
    accepted = fresh[:OVERSIZED_APPEND_CAP]
    refused = fresh[OVERSIZED_APPEND_CAP:]
    if not duplicates and not refused:
        return None
    reason = (
        f"Key Facts oversized ({size}): {len(accepted)} fresh fact(s) accepted (cap "
        f"{OVERSIZED_APPEND_CAP}), {len(refused)} refused, {len(duplicates)} duplicate(s)"
    )
    op = SectionOp(OpKind.APPEND, items=tuple(accepted)) if accepted else KEEP
    return Verdict(op, reason, dropped=tuple(duplicates), refused=tuple(refused), deduplicated=True)


def _judge_consolidation(
    new: str, old: str, old_items: list[str], emergency: bool
) -> Verdict | None:
    basis, basis_items = old, old_items
    if _is_sentinel(old):  # the engine's own warning is not a fact to keep
        basis = _without_sentinel(old)
        basis_items = [item for item in old_items if not _is_sentinel(item)]
    if not basis_items:
        return None
    new_items = bullet_items(new)
    ratio = len(new_items) / len(basis_items)
    if ratio < MIN_BULLET_RATIO:
        reason = (
            f"consolidation rejected: keeps {len(new_items)} of {len(basis_items)} bullets "
            f"({ratio:.0%}, minimum {MIN_BULLET_RATIO:.0%})"
        )
    else:
        old_anchors = lexical_anchors(basis)
        if not old_anchors:
            return None
        kept = old_anchors & lexical_anchors(new)
        coverage = len(kept) / len(old_anchors)
        if coverage >= MIN_ANCHOR_COVERAGE:
            return None
        lost = sorted(old_anchors - kept)
        shown = ", ".join(lost[:10]) + (", ..." if len(lost) > 10 else "")
        reason = (
            f"consolidation rejected: keeps {coverage:.0%} of the anchors (minimum "
            f"{MIN_ANCHOR_COVERAGE:.0%}); lost: {shown}"
        )
    fresh, duplicates = fresh_items(new_items, old)
    if emergency:
        return Verdict(
            KEEP,
            reason + "; at emergency size nothing is salvaged",
            dropped=tuple(duplicates),
            refused=tuple(fresh),
        )
    if fresh:
        return Verdict(
            SectionOp(OpKind.APPEND, items=tuple(fresh)),
            reason + f"; {len(fresh)} new item(s) salvaged as APPEND",
            dropped=tuple(duplicates),
            deduplicated=True,
        )
    return Verdict(KEEP, reason + "; nothing new to salvage", dropped=tuple(duplicates))
