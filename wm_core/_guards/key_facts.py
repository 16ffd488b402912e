"""Key Facts & Decisions: consolidation only when it keeps the facts, and no unbounded growth.

Two layers judge a rewrite: it must keep at least 15 % of the bullets (volume) and 70 % of the
lexical anchors (dates, quantities, decision words, capitalised names) of the old section. A
rejected rewrite is not thrown away: its items that bring details the section does not hold
yet are salvaged as an APPEND. Above the size thresholds APPENDs are throttled to 5 fresh
items; above twice the thresholds one constant sentinel asks the model to consolidate, and
only items with new details get in (5 at most per op). Refused items are reported in the
decision, never silently lost.

Our deviations from the reference:

- duplicates are whole items (``fresh_items``);
- the sentinel itself is left out of the volume and anchor measures, so that a consolidation
  is not required to reproduce the engine's own warning;
- a rejected consolidation salvages only items with new details (``new_details``). The
  reference salvages every item it cannot find in the old text, so the vague summary lines
  of a failed consolidation ("Team: ... (and 3 related decisions)") are appended as facts,
  a dozen per commit, and push the section to the emergency level within two commits;
- at the emergency level, the APPEND that finds the section there lets in its items with new
  details (capped) along with the sentinel; from then on, while the sentinel stands, every new
  fact is refused until a consolidation passes, as in the reference. The reference loses
  those facts; here each refused fact is recorded in the decision and kept as a pending item
  of the session (``wm_core._guards.pending``), shown to the model in every update prompt and
  to the long-term memory extraction, until the working memory holds it. So a model that
  never consolidates cannot make the section grow past its emergency size plus one capped
  APPEND (issue 36: 200 APPENDs used to leave 202 items), and loses nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from wm_core._document.items import bullet_items, count_items, fresh_items
from wm_core._guards.verdict import Verdict
from wm_core._ops.section_ops import KEEP, OpKind, SectionOp
from wm_core._tokens.estimate import exceeds_tokens
from wm_core._tokens.limits import (
    BULLET_THRESHOLD,
    EMERGENCY_BULLETS,
    EMERGENCY_TOKENS,
    MIN_ANCHOR_COVERAGE,
    MIN_BULLET_RATIO,
    OVERSIZED_APPEND_CAP,
    TOKEN_THRESHOLD,
)

SENTINEL: Final = (
    "⚠️ [CONSOLIDATION REQUIRED: this section is over twice its size limit. Rewrite it as one "
    "consolidating UPDATE (group facts by topic, keep names, dates and exact values); until "
    "then new facts are not added here: they wait as pending items.]"
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
_DIGITS: Final = "0123456789"
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
# The date and quantity branches share their leading lookbehinds: one check per digit.
_DATES_AND_NUMBERS = re.compile(
    rf"[0-9$](?:{_AMOUNT}|{_AFTER_DIGIT}(?:{_DATE.removeprefix(_AFTER_DIGIT)}|"
    rf"{_QUANTITY.removeprefix(_AFTER_DIGIT)}))"
)
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


def lexical_anchors(text: str, lowered: str | None = None) -> set[str]:
    """The details a consolidation must keep: dates, quantities, decision words, names.

    ``lowered`` is ``text.lower()``, when the caller has it already.
    """
    if lowered is None:
        lowered = text.lower()
    # Names repeat (one per fact): lower-case each distinct one once.
    anchors = {word.lower() for word in set(_CAPITALIZED.findall(text))}
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
            # Only a "5 june 2024" date ends with a digit and has neither "$" nor "-": the
            # amounts, ISO dates and quantities (most of what is found) skip the split.
            if date[-1] not in _DIGITS or date[0] == "$" or "-" in date:
                continue
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


# -- new details: what makes a salvaged or late item worth its line -----------------------------
#
# A fact is worth adding to a section that holds it not yet when it brings a detail the section
# lacks: a name, a number, a date, a path, an identifier. Words are split on whitespace and their
# edges trimmed; a word is a detail when it has a digit (a bare number needs two, "3" alone is
# too common to tell facts apart), an identifier's shape (``a/b``, ``snake_case``, ``a.py``,
# ``key=value``, ``CamelCase``) or, away from the start of a sentence, a capital letter. A
# number (also a spelled-out one) followed by a unit is a detail of its own ("500 ms" is not
# "batch 500"). A detail is new when the old section does not have that word or phrase.

_EDGE: Final = "*_`\"'()[]{}<>,;:!?.~#\u201c\u201d\u2018\u2019"
_SENTENCE_END: Final = (".", "!", "?")
_CLOSERS: Final = "*_`\"')]\u201d\u2019"
_IDENTIFIER = re.compile(r"[/\\=@_]|\w\w\.\w|\w\.\w\w|[a-z][A-Z]")
_CAMEL = re.compile(r"[a-z][A-Z]")
_NUMBER_WORD_TEXT: Final = (
    "zero one two three four five six seven eight nine ten eleven twelve fifteen twenty thirty "
    "forty fifty sixty hundred thousand million billion half dozen"
)
_NUMBER_WORDS: Final = frozenset(_NUMBER_WORD_TEXT.split())
_UNIT_TEXT: Final = (
    "ms millisecond milliseconds s sec secs second seconds min mins minute minutes h hr hrs "
    "hour hours day days week weeks month months year years quarter quarters "
    "b kb mb gb tb pb kib mib gib tib byte bytes bit bits "
    "cent cents dollar dollars euro euros pound pounds usd eur gbp k m percent % "
    "kids children miles times sessions rounds visits bedrooms paintings people persons "
    "am pm utc rows accounts users requests connections nodes pods workers replicas tables "
    "steps approvals attempts retries errors records files lines tokens cores vcpu"
)
_UNIT_WORDS: Final = frozenset(_UNIT_TEXT.split())


def _trim(word: str) -> str:
    word = word.strip(_EDGE)
    if word[-2:].lower() in ("'s", "\u2019s"):
        word = word[:-2]
    return word


_DIGIT = re.compile(r"[0-9]")
_PURE_NUMBER = re.compile(r"[0-9][0-9,.]*")


def _is_number(word: str) -> bool:
    return word in _NUMBER_WORDS or _PURE_NUMBER.fullmatch(word) is not None


def _phrases(words: list[str]) -> set[str]:
    """Number-and-unit phrases of lower-cased, trimmed words."""
    return {
        f"{words[i - 1]} {unit}"
        for i, unit in enumerate(words)
        if i and unit in _UNIT_WORDS and _is_number(words[i - 1])
    }


@dataclass(slots=True, eq=False)
class KnownDetails:
    """An old section (lower-cased), asked which details of new items it lacks.

    A detail is found with ``str.find`` and a check that it stands as a whole word there
    (trimmed the same way), rather than by splitting the old text into words: most of its
    thousands of words are never asked for. One is made per judgement and remembers what it
    was asked (the caches below), so it is not frozen.
    """

    lowered: str
    # The facts of a section share most of their words ("Decision", "ledger", "because"):
    # each distinct word is judged once per section (a rejected consolidation: 9 % faster).
    _judged: dict[tuple[str, bool], tuple[str, bool, bool]] = field(
        default_factory=dict, init=False, repr=False
    )
    # Where the last word asked for ends in ``lowered`` (see ``has``).
    _hint: int = field(default=0, init=False, repr=False)

    def has(self, word: str) -> bool:
        """Whether the old text has ``word`` (lower-cased, trimmed) as one of its words."""
        # New items usually keep the old order: searching on from the last word found, then
        # before it, finds the next item's details close by (a rejected consolidation: 8 %
        # faster). Every occurrence is still looked at before the answer is no.
        hint = self._hint
        found = self._find(word, hint, len(self.lowered))
        if found == -1 and hint:  # then only an occurrence starting before the hint is left
            found = self._find(word, 0, hint + len(word) - 1)
        if found == -1:
            return False
        self._hint = found + len(word)
        return True

    def _find(self, word: str, start: int, stop: int) -> int:
        """Where ``word`` first stands as a whole word in ``lowered[start:stop]``, or -1."""
        text = self.lowered
        end = len(text)
        start = text.find(word, start, stop)
        while start != -1:
            before = start
            while before and text[before - 1] in _EDGE:
                before -= 1
            if not before or text[before - 1].isspace():
                after = start + len(word)
                if text.startswith(("'s", "\u2019s"), after):
                    after += 2
                while after < end and text[after] in _EDGE:
                    after += 1
                if after == end or text[after].isspace():
                    return start
            start = text.find(word, start + 1, stop)
        return -1

    def new_details(self, item: str) -> list[str]:
        """The details of ``item`` (lower-cased) that the old section does not have."""
        found: list[str] = []
        lowered: list[str] = []
        initial = True
        for raw in item.split():
            judged = self._judged.get((raw, initial))
            if judged is None:
                judged = self._judged[raw, initial] = self._judge(raw, initial)
            low, new, initial = judged
            lowered.append(low)
            if new:
                found.append(low)
        if not _UNIT_WORDS.isdisjoint(lowered):
            found.extend(sorted(p for p in _phrases(lowered) if not self.has(p)))
        return found

    def _judge(self, raw: str, initial: bool) -> tuple[str, bool, bool]:
        """A word of an item: lower-cased and trimmed, whether it is a detail the old section
        lacks, and whether the word after it opens a sentence."""
        # Fast paths for the common words: plain letters, plain digits.
        if raw.isalpha():
            if raw.islower():
                return raw, False, False
            low = raw.lower()
            if initial:
                detail = not raw[1:].islower() and _CAMEL.search(raw) is not None
            else:
                detail = len(raw) >= 2 and (raw[0].isupper() or _CAMEL.search(raw) is not None)
            return low, detail and not self.has(low), False
        if raw.isdigit():
            return raw, len(raw) >= 2 and not self.has(raw), False
        word = _trim(raw)
        low = word.lower()
        new = bool(word) and _is_detail(word, initial) and not self.has(low)
        return low, new, raw.rstrip(_CLOSERS).endswith(_SENTENCE_END)


def _is_detail(word: str, initial: bool) -> bool:
    if _DIGIT.search(word) is not None:
        if _PURE_NUMBER.fullmatch(word) is None:
            return True  # "p99", "3x", "2025-03-22", "16.2-alpine"
        return sum(map(str.isdigit, word)) >= 2  # "3" alone is too common; "12", "1,450"
    if _IDENTIFIER.search(word) is not None:
        return True
    return not initial and len(word) >= 2 and word[0].isupper() and word.isalpha()


def new_details(item: str, old: str) -> list[str]:
    """The names, numbers, dates, paths and identifiers of ``item`` that ``old`` lacks."""
    return KnownDetails(old.lower()).new_details(item)


def _split_by_details(items: list[str], known: KnownDetails) -> tuple[list[str], list[str]]:
    """Items that bring a new detail, and items that do not."""
    detailed: list[str] = []
    plain: list[str] = []
    for item in items:
        (detailed if known.new_details(item) else plain).append(item)
    return detailed, plain


_NO_DETAIL = "no new name, number, date, path or identifier"


def _is_sentinel(text: str) -> bool:
    return _SENTINEL_MARK in text


is_sentinel = _is_sentinel  # for the size bound (wm_core._guards.bound)


def _without_sentinel(text: str) -> str:
    return "\n".join(line for line in text.split("\n") if not _is_sentinel(line))


def guard_key_facts(op: SectionOp, old: str) -> Verdict | None:
    if op.kind is OpKind.KEEP:
        return None
    count = count_items(old)
    emergency = count > EMERGENCY_BULLETS or exceeds_tokens(old, EMERGENCY_TOKENS)
    oversized = emergency or count > BULLET_THRESHOLD or exceeds_tokens(old, TOKEN_THRESHOLD)
    if op.kind is OpKind.APPEND:
        if not oversized:
            return None
        return _throttle(op.items, old, count, emergency)
    return _judge_consolidation(op.content.strip(), old, count, emergency)


def _throttle(items: tuple[str, ...], old: str, count: int, emergency: bool) -> Verdict | None:
    known = KnownDetails(old.lower())  # lowered once, for the duplicates and the details
    fresh, duplicates = fresh_items(items, old, known.lowered)
    size = f"{count} bullets"
    if emergency:
        return _emergency_append(fresh, duplicates, old, known, size)
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


def _admit_at_emergency(fresh: list[str], known: KnownDetails) -> tuple[list[str], list[str], int]:
    """At the emergency level: the items with new details (up to the cap), the refused rest,
    and how many of the refused had no new detail."""
    detailed, plain = _split_by_details(fresh, known)
    accepted = detailed[:OVERSIZED_APPEND_CAP]
    over_cap = set(detailed[OVERSIZED_APPEND_CAP:])
    refused = [item for item in fresh if item in over_cap or item not in accepted]
    return accepted, refused, len(plain)


def _emergency_append(
    fresh: list[str], duplicates: list[str], old: str, known: KnownDetails, size: str
) -> Verdict | None:
    requested = _is_sentinel(old)
    if requested:
        # The model was told and has not consolidated: the section takes nothing more, so it
        # stays bounded however many commits come. The facts are refused, not lost: each
        # becomes a pending item of the session (see the module text).
        if not fresh and not duplicates:
            return None
        reason = (
            f"Key Facts at emergency size ({size}) and consolidation already requested: "
            f"{len(fresh)} fact(s) refused until a consolidating UPDATE passes (kept as "
            "pending items)"
        )
        return Verdict(
            KEEP, reason, dropped=tuple(duplicates), refused=tuple(fresh), deduplicated=True
        )
    accepted, refused, plain = _admit_at_emergency(fresh, known)
    items = [*accepted, SENTINEL]
    reason = (
        f"Key Facts at emergency size ({size}): consolidation requested; {len(accepted)} "
        f"fact(s) with new details accepted (cap {OVERSIZED_APPEND_CAP}), {len(refused)} "
        f"refused ({plain} with {_NO_DETAIL}); later facts wait as pending items until a "
        "consolidating UPDATE passes"
    )
    return Verdict(
        SectionOp(OpKind.APPEND, items=tuple(items)),
        reason,
        dropped=tuple(duplicates),
        refused=tuple(refused),
        deduplicated=True,
    )


def _judge_consolidation(new: str, old: str, count: int, emergency: bool) -> Verdict | None:
    known = KnownDetails(old.lower())  # lowered once, for the anchors, duplicates and details
    basis, basis_lowered, basis_count = old, known.lowered, count
    if _is_sentinel(old):  # the engine's own warning is not a fact to keep
        basis = _without_sentinel(old)
        basis_lowered, basis_count = basis.lower(), count_items(basis)
    if not basis_count:
        return None
    new_items = bullet_items(new)
    new_count = len(new_items)
    ratio = new_count / basis_count
    if ratio < MIN_BULLET_RATIO:
        reason = (
            f"consolidation rejected: keeps {new_count} of {basis_count} bullets "
            f"({ratio:.0%}, minimum {MIN_BULLET_RATIO:.0%})"
        )
    else:
        old_anchors = lexical_anchors(basis, basis_lowered)
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
    fresh, duplicates = fresh_items(new_items, old, known.lowered)
    if emergency and basis is not old:  # the sentinel stands: the section takes nothing
        salvaged, refused = list[str](), fresh
        reason += (
            f"; at emergency size with consolidation already requested nothing is salvaged, "
            f"{len(refused)} item(s) refused (kept as pending items)"
        )
    elif emergency:
        salvaged, refused, plain = _admit_at_emergency(fresh, known)
        reason += (
            f"; at emergency size {len(salvaged)} item(s) with new details salvaged (cap "
            f"{OVERSIZED_APPEND_CAP}), {len(refused)} refused ({plain} with {_NO_DETAIL})"
        )
    else:
        salvaged, refused = _split_by_details(fresh, known)
        reason += f"; {len(salvaged)} item(s) with new details salvaged as APPEND"
        if refused:
            reason += f", {len(refused)} not salvaged ({_NO_DETAIL})"
    return Verdict(
        SectionOp(OpKind.APPEND, items=tuple(salvaged)) if salvaged else KEEP,
        reason,
        dropped=tuple(duplicates),
        refused=tuple(refused),
        deduplicated=True,
    )


def missing_anchors(old: str, new: str) -> tuple[str, ...]:
    """The details of ``old`` that ``new`` lost: its lexical anchors (dates, quantities,
    decision words, capitalised names) absent from ``new``, and its names, numbers and
    identifiers that ``new`` lacks as words. One judgement for every rewrite of a text that
    must not lose facts (a consolidation here, a long-term memory's update or merge)."""
    lowered = new.lower()
    lost = {anchor for anchor in lexical_anchors(old) if anchor not in lowered}
    lost.update(new_details(old, new))
    return tuple(sorted(lost))
