"""Train the clause classifier of ``wm_core._memory.disclosure`` on the bench's sets.

Why: the offline extractor reads a clause no rule recognised with a small linear classifier
(``none`` or a memory type) instead of one more regular expression per phrasing. Its weights
are generated data, written by this script from the sets in ``bench/memory_extraction/``
only, deterministically (fixed order, fixed epochs, no randomness): run it again and the
module is the same.

A clause's label is the type of the expected memory whose key terms it covers best (at least
half of their words, compared by the bench's own rule), else ``none``. The learner is an
averaged multi-class perceptron over ``disclosure.features``.

Usage::

    .venv/bin/python scripts/train_disclosure_weights.py            # write the weights module
    .venv/bin/python scripts/train_disclosure_weights.py --loso     # leave-one-split-out P/R

``--loso`` trains on every split but one, runs the whole offline extraction (the ops, read
back from the memory tool's arguments, and the guards, as the offline provider and the bench do) on the one left out with those weights, and
prints its precision and recall: an honest estimate of how the rules and the classifier do on
conversations they were not fitted to (the rules themselves were tuned on every split).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from memory_extraction_sets import (
    SPLITS,
    Conversation,
    Score,
    _tokens,
    _word_matches,
    load,
    score,
)

from wm_core import (
    DISCLOSURE_NONE,
    archive_text,
    disclosure_features,
    disclosure_units,
    extract_memories,
    guard_memory_ops,
    memory_tool_arguments,
    parse_memory_ops,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "wm_core" / "_memory" / "disclosure_weights.py"
EPOCHS = 12
COVERAGE = 0.5

Weights = dict[str, dict[str, float]]


def examples(conversations: Sequence[Conversation]) -> list[tuple[list[str], str]]:
    """(features, label) for every clause of the conversations (see the module docstring)."""
    found: list[tuple[list[str], str]] = []
    for conversation in conversations:
        for message, clause, question in disclosure_units(conversation.messages):
            tokens = _tokens(clause)
            label, best = DISCLOSURE_NONE, 0.0
            for expected in conversation.expected:
                words = [w for term in expected.terms for w in _tokens(term)]
                words = [w for w in words if not any(c.isdigit() for c in w)]  # dates resolve
                if not words:
                    continue
                covered = sum(_word_matches(w, tokens) for w in words) / len(words)
                if covered >= COVERAGE and covered > best:
                    label, best = expected.type, covered
            feats = disclosure_features(clause, message.role, question, conversation.date)
            found.append((feats, label))
    return found


def shared(splits: Mapping[str, Sequence[tuple[list[str], str]]]) -> set[str]:
    """The features seen in at least two splits: a word only one set of conversations used
    is its phrasing, not the language of a kind of fact, and is left out."""
    seen: defaultdict[str, set[str]] = defaultdict(set)
    for split, data in splits.items():
        for feats, _ in data:
            for f in feats:
                seen[f].add(split)
    return {f for f, where in seen.items() if len(where) >= 2}


def pooled(splits: Mapping[str, Sequence[tuple[list[str], str]]]) -> list[tuple[list[str], str]]:
    """Every split's examples, with only the features ``shared`` by two splits or more."""
    keep = shared(splits)
    return [([f for f in feats if f in keep], label) for d in splits.values() for feats, label in d]


def train(data: Sequence[tuple[list[str], str]]) -> Weights:
    """An averaged multi-class perceptron, deterministic."""
    labels = sorted({label for _, label in data} | {DISCLOSURE_NONE})
    weights: dict[str, defaultdict[str, float]] = {k: defaultdict(float) for k in labels}
    totals: dict[str, defaultdict[str, float]] = {k: defaultdict(float) for k in labels}
    stamps: dict[str, defaultdict[str, int]] = {k: defaultdict(int) for k in labels}
    step = 0
    for _ in range(EPOCHS):
        for feats, label in data:
            step += 1
            got = {k: sum(weights[k][f] for f in feats) for k in labels}
            guess = max(labels, key=lambda k: (got[k], k == DISCLOSURE_NONE))
            if guess == label:
                continue
            for k, sign in ((label, 1.0), (guess, -1.0)):
                for f in feats:
                    totals[k][f] += (step - stamps[k][f]) * weights[k][f]
                    stamps[k][f] = step
                    weights[k][f] += sign
    averaged: Weights = {}
    for k in labels:
        row: dict[str, float] = {}
        for f, w in weights[k].items():
            total = totals[k][f] + (step - stamps[k][f]) * w
            value = round(total / step, 3)
            if value:
                row[f] = value
        averaged[k] = dict(sorted(row.items()))
    return averaged


def write(weights: Mapping[str, Mapping[str, float]], splits: Sequence[str]) -> None:
    lines = [
        f'"""Generated by scripts/train_disclosure_weights.py from the splits {", ".join(splits)};',
        'do not edit."""',
        "",
        "from typing import Final",
        "",
        "# fmt: off",
        "WEIGHTS: Final[dict[str, dict[str, float]]] = {",
    ]
    for label, row in weights.items():
        lines.append(f"    {label!r}: {{")
        lines.extend(f"        {f!r}: {w!r}," for f, w in row.items())
        lines.append("    },")
    lines += ["}", "# fmt: on", ""]
    OUT.write_text("\n".join(lines), encoding="utf-8")


def extraction_score(split: str, weights: Weights) -> Score:
    """The whole offline extraction on ``split`` with ``weights``, as the offline provider and
    the bench run it: the ops, as the memory tool's arguments, read back, then guarded."""
    scores: dict[str, Score] = {}
    for conversation in load(split):
        ops = extract_memories(
            conversation.messages,
            [],
            message_dates=conversation.dates,
            disclosure_weights=weights,
        )
        parsed = parse_memory_ops(memory_tool_arguments(ops)).ops
        plan = guard_memory_ops(parsed, [], archive_text(conversation.messages))
        score(conversation, plan.ops, scores)
    return scores.get("all", Score())


def leave_one_out() -> None:
    data = {split: examples(load(split)) for split in SPLITS}
    total = Score()
    print(f"{'left out':>9} {'precision':>10} {'recall':>7}")
    for split in SPLITS:
        rest = pooled({other: data[other] for other in SPLITS if other != split})
        got = extraction_score(split, train(rest))
        print(f"{split:>9} {got.precision:>10.2f} {got.recall:>7.2f}")
        for name in ("expected", "extracted", "matched_expected", "matched_extracted"):
            setattr(total, name, getattr(total, name) + getattr(got, name))
    print(f"{'pooled':>9} {total.precision:>10.2f} {total.recall:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loso", action="store_true", help="leave-one-split-out figures")
    args = parser.parse_args()
    if args.loso:
        leave_one_out()
        return
    data = pooled({split: examples(load(split)) for split in SPLITS})
    write(train(data), SPLITS)
    print(f"{len(data)} clauses, weights written to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
