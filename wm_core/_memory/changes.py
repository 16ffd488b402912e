"""Statements that change a fact stated before (issue 35 point 3): what the new value is,
and, when the statement names it, the value it replaces.

Why it exists: a user says "my name is now Dana Brooks", "I moved to Lisbon", "I don't
prefer tabs any more, I now prefer spaces", "we switched the ledger from PostgreSQL to
CockroachDB". Each is a new fact about something remembered that holds one value at a time,
and the memory it makes must replace the older one (``subjects.replaces``, then supersession)
rather than sit beside it. The extraction rules (``rules``) ask this module how to read such a
clause:

- ``new_name``: the name in "my name is now …", "my new name is …", "I changed my name to …",
  "I'm now called …", "I now go by …" (a ``name`` profile fact, as "my name is …" is);
- ``home_of``: the place in "I live in …", "I moved to …", "I relocated to …" (the ``home``
  field of a ``home`` profile fact); ``MOVED``: a clause saying the user moved there;
- ``organization_of``: the employer in "I work at …" / "I now work for …";
- ``given_up``: "I don't prefer tabs any more" / "I no longer like vim": a preference that
  replaces the one about that thing; followed in its message by a new preference, it is that
  preference's ``replaces`` instead (``conversation``);
- ``switch``: a decision's choice that goes "from A to B" or "replaces A with B": its subject
  is B (with what it is for: "CockroachDB for the ledger") and it replaces A.

Pure: text in, answers out.
"""

from __future__ import annotations

import re
from typing import Final

from wm_core._memory.names import NAME
from wm_core._memory.speech import clean

_NEW_NAME: Final = re.compile(
    r"^(?:my\s+name(?:\s+is|'s)\s+now|my\s+new\s+name\s+is|my\s+name\s+(?:has\s+)?changed\s+to|"
    r"i\s+(?:have\s+)?(?:(?:just|legally|officially|finally)\s+)?changed\s+my\s+name\s+to|"
    r"i\s+am\s+now\s+called|i\s+now\s+go\s+by)\s+"
    rf"(?P<name>{NAME})",
    re.IGNORECASE,
)
# Where the user lives, and a move there ("I've just moved to Lisbon", "I now live in Porto").
_PLACE: Final = (
    r"\b(?:live|living|based|located|moved|relocated)\s+(?:(?:back|over|out|here|now)\s+)?"
    rf"(?:in|to)\s+(?P<place>{NAME})"
)
_HOME: Final = re.compile(_PLACE, re.IGNORECASE)
MOVED: Final = re.compile(
    r"^i\s+(?:have\s+)?(?:(?:just|recently|finally|now|since|also|actually)\s+)*"
    r"(?:moved|relocated)\s+(?:(?:back|over|out)\s+)?to\s+(?-i:[A-Z])",
    re.IGNORECASE,
)
_WORKS_AT: Final = re.compile(
    r"^i\s+(?:(?:now|currently|still)\s+)?(?:work|am\s+(?:now\s+)?working)\s+(?:at|for)\s+"
    r"(?P<org>(?-i:[A-Z])[\w&.'\-]*(?:\s+(?-i:[A-Z&])[\w&.'\-]*){0,3})",
    re.IGNORECASE,
)
_VERBS: Final = {"prefer": "prefers", "like": "likes", "love": "loves", "enjoy": "enjoys",
                 "use": "uses", "want": "wants", "drink": "drinks", "eat": "eats"}  # fmt: skip
_VERB: Final = "|".join(_VERBS)
_GIVEN_UP: Final = re.compile(
    rf"^i\s+(?:(?:don't|do\s+not)\s+(?:really\s+)?(?P<verb>{_VERB})\s+(?P<what>.+?)\s+"
    rf"(?:any\s*more|any\s+longer)|no\s+longer\s+(?P<verb2>{_VERB})\s+(?P<what2>.+))$",
    re.IGNORECASE,
)
_SWITCH: Final = re.compile(
    r"^(?:to\s+)?(?:(?:switch|switching|move|moving|migrate|migrating)\s+)?"
    r"(?:(?P<scope>[\w'\-]+(?:\s+[\w'\-]+){0,3})\s+)?from\s+(?P<old>.+?)\s+(?:over\s+)?"
    r"(?:to|onto)\s+(?P<new>.+?)(?:\s+for\s+(?P<for>.+))?$",
    re.IGNORECASE,
)
_REPLACE: Final = re.compile(
    r"^(?:to\s+)?(?:replac(?:e|ing|ed)|swap(?:ping|ped)?(?:\s+out)?)\s+(?P<old>.+?)\s+with\s+"
    r"(?P<new>.+?)(?:\s+for\s+(?P<for>.+))?$",
    re.IGNORECASE,
)


def new_name(text: str) -> str | None:
    """The user's new name in a clause that states it (``text`` with "I'm" spelled out)."""
    match = _NEW_NAME.match(text)
    return match.group("name") if match else None


def home_of(text: str) -> str | None:
    """The place a clause about where the user lives names, if it names one."""
    match = _HOME.search(text)
    return match.group("place") if match else None


def organization_of(text: str) -> str | None:
    """The employer in "I work at …" (present tense: a past one is no current fact)."""
    match = _WORKS_AT.match(text)
    return clean(match.group("org")) if match else None


def given_up(text: str) -> tuple[str, str] | None:
    """(memory text, the thing) of a clause saying the user no longer likes something."""
    match = _GIVEN_UP.match(text)
    if match is None:
        return None
    verb = (match.group("verb") or match.group("verb2")).lower()
    what = clean(match.group("what") or match.group("what2"))
    if not what or what.lower() in ("it", "that", "this", "them"):
        return None
    return f"The user no longer {_VERBS[verb]} {what}", what


def switch(choice: str) -> tuple[str, str] | None:
    """(subject, replaced value) of a decision's choice that replaces one thing with another
    ("the ledger from PostgreSQL to CockroachDB" → "CockroachDB for the ledger", "PostgreSQL")."""
    match = _SWITCH.match(choice) or _REPLACE.match(choice)
    if match is None:
        return None
    old, new = clean(match.group("old")), clean(match.group("new"))
    scope = clean(match.group("for") or match.groupdict().get("scope") or "")
    if not old or not new:
        return None
    return (f"{new} for {scope}" if scope else new), old
