"""The engine gives, for every input of the equivalence corpus, exactly the recorded output.

See ``golden_corpus.py``: a refactor of ``wm_core`` that changes any output, even by a byte,
fails here with the cases it changed.
"""

from __future__ import annotations

import difflib
import json

import pytest
from golden_corpus import GOLDEN, corpus, digest, load, run_case


@pytest.fixture(scope="module")
def golden() -> dict[str, dict[str, object]]:
    return load()


def _diff(expected: object, actual: object) -> str:
    lines = difflib.unified_diff(
        json.dumps(expected, ensure_ascii=False, indent=1).splitlines(),
        json.dumps(actual, ensure_ascii=False, indent=1).splitlines(),
        "recorded",
        "now",
        lineterm="",
        n=2,
    )
    return "\n".join(list(lines)[:60])


def test_golden_file_is_small_and_covers_every_entry_point(
    golden: dict[str, dict[str, object]],
) -> None:
    assert GOLDEN.stat().st_size < 2 * 1024 * 1024
    assert len(golden) > 3000
    prefixes = {case.split("/")[0] for case in golden}
    assert {"bench", "chain", "parse", "render", "tool-arguments", "creation"} <= prefixes
    assert {"tokens", "message-tokens", "validate", "odd-merge"} <= prefixes


def test_every_case_gives_the_recorded_output(golden: dict[str, dict[str, object]]) -> None:
    seen: set[str] = set()
    changed: list[str] = []
    for case_id, kind, value in corpus():
        seen.add(case_id)
        recorded = golden.get(case_id)
        assert recorded is not None, f"{case_id}: not in the golden file (regenerate it?)"
        assert recorded["input"] == digest(value), f"{case_id}: the corpus input changed"
        actual = run_case(kind, value)
        if actual != recorded["output"]:
            changed.append(f"{case_id}:\n{_diff(recorded['output'], actual)}")
    assert not changed, f"{len(changed)} case(s) changed; first:\n" + "\n".join(changed[:3])
    assert seen == set(golden)
