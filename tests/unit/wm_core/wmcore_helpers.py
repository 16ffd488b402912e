"""Builders shared by the wm_core tests (the spec's "WM(x=...)" and "keep-all" conventions)."""

from __future__ import annotations

from collections.abc import Mapping

from wm_core import SECTIONS, Decision, MergeResult, SectionOp, merge, parse_document
from wm_core._document.items import bullet_items

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


def decision_bullets(count: int) -> str:
    """The reference growth tests' Key Facts: numbered decisions about numbered modules."""
    return "\n".join(
        f"- Decision {i}: keep module_{i}.py because API contract {i} is stable."
        for i in range(1, count + 1)
    )


RICH_FACTS = [
    "Caroline adopted a beagle named Biscuit on 2023-04-12.",
    "Caroline works night shifts as a nurse at Portland General Hospital.",
    "Melanie is Caroline's older sister and lives in Stockholm, Sweden.",
    "Melanie visited Portland for 10 days in July 2024.",
    "Marcus is Caroline's partner; they met at a climbing gym in Seattle.",
    "Marcus decided to switch careers to carpentry because of back pain.",
    "Jake is the son of Marcus and is 12 years old.",
    "Jake plays soccer every Saturday at Laurelhurst Park.",
    "Caroline and Marcus agreed to share school runs on weekdays.",
    "Biscuit needs knee surgery costing $2,400, scheduled for 15 March 2024.",
    "Caroline paints watercolors and sold 3 paintings at a Portland gallery.",
    "Melanie is a marine biologist at Uppsala University.",
    "Caroline plans a trip to Yellowstone with Marcus and Jake in August.",
    "The Yellowstone trip budget is $3,500 for 7 days.",
    "Ruth, the mother of Caroline, lives in Boise and turns 70 on 2024-01-20.",
    "Caroline chose a cabin near West Yellowstone because it allows dogs.",
    "Marcus committed to finishing the kitchen cabinets by December 2025.",
    "Jake is allergic to peanuts.",
    "Lars, the husband of Melanie, is a software engineer at Spotify.",
    "Melanie and Lars have 2 kids, Astrid and Nils.",
    "Caroline studied nursing at Oregon Health University.",
    "Caroline runs a half marathon every October.",
    "Marcus owns a pickup truck he bought in 2019.",
    "Caroline prefers morning phone calls with Melanie on Sundays.",
    "Biscuit is treated by Dr. Okafor at Hawthorne Animal Clinic.",
    "Caroline resolved a billing dispute with Providence Health in May.",
    "Marcus has his workshop in the garage of their house on Alberta Street.",
    "Jake wants a telescope for his birthday on 2024-09-03.",
    "Caroline volunteers at the Oregon Humane Society twice a month.",
    "Melanie will fly to Portland again for Thanksgiving.",
    "Caroline is learning Swedish to talk with Astrid and Nils.",
    "Theo, the brother of Marcus, lives in Denver and visits 4 times a year.",
    "Caroline drives a 2016 Subaru Outback.",
    "Ruth had hip surgery in February and is recovering well.",
    "Caroline and Marcus are saving for a house, with $60,000 as the down payment.",
    "Jake goes to Beaumont Middle School.",
    "Caroline works 3 night shifts per week.",
    "Marcus takes a woodworking class at Portland Community College.",
    "Melanie studies coral reefs near Gotland.",
    "Caroline decided to keep Biscuit on a grain-free diet.",
    "The family celebrates Midsummer with Melanie every June.",
]
