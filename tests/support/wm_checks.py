"""Checks on a working-memory document that several test layers share.

Written from the outside (only the public ``wm_core`` facade), so they can judge any
provider's output: one spelling per file path in Files & Context, and no item in two of the
bulleted sections.
"""

from __future__ import annotations

import re

from wm_core import (
    ERRORS_CORRECTIONS,
    FILES_CONTEXT,
    KEY_FACTS,
    OPEN_ISSUES,
    TASK_GOALS,
    bullet_items,
    item_key,
    parse_document,
)

ITEM_SECTIONS = (TASK_GOALS, KEY_FACTS, ERRORS_CORRECTIONS, OPEN_ISSUES)
# Labels a summarizer puts in front of an item; the item is the same without them.
_TAGS = re.compile(
    r"^(?:\[[^\]]*\]\s*)*"
    r"(?:unanswered question from the user:|waiting for the user:|user correction:)?\s*",
    re.IGNORECASE,
)


def listed_paths(document: str) -> list[str]:
    """The path each Files & Context item starts with (``path — how it was used``)."""
    body = parse_document(document).get(FILES_CONTEXT, "")
    return [item.split(" — ", 1)[0].strip().strip("`") for item in bullet_items(body)]


def duplicate_spellings(document: str) -> list[tuple[str, str]]:
    """Pairs of listed paths where one is another spelling of the other: an absolute path
    ending in a relative one, or a bare name that another entry ends with."""
    paths = listed_paths(document)
    return [
        (a, b)
        for a in paths
        for b in paths
        if a != b and (a.endswith("/" + b) or a.removeprefix("./") == b)
    ]


def items_in_two_sections(document: str) -> dict[str, list[str]]:
    """Item text → the sections it appears in, for every item found in more than one."""
    sections = parse_document(document)
    where: dict[str, list[str]] = {}
    for name in ITEM_SECTIONS:
        for item in bullet_items(sections.get(name, "")):
            key = item_key(_TAGS.sub("", item))
            if key and name not in where.setdefault(key, []):
                where[key].append(name)
    return {key: names for key, names in where.items() if len(names) > 1}
