"""The offline summarizer on the fidelity scenario, through the real service and its guards.

It is the provider a new user meets first, so its working memory must read well on a long
session: every planted path and error record kept, each path listed in one spelling, and no
item in two sections, after every one of the 32 commits.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fidelity.behaviors import Offline  # noqa: E402
from bench.fidelity.report import measure  # noqa: E402
from bench.fidelity.scenario import SCENARIO, FactClass  # noqa: E402
from bench.fidelity.strategies import run_guarded  # noqa: E402
from support.wm_checks import duplicate_spellings, items_in_two_sections  # noqa: E402


async def test_offline_summarizer_keeps_paths_and_errors_in_one_spelling_and_one_section() -> None:
    trace = await run_guarded(Offline(SCENARIO), SCENARIO)

    assert [c.state for c in trace.commits] == ["completed"] * len(SCENARIO.turns)
    for commit in trace.commits:
        assert duplicate_spellings(commit.document) == [], (commit.index, commit.document)
        assert items_in_two_sections(commit.document) == {}, (commit.index, commit.document)
    kept = measure(trace.final.document, SCENARIO, len(trace.commits) - 1)
    assert kept.ratio(FactClass.PATH) == 1
    assert kept.ratio(FactClass.ERROR) == 1
    assert kept.ratio(FactClass.ISSUE) == 1
