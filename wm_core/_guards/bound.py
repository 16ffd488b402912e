"""The hard bound on the working memory: whatever the model answers, the document stays small.

The working memory is part of every later prompt and context, so one answer with a 2 MB
section or 3,000 appended items would make every later call expensive or impossible. The
guards judge *what* may change; this bound, applied after them, caps *how much*: each
section has a token budget (Key Facts a larger one: its emergency consolidation starts at
3,000 tokens) and the document has a total. Only what this merge changed is cut, since
the old document was already within the bound:

- lines the section already had are kept first in the sections whose content the guards
  protect (Key Facts, Files, Errors, Open Issues), then the new lines in order while they
  fit; in the volatile sections (title, Current State, Task & Goals) the new text is cut
  at its end; a single line over the budget keeps its head;
- in Key Facts, once a fact no longer fits, the consolidation sentinel is added (it always
  has room); above a ceiling (90 % of its budget) an APPEND adds nothing but the sentinel,
  so a model that never consolidates cannot make it grow;
- over the total, the sections this merge changed give up their new lines, largest first.

Every cut is recorded as a decision (Guard.BOUND) whose refused items are the cut lines, so
that they can be kept as pending items and offered to the model again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from wm_core._decisions import Decision, Guard
from wm_core._document.sections import (
    ERRORS_CORRECTIONS,
    FILES_CONTEXT,
    KEY_FACTS,
    OPEN_ISSUES,
    SECTIONS,
)
from wm_core._guards.key_facts import SENTINEL, is_sentinel
from wm_core._tokens.estimate import estimate_tokens, exceeds_tokens, tokens_at_most

_PROTECTED = frozenset({KEY_FACTS, FILES_CONTEXT, ERRORS_CORRECTIONS, OPEN_ISSUES})
_CUT_MARK = " […]"
# Headings, blank lines and the title of the document, beside the section bodies.
_FRAME_TOKENS = 64


@dataclass(frozen=True, slots=True)
class WmLimits:
    """The budget of a working memory, in estimated tokens."""

    total_tokens: int = 12_000
    section_tokens: int = 2_000
    key_facts_tokens: int = 4_000
    # Share of the Key Facts budget above which an APPEND adds nothing but the sentinel.
    key_facts_ceiling: float = 0.9
    # Cut lines a decision record lists (the reason gives the full count), each shortened.
    record_items: int = 50
    record_item_chars: int = 500

    def for_section(self, name: str) -> int:
        budget = self.key_facts_tokens if name == KEY_FACTS else self.section_tokens
        return min(budget, self.total_tokens)


DEFAULT_LIMITS = WmLimits()


def _line_tokens(line: str) -> int:
    return estimate_tokens(line) + 1  # its newline


def _head(line: str, budget: int) -> str:
    """The start of ``line`` within ``budget`` tokens (at least a few characters)."""
    keep = max(budget * 4 - len(_CUT_MARK) - 4, 8)
    while keep > 8 and estimate_tokens(line[:keep] + _CUT_MARK) + 1 > budget:
        keep = keep * 3 // 4
    return line[:keep].rstrip() + _CUT_MARK


def fit_body(name: str, body: str, old: str, budget: int) -> tuple[str, tuple[str, ...]]:
    """``body`` within ``budget`` tokens, and the lines cut from it (see the module text)."""
    if not exceeds_tokens(body, budget):
        return body, ()
    lines = body.split("\n")
    keys = [line.strip() for line in lines]
    old_lines = {line.strip() for line in old.split("\n")} if name in _PROTECTED else set()
    key_facts = name == KEY_FACTS
    room = budget - (_line_tokens(SENTINEL) if key_facts else 0)
    chosen = [False] * len(lines)
    truncated: list[str] = []  # a line kept only in part: its whole text is recorded
    used = 0
    first = [i for i, key in enumerate(keys) if key in old_lines or is_sentinel(key)]
    if key_facts and any(is_sentinel(keys[i]) for i in first):
        room = budget  # the sentinel is already one of the kept lines
    firsts = set(first)
    rest = [i for i in range(len(lines)) if i not in firsts]
    for index in [*first, *rest]:
        cost = _line_tokens(lines[index])
        if used + cost <= room:
            chosen[index] = True
            used += cost
        elif not any(chosen) and name not in _PROTECTED:
            truncated.append(lines[index].strip())
            lines[index] = _head(lines[index], room)
            chosen[index] = True
            used += _line_tokens(lines[index])
            break
        elif name not in _PROTECTED:
            break  # volatile: cut at the end, no later line skips ahead
    kept = [line for line, keep in zip(lines, chosen, strict=True) if keep]
    cut = (*truncated, *(
        line.strip() for line, keep, key in zip(body.split("\n"), chosen, keys, strict=True)
        if not keep and key
    ))  # fmt: skip
    if key_facts and not any(is_sentinel(line) for line in kept):
        kept.append("- " + SENTINEL)
    return "\n".join(kept).strip(), cut


def _record(limits: WmLimits, cut: tuple[str, ...]) -> tuple[str, ...]:
    chars = limits.record_item_chars
    return tuple(
        line if len(line) <= chars else line[:chars] + _CUT_MARK
        for line in cut[: limits.record_items]
    )


def _document_tokens(bodies: Mapping[str, str]) -> int:
    return _FRAME_TOKENS + sum(estimate_tokens(body) + 1 for body in bodies.values())


def _document_excess(bodies: Mapping[str, str], total: int) -> int:
    """How many tokens the document is over ``total`` (0 or less: within). A cheap upper
    bound settles the usual case, a document well within its budget, without weighing every
    code point of every section (most of a small merge of a non-ASCII document, issue 36)."""
    if _FRAME_TOKENS + sum(tokens_at_most(body) + 1 for body in bodies.values()) <= total:
        return 0
    return _document_tokens(bodies) - total


def bound_sections(
    old: Mapping[str, str],
    new: Mapping[str, str],
    requested: Mapping[str, str],
    limits: WmLimits = DEFAULT_LIMITS,
) -> tuple[dict[str, str], list[Decision]]:
    """The merged section bodies within ``limits``, and a decision for every cut."""
    bodies = dict(new)
    decisions: list[Decision] = []
    changed = [name for name in SECTIONS if bodies.get(name, "") != old.get(name, "")]
    if not changed:
        return bodies, decisions  # only what this merge changed is ever cut

    def cut_to(name: str, budget: int, why: str) -> bool:
        body = bodies.get(name, "")
        fitted, cut = fit_body(name, body, old.get(name, ""), budget)
        if fitted == body:
            return False
        before = estimate_tokens(body)
        bodies[name] = fitted
        asked = requested.get(name, "UPDATE")
        decisions.append(
            Decision(
                name,
                asked,
                asked if fitted != old.get(name, "") else "KEEP",
                Guard.BOUND,
                f"{why}: {before} tokens cut to {estimate_tokens(fitted)} (budget {budget}); "
                f"{len(cut)} line(s) not stored",
                items_refused=_record(limits, cut),
            )
        )
        return True

    kf_old = old.get(KEY_FACTS, "")
    ceiling = int(limits.for_section(KEY_FACTS) * limits.key_facts_ceiling)
    appended = KEY_FACTS in changed and requested.get(KEY_FACTS) == "APPEND"
    if appended and exceeds_tokens(kf_old, ceiling):
        known = {line.strip() for line in kf_old.split("\n")}
        lines = [line.strip() for line in bodies[KEY_FACTS].split("\n")]
        refused = tuple(line for line in lines if line and line not in known)
        sentinel = any(is_sentinel(line) for line in known)
        bodies[KEY_FACTS] = kf_old if sentinel else kf_old + "\n- " + SENTINEL
        decisions.append(
            Decision(
                KEY_FACTS,
                "APPEND",
                "APPEND" if not sentinel else "KEEP",
                Guard.BOUND,
                f"Key Facts above its ceiling ({estimate_tokens(kf_old)} > {ceiling} tokens): "
                f"only the consolidation request is added; {len(refused)} fact(s) not stored",
                items_refused=_record(limits, refused),
            )
        )
    for name in changed:
        cut_to(name, limits.for_section(name), "over the section budget")
    excess = _document_excess(bodies, limits.total_tokens)
    for name in sorted(changed, key=lambda n: -estimate_tokens(bodies.get(n, ""))):
        if excess <= 0:
            break
        size = estimate_tokens(bodies.get(name, ""))
        floor = estimate_tokens(old.get(name, ""))
        target = max(size - excess, floor, 0)
        if target < size and cut_to(name, target, "over the working memory budget"):
            excess = _document_tokens(bodies) - limits.total_tokens
    return bodies, decisions
