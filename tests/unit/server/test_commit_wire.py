"""What Phase 2 stores comes back on the wire whole: each stored JSON column is written by
its owner (storage.codec for decisions, llm.port for usage, services.extraction for the
memory diff) and read by api.commit_wire in that shape, rows from before a key existed
included."""

from __future__ import annotations

import json

from wm_core import Decision, Guard
from wm_proto.v1 import resources_pb2 as pb
from wm_server.api.commit_wire import decision_out, memory_diff_out, usage_out
from wm_server.llm.port import Usage, usage_json, usage_of
from wm_server.services.extraction import EmptyReason, Extraction, MemoryState, diff_json
from wm_server.services.memory_writes import MemoryDiff
from wm_server.storage.codec import decisions_json, read_decisions

USAGE = Usage(input_tokens=120, output_tokens=30, cache_read_input_tokens=7,
              cache_creation_input_tokens=3, llm_calls=2)  # fmt: skip


def test_a_decision_reads_back_with_every_field() -> None:
    decision = Decision(
        "Key Facts", "APPEND", "KEEP", Guard.KEY_FACTS, "throttled", ("a",), ("b",), ("c",)
    )
    [out] = [decision_out(d) for d in read_decisions(decisions_json([decision]))]
    assert (out.section, out.guard, out.reason) == ("Key Facts", "key_facts", "throttled")
    assert (out.requested_kind, out.applied_kind) == (
        pb.SECTION_OP_KIND_APPEND, pb.SECTION_OP_KIND_KEEP,
    )  # fmt: skip
    assert (list(out.dropped_items), list(out.restored_items), list(out.refused_items)) == (
        ["a"], ["b"], ["c"],
    )  # fmt: skip
    old = '[{"section": "Open Issues", "requested": "UPDATE", "applied": "UPDATE", ' \
        '"guard": "open_issues", "reason": "restored"}]'  # fmt: skip
    [before] = [decision_out(d) for d in read_decisions(old)]
    assert before.section == "Open Issues" and not before.refused_items
    assert read_decisions("") == []


def test_usage_reads_back_from_a_commit_and_from_a_diff() -> None:
    out = usage_out(usage_of(json.loads(usage_json(USAGE))))
    assert (out.input_tokens, out.output_tokens, out.llm_calls) == (120, 30, 2)
    assert (out.cache_read_input_tokens, out.cache_creation_input_tokens) == (7, 3)
    assert usage_of(None) == usage_of({}) == Usage()


def test_a_stored_memory_diff_reads_back_whole() -> None:
    extraction = Extraction(
        MemoryState.EXTRACTED, message="done", problems=("one op unreadable",), usage=USAGE,
        recovered_seqs=(2, 3),
    )  # fmt: skip
    applied = MemoryDiff(created=("mem_1",), superseded=("mem_0",), skipped=((4, "gone"),))
    out = memory_diff_out(diff_json(extraction, applied), "s")
    assert out.state == pb.MEMORY_EXTRACTION_STATE_EXTRACTED
    assert list(out.created_memories) == ["memories/mem_1"]
    assert list(out.superseded_memories) == ["memories/mem_0"]
    assert [(r.op_index, r.reason, r.duplicate) for r in out.refused] == [
        (-1, "not applied: gone", False)
    ]
    assert list(out.recovered_archives) == [
        "sessions/s/archives/archive_002", "sessions/s/archives/archive_003",
    ]  # fmt: skip
    assert out.usage.input_tokens == 120 and out.usage.llm_calls == 2
    assert list(out.problems) == ["one op unreadable"] and out.message == "done"
    assert out.empty_reason == pb.MEMORY_EXTRACTION_EMPTY_REASON_UNSPECIFIED
    nothing = memory_diff_out(diff_json(Extraction(MemoryState.EXTRACTED), MemoryDiff()), "s")
    assert nothing.empty_reason == pb.MEMORY_EXTRACTION_EMPTY_REASON_NOTHING_NEW
    assert EmptyReason.NOTHING_NEW.value == "nothing_new"
    # A diff stored before usage, recovery and empty reasons existed; the state overridden.
    old = memory_diff_out('{"state": "failed", "created": []}', "s", "recovered")
    assert old.state == pb.MEMORY_EXTRACTION_STATE_RECOVERED and not old.recovered_archives
    assert old.usage.input_tokens == 0 and memory_diff_out("", "s").state == 0
