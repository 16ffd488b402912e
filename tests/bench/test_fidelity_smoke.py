"""The fidelity benchmark still runs, through the real pipeline, and still measures something.

A reduced scenario (6 commits, 2 misbehaving models) keeps ``make test`` fast while guarding
the benchmark against rot: the guarded strategy must keep every planted path and error record,
and the unguarded baseline must still lose some, or the behaviors no longer misbehave.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fidelity.behaviors import Lazy, RewritesErrors  # noqa: E402
from bench.fidelity.report import measure, results_table  # noqa: E402
from bench.fidelity.scenario import SCENARIO, FactClass  # noqa: E402
from bench.fidelity.strategies import GUARDED, NAIVE, REWRITE, run_all  # noqa: E402

COMMITS = 6


async def test_guards_keep_every_path_and_error_in_a_short_session() -> None:
    scenario = SCENARIO.upto(COMMITS)
    traces = await run_all([Lazy, RewritesErrors], scenario)
    by_key = {(t.behavior, t.strategy): t for t in traces}
    assert len(by_key) == 6
    table = results_table(traces)
    for behavior in ("lazy", "rewrites_errors"):
        guarded = by_key[(behavior, GUARDED)]
        assert [c.state for c in guarded.commits] == ["completed"] * COMMITS
        kept = measure(guarded.final.document, scenario, COMMITS - 1)
        assert kept.ratio(FactClass.PATH) == 1, table
        assert kept.ratio(FactClass.ERROR) == 1, table
        assert guarded.notes, "the misbehaving model should have made a guard intervene"
    # The baselines see the same answers without guards, and lose what the guards kept.
    lazy = measure(by_key[("lazy", NAIVE)].final.document, scenario, COMMITS - 1)
    assert lazy.ratio(FactClass.PATH) < 1 and lazy.ratio(FactClass.ERROR) < 1
    rewritten = measure(by_key[("rewrites_errors", REWRITE)].final.document, scenario, COMMITS - 1)
    assert rewritten.ratio(FactClass.ERROR) < 1
