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
from wm_core.sizing import exceeds_tokens

SENTINEL: Final = (
    "⚠️ [CONSOLIDATION REQUIRED: this section is over twice its size limit. Rewrite it as one "
    "consolidating UPDATE (group facts by topic, keep names, dates and exact values) before "
    "any new fact can be added.]"
)
_SENTINEL_MARK: Final = "[CONSOLIDATION REQUIRED:"

# The reference's anchor rules: dates, number phrases and decision words (case-insensitive),
# capitalised words (case-sensitive). They are applied to the lower-cased text where case does
# not matter, and written to start with a literal or a single character class so that the regex
# engine can skip ahead instead of trying every position: these run twice per Key Facts UPDATE.
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_UNITS = (
    "years?|months?|weeks?|days?|kids?|children|hours?|miles?|times?|sessions?|rounds?|"
    "visits?|dollars?|euros?|pounds?|bedrooms?|paintings?|people|persons?"
)
# "\b" before a digit is written as a lookbehind after it, so the pattern starts with [0-9].
_DATES = re.compile(
    r"[0-9](?<!\w[0-9])(?:[0-9]{3}-[0-9]{2}-[0-9]{2}\b"
    rf"|[0-9]?\s+(?:{_MONTHS})\s+[0-9]{{4}}\b)"
)
_NUMBER_PHRASES = re.compile(rf"[0-9](?<!\w[0-9])[0-9]*\s+(?:{_UNITS}|am|pm)\b|\$[0-9][0-9,]*")
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
    anchors.update(_DATES.findall(lowered))
    anchors.update(_NUMBER_PHRASES.findall(lowered))
    for word, pattern in _DECISION_WORDS:
        if word in lowered and pattern.search(lowered):
            anchors.add(word)
    return anchors


def _is_sentinel(text: str) -> bool:
    return _SENTINEL_MARK in text


def _without_sentinel(text: str) -> str:
    if not _is_sentinel(text):
        return text
    return "\n".join(line for line in text.split("\n") if not _is_sentinel(line))


def guard_key_facts(op: SectionOp, old: str) -> Verdict | None:
    if op.kind == OpKind.KEEP:
        return None
    old_items = bullet_items(old)
    count = len(old_items)
    emergency = count > EMERGENCY_BULLETS or exceeds_tokens(old, EMERGENCY_TOKENS)
    oversized = emergency or count > BULLET_THRESHOLD or exceeds_tokens(old, TOKEN_THRESHOLD)
    if op.kind == OpKind.APPEND:
        if not oversized:
            return None
        return _throttle(op.items, old, old_items, emergency)
    return _judge_consolidation(op.content.strip(), old, old_items, emergency)


def _throttle(
    items: tuple[str, ...], old: str, old_items: list[str], emergency: bool
) -> Verdict | None:
    fresh, duplicates = fresh_items(items, old_items)
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
    fresh, duplicates = fresh_items(new_items, old_items)
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
