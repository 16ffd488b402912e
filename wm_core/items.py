"""Items of a section body, and the key under which two items count as the same.

Every guard reasons about "items", so the notion is defined once: each non-empty line that is
not a heading, with its bullet or number marker removed (the reference's rule, so that counts
such as "25 bullets" agree with it). The identity key compares whole items after normalising
the things a rewrite changes without changing meaning (case, spacing, emphasis and code marks
at word edges, bullet markers, trailing punctuation), never substrings: "Fact 1" is not a
duplicate of "Fact 10".

Keys are computed with ``str`` methods over all items at once rather than with per-item regex
substitutions: this runs for every APPEND and on every guard that de-duplicates.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from wm_core.text import lower

_BULLET = re.compile(r"^(?:[-*]|\d+[\.)])\s+(.*)$")
_MARKER = re.compile(r"(?:[-+]|\d+[.)])\s+")
_EMPHASIS = "*`_"
_TRAILING_PUNCTUATION = ".;,:!"


def bullet_items(text: str | None) -> list[str]:
    """The items of a body, in order."""
    if not text:
        return []
    items: list[str] = []
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("- "):
            items.append(stripped[2:].lstrip())  # "- item", what the renderer writes
            continue
        first = stripped[0]
        if first == "#":
            continue
        if first == "-" or first == "*":
            if len(stripped) > 1 and stripped[1].isspace():
                stripped = stripped[1:].lstrip()  # "* item", "-\titem": without a regex
        elif first.isdigit():
            match = _BULLET.match(stripped)
            if match is not None:
                stripped = match.group(1).strip()
        if stripped:
            items.append(stripped)
    return items


def _unemphasize(word: str) -> str:
    core = word.rstrip(_TRAILING_PUNCTUATION)
    if len(core) == len(word):
        return word.strip(_EMPHASIS)
    return core.strip(_EMPHASIS) + word[len(core) :]  # "`bug`." -> "bug."


def _key(folded_line: str) -> str:
    text = " ".join(folded_line.split())
    # Emphasis and code marks count only at word edges ("snake_case" keeps its underscore);
    # after the join above, word edges are single spaces and the ends of the text.
    if (
        "*" in text
        or "`" in text
        or " _" in text
        or "_ " in text
        or text.startswith("_")
        or text.endswith("_")
    ):
        text = " ".join(filter(None, [_unemphasize(word) for word in text.split(" ")]))
    if text and (text[0] in "-+" or text[0].isdigit()):
        match = _MARKER.match(text)
        if match is not None:
            text = text[match.end() :]
    return text.rstrip(_TRAILING_PUNCTUATION).rstrip()


def item_keys(items: Iterable[str]) -> list[str]:
    """The identity key of each item (a multi-line item is one key)."""
    listed = [item.replace("\n", " ") if "\n" in item else item for item in items]
    if not listed:
        return []
    return [_key(line) for line in lower("\n".join(listed)).split("\n")]


def item_key(item: str) -> str:
    """The identity key of one item."""
    return item_keys((item,))[0]


def _could_be_present(keys: list[str], haystack: str) -> bool:
    """Whether every word of some key occurs in ``haystack``. Candidates share words ("Fact 1",
    "Fact 2"), so each distinct word is searched for once."""
    known: dict[str, bool] = {}
    for key in keys:
        for word in key.split(" "):
            present = known.get(word)
            if present is None:
                present = known[word] = word in haystack
            if not present:
                break
        else:
            return True
    return False


def fresh_items(candidates: Iterable[str], existing: str) -> tuple[list[str], list[str]]:
    """Split ``candidates`` into items not yet in the body ``existing`` and duplicates.

    Comparison is by whole-item key; a candidate repeated within ``candidates`` counts once.
    The body's own keys are only computed when some candidate could be among them: every word
    of a key occurs in the lower-cased body, so a candidate with a word absent from it is new.
    """
    listed = list(candidates)
    keys = item_keys(listed)
    seen: set[str] = set()
    if existing and keys and _could_be_present(keys, lower(existing)):
        seen = set(item_keys(bullet_items(existing)))
    fresh: list[str] = []
    duplicates: list[str] = []
    for candidate, key in zip(listed, keys, strict=True):
        if key in seen:
            duplicates.append(candidate)
        else:
            seen.add(key)
            fresh.append(candidate)
    return fresh, duplicates
