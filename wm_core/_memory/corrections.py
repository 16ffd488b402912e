"""A correction of what was just said: the fact stated before, fixed in place.

Why it exists: people correct themselves in the next breath — "my dentist appointment is on
the 14th" … "wait actually it's the 16th not the 14th", "my manager Sandra …" … "sorry not
Sandra, it's Sunita", "we said we'd use MySQL but scrap that, we're going with Postgres".
Read clause by clause, the first statement becomes a wrong memory and the correction states
nothing (or a fact of its own without its subject). Here a correction names the value it
replaces and the value that holds (``correction``), and the facts of the latest message that
said the old value take the new one (``corrected``): a time by what it resolves to, a word
or a name by its spelling. A choice taken back ("… but scrap that", ``retraction``) states
nothing; the decision that follows it names what it replaces (``instead_of``).

The module is pure: the message time is an argument.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from wm_core._memory.rules import Fact
from wm_core._memory.speech import clean, third_person
from wm_core._memory.when import resolve_when
from wm_core._messages import Role

# What marks a correction ("wait", "actually", "sorry", "no", "I mean"); "it's X not Y" needs
# no marker, "X, not Y" does ("I drink tea, not coffee" corrects nothing).
_MARK = r"(?:wait|oops|sorry|actually|no|nope|correction|my bad|i mean|er+m*|um+)"
_VALUE = r"[^,;:]{1,40}?"
_CORRECTION: Final = re.compile(
    rf"^(?:(?P<mark>(?:{_MARK}[,:!.]?\s+)+)|(?=(?:it's|it is|its|that's|that is)\s))"
    rf"(?:(?:it's|it is|its|that's|that is)\s+)?(?P<new>{_VALUE}),?\s+not\s+(?P<old>{_VALUE})"
    r"(?:,.*)?[\s.!]*$|"
    rf"^(?:{_MARK}[,:!.]?\s+)*not\s+(?P<old2>{_VALUE}),?\s+(?:it's|it is|its|that's|i mean)\s+"
    rf"(?P<new2>{_VALUE})[\s.!]*$",
    re.IGNORECASE,
)
# A choice taken back at the end of a clause: "we said we'd use MySQL but scrap that".
_RETRACTION: Final = re.compile(
    r"\b(?:scrap|forget|ignore|never mind|cancel|disregard)\s+(?:that|it|this)[.!]*$", re.I
)


def correction(clause: str) -> tuple[str, str] | None:
    """(the value replaced, the value that holds) when ``clause`` corrects what was said."""
    found = _CORRECTION.match(clause.strip())
    if found is None:
        return None
    old = found.group("old") or found.group("old2")
    new = found.group("new") or found.group("new2")
    return clean(old).strip(), clean(new).strip()


def _word(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(value)}(?![\w-])", re.IGNORECASE)


def corrected(found: Sequence[Fact], old: str, new: str, base: str | None) -> list[Fact] | None:
    """``found`` with the facts of the latest message that said ``old`` saying ``new`` instead
    (a time compared by what it resolves to against ``base``), or None when none said it."""
    then, now = resolve_when(f"on {old}", base), resolve_when(f"on {new}", base)
    dated = then is not None and now is not None
    word = _word(old)

    def says(fact: Fact) -> bool:
        if dated:
            return fact.when is not None and then is not None and fact.when.iso == then.iso
        return word.search(fact.text) is not None

    latest = next((f for f in reversed(found) if says(f)), None)
    if latest is None or not latest.message_ids:
        return None
    message = latest.message_ids[-1]
    fixed: list[Fact] = []
    for fact in found:
        if message not in fact.message_ids or not says(fact):
            fixed.append(fact)
        elif dated and fact.when is not None and now is not None:
            label = fact.fields.get("when", fact.when.label)
            fields = {**fact.fields, "when": now.label} if "when" in fact.fields else fact.fields
            fixed.append(replace(fact, text=fact.text.replace(label, now.label), when=now,
                                 fields=fields))  # fmt: skip
        else:
            fields = {k: word.sub(new, v) for k, v in fact.fields.items()}
            fixed.append(replace(fact, text=word.sub(new, fact.text),
                                 subject=word.sub(new, fact.subject), fields=fields))  # fmt: skip
    return fixed


def retraction(clause: str) -> str | None:
    """What a clause takes back ("we said we'd use MySQL but scrap that": "we said we'd use
    MySQL"), or None."""
    text = clause.strip()
    found = _RETRACTION.search(text)
    if found is None:
        return None
    said = text[: found.start()].rstrip(" ,")
    for link in (" but", " and"):
        if said.lower().endswith(link):
            said = said[: -len(link)].rstrip(" ,")
    return clean(said) if len(said) >= 3 else None


def instead_of(fact: Fact, retracted: str, role: Role) -> Fact:
    """A decision that follows a choice taken back, naming what it replaces."""
    said = third_person(retracted, role, sentence=False, team=True)
    return replace(fact, text=f"{fact.text} (instead of: {said})")
