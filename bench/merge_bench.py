"""Merge benchmark: median microseconds per merge and peak traced memory, per op mix.

Run with ``.venv/bin/python bench/merge_bench.py``. It prints figures and asserts nothing,
because timings depend on the machine. The working memory is realistic: about 16 KB, about 25
bullets per section with paths, dates, names and numbers (a few non-ASCII). The mixes: all KEEP;
small APPENDs; seven UPDATEs that pass their guards; UPDATEs that every guard rejects; a Key Facts
rewrite rejected by its anchor layer (layer 2); a typical commit (state rewritten, two facts, a
file annotated, an issue resolved and one opened); Key Facts at the emergency level (an APPEND,
and a rejected UPDATE); and, from issue 36, one small APPEND into a section near its size
bound, one APPEND to Key Facts at emergency size under the consolidation sentinel, and one
Files & Context UPDATE the guard rejects; then small APPENDs into every section while each is
near its bound, and a Files & Context UPDATE that drops one path among 240.

The reference engine was measured elsewhere at about 45 us for all KEEP and about 1,700 us for
seven passing UPDATEs. Absolute numbers do not carry across machines, so each mix is also timed
against a baseline written here from the reference's documented algorithm (shared spec,
sections 2 and 3), in alternating batches on the same input: the speed-up column is that ratio.
With ``--reference``, a second table times the real reference (openviking 0.5.2, run in its own
throwaway virtualenv by ``bench/reference_merge.py``) on the same inputs.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from wm_core import SECTIONS, SectionOp, estimate_tokens, merge, render_document

PEOPLE = ("Caroline", "Melanie", "Marcus", "Priya", "Jonas", "Aiko", "Tomás", "Zoë")
CITIES = ("Portland", "Lisbon", "Osaka", "Malmö", "Denver")
MONTHS = ("January", "March", "May", "July", "September", "November")


def _title() -> str:
    return "Billing Service Migration to Event Sourcing"


def _state() -> str:
    return "\n".join(
        f"- Step {i}: migrating billing/handlers/step_{i}.py, review by "
        f"{PEOPLE[i % len(PEOPLE)]} since 2024-0{1 + i % 9}-1{i % 10}; next: suite {i}."
        for i in range(25)
    )


def _goals() -> str:
    return "\n".join(
        f"- Goal {i}: move invoice flow {i} off cron, p99 under {100 + i} ms, "
        f"ship before {1 + i % 28} {MONTHS[i % len(MONTHS)]} 2025."
        for i in range(25)
    )


def _facts(count: int = 25) -> str:
    return "\n".join(
        f"- Decision {i}: {PEOPLE[i % len(PEOPLE)]} chose partitioning for ledger_{i} "
        f"because {3 + i} years of data; agreed 2024-0{1 + i % 9}-2{i % 10} in "
        f"{CITIES[i % len(CITIES)]}, budget ${1000 + 25 * i}."
        for i in range(count)
    )


def _files() -> str:
    return "\n".join(
        f"- services/billing/ledger_{i}/handler.py — consumer of ledger.{i}; see "
        f"docs/adr/{i:04d}-ledger.md, https://wiki.example.com/ledger-{i}"
        for i in range(25)
    )


def _errors() -> str:
    return "\n".join(
        f"- Round {i}: assumed ledger_{i} used UTC, it stores local time ({CITIES[i % 5]}); "
        f"fixed in billing/ledger_{i}/clock.py, spotted by {PEOPLE[i % 8]}."
        for i in range(25)
    )


def _issues() -> str:
    return "\n".join(
        f"- Issue {i}: reconcile duplicate events of account group {i} before cut-over "
        f"on 2025-0{1 + i % 9}-0{1 + i % 9} ({PEOPLE[(i + 3) % 8]})"
        for i in range(25)
    )


BODIES: dict[str, str] = {
    "Session Title": _title(),
    "Current State": _state(),
    "Task & Goals": _goals(),
    "Key Facts & Decisions": _facts(),
    "Files & Context": _files(),
    "Errors & Corrections": _errors(),
    "Open Issues": _issues(),
}
DOCUMENT = render_document(BODIES)
EMERGENCY_DOCUMENT = render_document({**BODIES, "Key Facts & Decisions": _facts(55)})


def _errors_near_bound() -> str:
    """Errors & Corrections at about 95 % of its 2,000-token section budget."""
    lines = [
        f"- Round {i}: assumed ledger_{i} used UTC, it stores local time ({CITIES[i % 5]}); "
        f"fixed in billing/ledger_{i}/clock.py, spotted by {PEOPLE[i % 8]}."
        for i in range(62)
    ]
    return "\n".join(lines)


# Issue 36: mixes outside the fixtures above, where the engine used to trail the baseline.
NEAR_BOUND_DOCUMENT = render_document({**BODIES, "Errors & Corrections": _errors_near_bound()})
# Key Facts at emergency size whose consolidation request already stands: the engine's own
# answer to a first APPEND there (it adds the sentinel).
SENTINEL_DOCUMENT = merge(
    EMERGENCY_DOCUMENT, {"Key Facts & Decisions": SectionOp.append(["Lisbon 2025-04-01."])}
).document

Ops = Mapping[str, object]


def tool_call_ops(ops: Ops) -> dict[str, dict[str, object]]:
    """The ops in the tool-call JSON shape the reference (and the baseline) read."""
    return {name: op.to_dict() for name, op in ops.items() if isinstance(op, SectionOp)}


def all_keep() -> Ops:
    return {name: SectionOp.keep() for name in SECTIONS}


def small_appends() -> Ops:
    return {
        **all_keep(),
        "Key Facts & Decisions": SectionOp.append(["Aiko approved the 2025-02-01 freeze."]),
        "Files & Context": SectionOp.append(["services/billing/outbox/relay.py — new relay"]),
        "Errors & Corrections": SectionOp.append(["Round 25: retried without idempotency key."]),
        "Open Issues": SectionOp.append(["Issue 25: confirm retention for ledger_25"]),
    }


def passing_updates() -> Ops:
    facts = BODIES["Key Facts & Decisions"].split("\n")
    consolidated = "\n".join(
        a + " Also: " + b.removeprefix("- ") for a, b in zip(facts[::2], facts[1::2], strict=False)
    )
    return {
        "Session Title": SectionOp.update("Billing Service Migration to Event Sourcing (phase 2)"),
        "Current State": SectionOp.update("Phase 2 started; ledger_3 consumer is live."),
        "Task & Goals": SectionOp.update(BODIES["Task & Goals"] + "\n- Goal 25: retire cron."),
        "Key Facts & Decisions": SectionOp.update(consolidated + "\n" + facts[-1]),
        "Files & Context": SectionOp.update(BODIES["Files & Context"].replace("consumer", "live")),
        "Errors & Corrections": SectionOp.update(
            BODIES["Errors & Corrections"] + "\n- Round 25: forgot the replay flag."
        ),
        "Open Issues": SectionOp.update(
            BODIES["Open Issues"].replace("- Issue 0:", "- [resolved] Issue 0:")
        ),
    }


def rejected_updates() -> Ops:
    return {
        "Session Title": SectionOp.update("Completely Unrelated Gardening Topic"),
        "Current State": SectionOp.update("Idle."),
        "Task & Goals": SectionOp.update("- Goal: none"),
        "Key Facts & Decisions": SectionOp.update("- Summary: lots of ledger decisions."),
        "Files & Context": SectionOp.update("- services/billing/ledger_0/handler.py"),
        "Errors & Corrections": SectionOp.update("- Everything is fine now."),
        "Open Issues": SectionOp.update("- Issue 0: reconcile duplicate events"),
    }


def key_facts_anchor_rejection() -> Ops:
    """A Key Facts rewrite that keeps every bullet but drops the dates, names and amounts:
    the volume layer passes, the anchor layer rejects it and salvages nothing."""
    vague = "\n".join(f"- Decision {i}: partitioning chosen for a ledger." for i in range(25))
    return {**all_keep(), "Key Facts & Decisions": SectionOp.update(vague)}


def typical() -> Ops:
    """A usual commit: the state rewritten, two new facts, a file annotated, an issue resolved
    and one opened, everything else kept."""
    issues = BODIES["Open Issues"].replace("- Issue 3:", "- [resolved] Issue 3:")
    return {
        **all_keep(),
        "Current State": SectionOp.update("Ledger 4 consumer live; next: replay test on ledger 5."),
        "Key Facts & Decisions": SectionOp.append(
            [
                "Priya agreed on 2025-02-03 to keep 7 years of invoices in cold storage.",
                "Replay runs nightly at 02:00 UTC because of the Denver batch window.",
            ]
        ),
        "Files & Context": SectionOp.update(
            BODIES["Files & Context"].replace("consumer of ledger.4", "live consumer of ledger.4")
        ),
        "Open Issues": SectionOp.update(issues + "\n- Issue 25: alert on replay lag over 5 min"),
    }


def emergency() -> Ops:
    return {
        **all_keep(),
        "Key Facts & Decisions": SectionOp.append([f"Brand new fact {i}" for i in range(8)]),
    }


def emergency_update() -> Ops:
    return {**all_keep(), "Key Facts & Decisions": SectionOp.update("- Only one bullet.")}


def append_near_bound() -> Ops:
    """One small APPEND into a section close to its size bound."""
    return {
        **all_keep(),
        "Errors & Corrections": SectionOp.append(["Round 62: retried without idempotency key."]),
    }


def append_under_sentinel() -> Ops:
    """One fact APPENDed to Key Facts at emergency size, consolidation already requested."""
    return {
        **all_keep(),
        "Key Facts & Decisions": SectionOp.append(
            ["Decision 99: Zoë chose ledger_99 because 12 years of data; agreed 2025-04-02."]
        ),
    }


def one_rejected_update() -> Ops:
    """A single Files & Context rewrite that drops most paths: the guard restores them."""
    return {
        **all_keep(),
        "Files & Context": SectionOp.update(
            "- services/billing/ledger_0/handler.py — consumer of ledger.0 (live)"
        ),
    }


def _near_bound(line: Callable[[int], str], tokens: int) -> str:
    """Bullets made by ``line`` until the body is just under ``tokens`` estimated tokens."""
    lines: list[str] = []
    while estimate_tokens("\n".join([*lines, line(len(lines))])) <= tokens:
        lines.append(line(len(lines)))
    return "\n".join(lines)


# Every bounded section close to its bound at once: four at about 95 % of their 2,000-token
# budget, Key Facts oversized (38 bullets: over 25, under 1,500 tokens), not at emergency.
CROWDED_DOCUMENT = render_document(
    {
        **BODIES,
        "Task & Goals": _near_bound(
            lambda i: (
                f"- Goal {i}: move invoice flow {i} off cron, p99 under {100 + i} ms, "
                f"ship before {1 + i % 28} {MONTHS[i % len(MONTHS)]} 2025."
            ),
            1_900,
        ),
        "Key Facts & Decisions": _facts(38),
        "Files & Context": _near_bound(
            lambda i: f"- services/billing/ledger_{i}/handler.py — consumer of ledger.{i}",
            1_900,
        ),
        "Errors & Corrections": _errors_near_bound(),
        "Open Issues": _near_bound(
            lambda i: (
                f"- Issue {i}: reconcile duplicate events of account group {i} "
                f"({PEOPLE[(i + 3) % 8]})"
            ),
            1_900,
        ),
    }
)


def appends_everywhere_near_bounds() -> Ops:
    """Small APPENDs into every section while each is near its bound: a usual commit late in
    a long session. Some items carry no number, so the duplicate check reads every body."""
    return {
        **all_keep(),
        "Current State": SectionOp.append(["Replay of ledger_7 running."]),
        "Task & Goals": SectionOp.append(["Keep the cut-over window short."]),
        "Key Facts & Decisions": SectionOp.append(
            ["Marcus chose Kafka over the outbox table.", "Retention stays at 7 years."]
        ),
        "Files & Context": SectionOp.append(["services/billing/replay/runner.py — replay driver"]),
        "Errors & Corrections": SectionOp.append(["Assumed replay was idempotent; it is not."]),
        "Open Issues": SectionOp.append(["Confirm the replay window with Priya"]),
    }


def _many_paths() -> str:
    return "\n".join(
        f"- {('src', 'lib', 'tests', 'docs')[i % 4]}/ledger_{i // 4}/part_{i}."
        f"{('py', 'ts', 'md', 'sql')[i % 4]}"
        for i in range(240)
    )


MANY_PATHS_DOCUMENT = render_document({**BODIES, "Files & Context": _many_paths()})


def update_drops_one_path() -> Ops:
    """A Files & Context rewrite that keeps 239 of 240 paths and annotates one: the guard
    must find the one dropped path among hundreds and put its line back."""
    lines = _many_paths().split("\n")
    lines[17] = lines[17] + " (renamed in review)"
    del lines[200]
    return {**all_keep(), "Files & Context": SectionOp.update("\n".join(lines))}


MIXES: tuple[tuple[str, str, Callable[[], Ops]], ...] = (
    ("all KEEP", DOCUMENT, all_keep),
    ("small APPENDs", DOCUMENT, small_appends),
    ("seven passing UPDATEs", DOCUMENT, passing_updates),
    ("UPDATEs every guard rejects", DOCUMENT, rejected_updates),
    ("Key Facts layer-2 rejection", DOCUMENT, key_facts_anchor_rejection),
    ("typical commit", DOCUMENT, typical),
    ("Key Facts emergency: APPEND", EMERGENCY_DOCUMENT, emergency),
    ("Key Facts emergency: UPDATE", EMERGENCY_DOCUMENT, emergency_update),
    ("APPEND near a section bound", NEAR_BOUND_DOCUMENT, append_near_bound),
    ("Key Facts sentinel: APPEND", SENTINEL_DOCUMENT, append_under_sentinel),
    ("one UPDATE a guard rejects", DOCUMENT, one_rejected_update),
    ("APPENDs, every section near", CROWDED_DOCUMENT, appends_everywhere_near_bounds),
    ("UPDATE drops 1 of 240 paths", MANY_PATHS_DOCUMENT, update_drops_one_path),
)


# ---------------------------------------------------------------------------------------------
# A baseline written from the reference behaviour described in shared/spec/reference-wm-v2.md
# (sections 2 and 3: "## " line parsing, substring de-duplication, the reference regexes and a
# per-code-point token sum). It exists only to compare speeds on the same machine and the same
# input; it is not part of wm_core and is not used anywhere else.
# ---------------------------------------------------------------------------------------------

_B_BULLET = re.compile(r"^(?:[-*]|\d+[\.)])\s+(.*)$")
_B_TITLE_WORDS = re.compile(r"[A-Za-z][A-Za-z0-9\.]{2,}|[\d\.]+")
_B_TITLE_STOP_TEXT = (
    "the a an and or of to in on for with by at from session title working memory plan plans "
    "notes note"
)
_B_TITLE_STOP = set(_B_TITLE_STOP_TEXT.split())
_B_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_B_ANCHORS = (
    re.compile(
        rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}\s+(?:{_B_MONTHS})\s+\d{{4}}\b", re.IGNORECASE
    ),
    re.compile(
        r"\b\d+\s+(?:years?|months?|weeks?|days?|kids?|children|hours?|miles?|times?|sessions?|"
        r"rounds?|visits?|dollars?|euros?|pounds?|bedrooms?|paintings?|people|persons?)\b"
        r"|\$\d[\d,]*|\b\d+\s+(?:AM|PM)\b",
        re.IGNORECASE,
    ),
    re.compile(r"\b(?:because|decided|chose|committed|agreed|resolved)\b", re.IGNORECASE),
)
_B_CAPITALIZED = re.compile(r"\b[A-Z][a-zA-Z]{2,}\b")
_B_ANCHOR_STOP_TEXT = (
    "the a an and or of to in on for with by at from is are was were has have had been be will "
    "would could should may might shall this that these those not no but if then so as it its "
    "they their them she her he him his we our us you your who which what when where how why "
    "all each every both few more most other some such than too very also just about after "
    "before between into through during again further once here there over under out up down "
    "off own same only new old key facts decisions session working memory"
)
_B_ANCHOR_STOP = set(_B_ANCHOR_STOP_TEXT.split())
_B_PATH = re.compile(
    r"(?:[\w./\\-]+\.(?:py|ts|tsx|js|jsx|md|yaml|yml|json|sh|ps1|cmd|bat|toml|ini|cfg|rs|go))"
    r"|(?:[a-zA-Z_][\w\-]*(?:/[a-zA-Z_][\w\-]*){1,})",
    re.IGNORECASE,
)
_B_CJK = (
    (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2EBEF), (0x3040, 0x30FF),
    (0x31F0, 0x31FF), (0xAC00, 0xD7AF), (0x1100, 0x11FF), (0x3130, 0x318F), (0xFF00, 0xFFEF),
    (0x3000, 0x303F),
)  # fmt: skip
_B_SENTINEL = "⚠️ [CONSOLIDATION REQUIRED: consolidate Key Facts via UPDATE first.]"
_B_MARK = "[silently dropped, restored]"
_B_KEEP: dict[str, object] = {"op": "KEEP"}


def _b_weight(ch: str) -> float:
    code = ord(ch)
    if code < 0x1100:  # charitable fast path: nothing below U+1100 is heavy
        return 0.25
    if any(lo <= code <= hi for lo, hi in _B_CJK):
        return 1.5
    return 2.0 if code > 0xFFFF else 0.25


def _b_tokens(text: str) -> int:
    return math.ceil(sum(_b_weight(ch) for ch in text)) if text else 0


def _b_parse(text: str) -> dict[str, str]:
    sections: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("## "):
            if current is not None:
                sections[current] = "\n".join(lines).strip()
            current, lines = stripped, []
        elif current is not None:
            lines.append(line)
    if current is not None:
        sections[current] = "\n".join(lines).strip()
    return sections


def _b_items(text: str) -> list[str]:
    items: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _B_BULLET.match(stripped)
        item = match.group(1).strip() if match else stripped
        if item:
            items.append(item)
    return items


def _b_fresh(items: list[str], old: str) -> list[str]:
    lowered = old.lower()
    return [it for it in items if it.strip("_* `").lower() not in lowered]


def _b_anchors(text: str) -> set[str]:
    found: set[str] = set()
    for pattern in _B_ANCHORS:
        found.update(m.lower().strip() for m in pattern.findall(text))
    found.update(w.lower() for w in _B_CAPITALIZED.findall(text) if w.lower() not in _B_ANCHOR_STOP)
    return found


def _b_title(op: dict[str, object], old: str) -> dict[str, object]:
    if op.get("op") != "UPDATE":
        return op

    def words(text: str) -> set[str]:
        return {w.lower() for w in _B_TITLE_WORDS.findall(text)} - _B_TITLE_STOP

    old_words = words(old)
    if not old_words or old_words & words(str(op.get("content") or "").strip()):
        return op
    return _B_KEEP


def _b_key_facts(op: dict[str, object], old: str) -> dict[str, object]:
    kind = op.get("op")
    if kind == "KEEP":  # charitable: nothing is measured for a KEEP
        return op
    old_items = _b_items(old)
    tokens = _b_tokens(old)
    over = len(old_items) > 25 or tokens > 1500
    emergency = len(old_items) > 50 or tokens > 3000
    if kind == "APPEND":
        if not over:
            return op
        raw_items = op.get("items") or []
        fresh = _b_fresh([str(it) for it in raw_items if it], old)  # type: ignore[attr-defined]
        if emergency:
            return (
                _B_KEEP
                if _B_SENTINEL.lower() in old.lower()
                else {"op": "APPEND", "items": [_B_SENTINEL]}
            )
        return {"op": "APPEND", "items": fresh[:5]} if fresh else _B_KEEP
    new = str(op.get("content") or "").strip()
    new_items = _b_items(new)
    if not old_items:
        return op
    rejected = len(new_items) / len(old_items) < 0.15
    if not rejected:
        old_anchors = _b_anchors(old)
        if old_anchors:
            rejected = len(old_anchors & _b_anchors(new)) / len(old_anchors) < 0.70
    if not rejected:
        return op
    fresh = _b_fresh(new_items, old)
    return {"op": "APPEND", "items": fresh} if fresh and not emergency else _B_KEEP


def _b_files(op: dict[str, object], old: str) -> dict[str, object]:
    if op.get("op") != "UPDATE":
        return op
    new = str(op.get("content") or "").strip()
    old_paths, new_paths = set(_B_PATH.findall(old)), set(_B_PATH.findall(new))
    if not old_paths - new_paths:
        return op
    added = sorted(new_paths - old_paths)
    if not added:
        return _B_KEEP
    lines = new.splitlines()
    items = [next((ln.strip().lstrip("-*").strip() for ln in lines if p in ln), p) for p in added]
    return {"op": "APPEND", "items": items}


def _b_errors(op: dict[str, object], old: str) -> dict[str, object]:
    if op.get("op") != "UPDATE":
        return op
    fresh = _b_fresh(_b_items(str(op.get("content") or "").strip()), old)
    return {"op": "APPEND", "items": fresh} if fresh else _B_KEEP


def _b_issues(op: dict[str, object], old: str) -> dict[str, object]:
    if op.get("op") != "UPDATE":
        return op
    new = str(op.get("content") or "").strip()
    lowered = new.lower()
    dropped = []
    for item in _b_items(old):
        if _B_MARK in item:
            continue
        snippet = item[:40].lower().strip("_* `").strip()
        if snippet and snippet not in lowered:
            dropped.append(item)
    if not dropped:
        return op
    restored = "\n".join(f"- {_B_MARK} {item}" for item in dropped)
    return {"op": "UPDATE", "content": (new + ("\n" if new else "") + restored).strip()}


_B_GUARDS = {
    "Session Title": _b_title,
    "Key Facts & Decisions": _b_key_facts,
    "Files & Context": _b_files,
    "Errors & Corrections": _b_errors,
    "Open Issues": _b_issues,
}


def baseline_merge(previous: str, ops: Mapping[str, dict[str, object]]) -> str:
    parsed = _b_parse(previous)
    parts = ["# Working Memory", ""]
    for name in SECTIONS:
        op = ops.get(name)
        old = parsed.get("## " + name, "").rstrip()
        if old and op is not None and name in _B_GUARDS:
            op = _B_GUARDS[name](op, old)
        content = old
        if op is not None:
            kind = str(op.get("op") or "").upper()
            if kind == "UPDATE":
                content = str(op.get("content") or "").strip()
            elif kind == "APPEND":
                raw_items = op.get("items")
                rendered = "\n".join(
                    f"- {it.strip()}"
                    for it in (raw_items if isinstance(raw_items, list) else [])
                    if isinstance(it, str) and it.strip()
                )
                content = "\n".join(x for x in (old, rendered) if x)
        parts.append("## " + name)
        if content:
            parts.append(content)
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def _interleaved_medians(
    ours: Callable[[], object], theirs: Callable[[], object], rounds: int = 21, per_round: int = 40
) -> tuple[float, float]:
    """Median microseconds per call of each, measured in alternating batches.

    Alternating keeps the comparison fair on a machine whose speed drifts during the run.
    """
    for _ in range(per_round):  # warm-up
        ours()
        theirs()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for run, bucket in ((ours, samples[0]), (theirs, samples[1])):
            start = time.perf_counter()
            for _ in range(per_round):
                run()
            bucket.append((time.perf_counter() - start) / per_round * 1e6)
    return statistics.median(samples[0]), statistics.median(samples[1])


def _peak_kib(document: str, ops: Ops, merges: int) -> float:
    """Peak traced memory while running ``merges`` merges back to back."""
    tracemalloc.start()
    try:
        for _ in range(merges):
            merge(document, ops)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 1024


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also time the real reference (openviking 0.5.2 from PyPI, installed on first use "
        "into var/reference-venv) on the same inputs; see bench/reference_merge.py",
    )
    args = parser.parse_args(argv)
    print(f"working memory: {len(DOCUMENT.encode())} bytes, {DOCUMENT.count(chr(10))} lines")
    print(f"emergency variant: {len(EMERGENCY_DOCUMENT.encode())} bytes")
    print(
        f"{'mix':30} {'wm_core us':>10} {'baseline us':>11} {'speed-up':>8} "
        f"{'peak KiB x1':>11} {'peak KiB x100':>13}"
    )
    for label, document, make_ops in MIXES:
        ops = make_ops()
        as_dicts = tool_call_ops(ops)
        ours, theirs = _interleaved_medians(
            lambda: merge(document, ops),  # noqa: B023
            lambda: baseline_merge(document, as_dicts),  # noqa: B023
        )
        one, hundred = _peak_kib(document, ops, 1), _peak_kib(document, ops, 100)
        print(
            f"{label:30} {ours:10.1f} {theirs:11.1f} {theirs / ours:7.1f}x "
            f"{one:11.1f} {hundred:13.1f}"
        )
    print("us: median microseconds per merge, wm_core and baseline measured in alternation.")
    print("baseline: the reference algorithm re-implemented from the spec, same machine and input.")
    print("peak KiB: tracemalloc peak for 1 and for 100 consecutive merges (equal = flat).")
    if args.reference:
        return _reference_table()
    return 0


def _reference_table() -> int:
    """The real reference next to wm_core (bench/reference_merge.py), after the table above."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:  # run as a script: make ``bench`` importable
        sys.path.insert(0, root)
    from bench import reference_merge

    print()
    try:
        reference_merge.run()
    except reference_merge.ReferenceUnavailable as exc:
        print(f"reference unavailable: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
