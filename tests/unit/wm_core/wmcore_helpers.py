"""Builders shared by the wm_core tests (the spec's "WM(x=...)" and "keep-all" conventions)."""

from __future__ import annotations

from collections.abc import Mapping

from wm_core import SECTIONS, Decision, MergeResult, SectionOp, merge, parse_document
from wm_core.items import bullet_items

TITLE, STATE, GOALS, FACTS, FILES, ERRORS, ISSUES = SECTIONS

_SHORT = {
    "title": TITLE,
    "state": STATE,
    "goals": GOALS,
    "facts": FACTS,
    "files": FILES,
    "errors": ERRORS,
    "issues": ISSUES,
}


def wm(**bodies: str) -> str:
    """A canonical document with the given bodies (title=, state=, goals=, facts=, files=,
    errors=, issues=) and every other section empty, built the way the reference tests do."""
    parts = ["# Working Memory", ""]
    for name in SECTIONS:
        short = next(key for key, value in _SHORT.items() if value == name)
        parts.append(f"## {name}")
        body = bodies.get(short, "")
        if body:
            parts.append(body)
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def keep_all(**overrides: object) -> dict[str, object]:
    """KEEP for all seven sections, with some sections overridden (short names as in ``wm``)."""
    ops: dict[str, object] = {name: {"op": "KEEP"} for name in SECTIONS}
    for short, op in overrides.items():
        ops[_SHORT[short]] = op
    return ops


def body(document: str, section: str) -> str:
    return parse_document(document).get(section, "")


def items(document: str, section: str) -> list[str]:
    return bullet_items(body(document, section))


def bullets(prefix: str, count: int, start: int = 0) -> str:
    return "\n".join(f"- {prefix} {i}" for i in range(start, start + count))


def apply(section: str, old: str, op: object) -> MergeResult:
    """Merge one op into a document whose only non-empty section is ``section``."""
    short = next(key for key, value in _SHORT.items() if value == section)
    return merge(wm(**{short: old}), {section: op})


def decisions_for(result: MergeResult, section: str) -> list[Decision]:
    return [d for d in result.decisions if d.section == section]


def update(content: str) -> SectionOp:
    return SectionOp.update(content)


def append(*new_items: str) -> SectionOp:
    return SectionOp.append(new_items)


def ops_dict(ops: Mapping[str, SectionOp]) -> dict[str, object]:
    return {name: op.to_dict() for name, op in ops.items()}
