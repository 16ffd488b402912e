"""How the truncating behaviors answer the repair call that follows a cut-off answer.

A model asked for some sections sends those in full and KEEP for the rest; the "repair
ignored" variant resends its cut answer. Which first answers are cut does not change.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fidelity.behaviors import BrokenJson, BrokenJsonRepairIgnored  # noqa: E402
from bench.fidelity.scenario import SCENARIO, core_messages  # noqa: E402
from wm_core import SECTIONS, render_document, section_reminders  # noqa: E402
from wm_server.llm.port import ModelReply, RepairRequest, UpdateRequest  # noqa: E402

TRUNCATED = 2  # the first commit whose update answer is cut off
ASKED = ("Errors & Corrections", "Open Issues")


async def _first_then_repair(behavior: BrokenJson) -> tuple[ModelReply, ModelReply]:
    previous = render_document({SECTIONS[0]: SCENARIO.title.text, SECTIONS[1]: "Started."})
    messages = tuple(core_messages(SCENARIO.turns[TRUNCATED], SCENARIO))
    update = UpdateRequest(previous, messages, section_reminders(previous))
    first = await behavior.update(update)
    repair = RepairRequest(update, first, ("cut off",), ASKED)
    return first, await behavior.repair(repair)


async def test_repair_sends_the_asked_sections_in_full_and_keep_for_the_rest() -> None:
    first, repaired = await _first_then_repair(BrokenJson(SCENARIO))
    assert first.stop_reason == "max_tokens"
    assert repaired.stop_reason == "tool_use"
    assert isinstance(repaired.tool_input, dict)
    sections = repaired.tool_input["sections"]
    assert set(sections) == set(SECTIONS)
    for name in SECTIONS:
        if name in ASKED:
            assert sections[name]["op"] != "KEEP", name
        else:
            assert sections[name] == {"op": "KEEP"}, name


async def test_repair_ignored_resends_the_same_cut_answer() -> None:
    first, repaired = await _first_then_repair(BrokenJsonRepairIgnored(SCENARIO))
    assert repaired.stop_reason == "max_tokens"
    assert repaired.tool_input == first.tool_input


def test_first_answers_are_cut_on_the_same_commits() -> None:
    commits = range(len(SCENARIO.turns))
    cut = [i for i in commits if BrokenJson(SCENARIO).breakage(i) == "truncate"]
    assert cut == [2, 8, 14, 20, 26]
    ignored, plain = BrokenJsonRepairIgnored(SCENARIO), BrokenJson(SCENARIO)
    assert [ignored.breakage(i) for i in commits] == [plain.breakage(i) for i in commits]
