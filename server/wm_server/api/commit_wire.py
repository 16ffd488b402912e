"""The wire form of what commits produce: commits and their archives, working memories with
their guard decisions, token usage, memory diffs and a failed Phase 2's error status.

The servicer answers with these and the event encoder (``api.commit_event_encoder``) builds CommitEvents
from them. Each stored JSON column is read in the shape its writer defines and exports:
decisions as ``wm_core.DecisionDict`` (``storage.codec.decisions_json``), usage as
``llm.port.usage_record``, memory diffs as ``services.extraction.StoredDiff`` (``diff_json``).
"""

from __future__ import annotations

import json

from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from wm_core import (
    SECTIONS,
    CommitState,
    DecisionDict,
    OpKind,
    SectionOp,
    SkipReason,
    Trigger,
    estimate_tokens,
    parse_document,
)
from wm_proto.v1 import resources_pb2 as pb
from wm_server.api import names
from wm_server.api.status import ERROR_DOMAIN
from wm_server.api.stored_wire import timestamp
from wm_server.llm.port import Usage, usage_of
from wm_server.services.extraction import read_diff
from wm_server.storage.codec import read_decisions
from wm_server.storage.records import CommitRecord, WorkingMemoryRecord, WorkingMemoryView

_STATE_OUT = {
    CommitState.PENDING: pb.COMMIT_STATE_PENDING,
    CommitState.RUNNING: pb.COMMIT_STATE_RUNNING,
    CommitState.COMPLETED: pb.COMMIT_STATE_COMPLETED,
    CommitState.FAILED: pb.COMMIT_STATE_FAILED,
    CommitState.SKIPPED: pb.COMMIT_STATE_SKIPPED,
}
_SKIP_OUT = {
    SkipReason.NO_MESSAGES: pb.SKIP_REASON_NO_MESSAGES,
    SkipReason.WITHIN_KEEP_WINDOW: pb.SKIP_REASON_WITHIN_KEEP_WINDOW,
}
_KIND = {
    OpKind.KEEP: pb.SECTION_OP_KIND_KEEP,
    OpKind.UPDATE: pb.SECTION_OP_KIND_UPDATE,
    OpKind.APPEND: pb.SECTION_OP_KIND_APPEND,
}
_KIND_BY_NAME = {k.value: v for k, v in _KIND.items()}

# Phase 2 failure reasons and the canonical code a client sees in Commit.error.
ERROR_CODES = {
    "LLM_UNAVAILABLE": code_pb2.UNAVAILABLE,
    "LLM_REJECTED": code_pb2.FAILED_PRECONDITION,
    "GENERATION_FAILED": code_pb2.ABORTED,
    "INTERNAL": code_pb2.INTERNAL,
}


def state_out(state: CommitState) -> pb.CommitState.ValueType:
    return _STATE_OUT[state]


def skip_out(reason: SkipReason | None) -> pb.SkipReason.ValueType:
    return _SKIP_OUT[reason] if reason else pb.SKIP_REASON_UNSPECIFIED


def working_memory_out(record: WorkingMemoryRecord) -> pb.WorkingMemory:
    bodies = parse_document(record.document)
    return pb.WorkingMemory(
        name=names.working_memory(record.session_id, record.version),
        version=record.version,
        archive=names.archive(record.session_id, record.archive_seq),
        document=record.document,
        sections=[
            pb.SectionBody(
                name=name,
                body=bodies.get(name, ""),
                estimated_tokens=estimate_tokens(bodies.get(name, "")),
            )
            for name in SECTIONS
        ],
        estimated_tokens=record.estimated_tokens,
        create_time=timestamp(record.create_time),
        decisions=[decision_out(d) for d in read_decisions(record.decisions_json)],
    )


def working_memory_view_out(view: WorkingMemoryView) -> pb.WorkingMemory:
    """The working memory with the session's pending items (the latest version only)."""
    memory = working_memory_out(view.record)
    session_id = view.record.session_id
    memory.pending_items.extend(
        pb.PendingItem(
            section=p.item.section,
            text=p.item.text,
            source=p.item.source,
            commit=names.commit(session_id, p.commit_id or ""),
            archive=names.archive(session_id, p.item.archive_seq) if p.commit_id else "",
        )
        for p in view.pending
    )
    memory.pending_item_limit = view.pending_limit
    return memory


def commit_summary_out(record: CommitRecord) -> pb.Commit:
    """The commit without its decisions and usage (see the commits module for the full one)."""
    return pb.Commit(
        name=names.commit(record.session_id, record.commit_id),
        archive=names.archive_of_id(record.session_id, record.archive_id),
        state=state_out(record.state),
        keep_recent_count=record.keep_recent_count,
        archived_message_count=record.archived_message_count,
        kept_message_count=record.kept_message_count,
        archived_tokens=record.archived_tokens,
        skip_reason=skip_out(record.skip_reason),
        attempt_count=record.attempt_count,
        working_memory_version=record.wm_version,
        last_sequence=record.last_sequence,
        create_time=timestamp(record.create_time),
        complete_time=timestamp(record.complete_time),
        trigger=_TRIGGER_OUT[record.trigger] if record.trigger else pb.COMMIT_TRIGGER_UNSPECIFIED,
    )


_TRIGGER_OUT = {
    Trigger.CLIENT: pb.COMMIT_TRIGGER_CLIENT,
    Trigger.PENDING_TOKENS: pb.COMMIT_TRIGGER_PENDING_TOKENS,
    Trigger.MESSAGE_COUNT: pb.COMMIT_TRIGGER_MESSAGE_COUNT,
    Trigger.IDLE: pb.COMMIT_TRIGGER_IDLE,
}


def archive_out(record: CommitRecord) -> pb.Archive:
    """An archive (GetArchive adds its working memory; ListMessages reads its messages)."""
    commit = commit_out(record)
    archive = pb.Archive(
        name=names.archive_of_id(record.session_id, record.archive_id),
        commit=names.commit(record.session_id, record.commit_id),
        state=state_out(record.state),
        abstract=record.abstract,
        message_count=record.archived_message_count,
        estimated_tokens=record.archived_tokens,
        decisions=commit.decisions,
        token_usage=commit.token_usage,
        create_time=timestamp(record.create_time),
        covered_by_archive=names.archive(record.session_id, record.covered_by_seq),
    )
    if commit.HasField("error"):
        archive.error.CopyFrom(commit.error)
    return archive


def usage_out(usage: Usage) -> pb.TokenUsage:
    return pb.TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
        cache_creation_input_tokens=usage.cache_creation_input_tokens,
        llm_calls=usage.llm_calls,
    )


def kind_out(name: str) -> pb.SectionOpKind.ValueType:
    return _KIND_BY_NAME.get(name.upper(), pb.SECTION_OP_KIND_UNSPECIFIED)


def decision_out(decision: DecisionDict) -> pb.GuardDecision:
    return pb.GuardDecision(
        section=decision["section"],
        requested_kind=kind_out(decision["requested"]),
        applied_kind=kind_out(decision["applied"]),
        guard=decision["guard"],
        reason=decision["reason"],
        dropped_items=decision.get("items_dropped", []),
        restored_items=decision.get("items_restored", []),
        refused_items=decision.get("items_refused", []),
    )


def op_out(section: str, op: SectionOp) -> pb.SectionOp:
    return pb.SectionOp(section=section, kind=_KIND[op.kind], content=op.content, items=op.items)


def error_status(reason: str, message: str) -> status_pb2.Status:
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN))
    return status_pb2.Status(
        code=ERROR_CODES.get(reason, code_pb2.INTERNAL), message=message, details=[info]
    )


_MEMORY_STATES = {
    "extracted": pb.MEMORY_EXTRACTION_STATE_EXTRACTED,
    "off": pb.MEMORY_EXTRACTION_STATE_OFF,
    "failed": pb.MEMORY_EXTRACTION_STATE_FAILED,
    "recovered": pb.MEMORY_EXTRACTION_STATE_RECOVERED,
}


EMPTY_REASONS = {
    "nothing_new": pb.MEMORY_EXTRACTION_EMPTY_REASON_NOTHING_NEW,
    "all_refused": pb.MEMORY_EXTRACTION_EMPTY_REASON_ALL_REFUSED,
    "no_tool_call": pb.MEMORY_EXTRACTION_EMPTY_REASON_NO_TOOL_CALL,
    "failed": pb.MEMORY_EXTRACTION_EMPTY_REASON_FAILED,
}


def memory_diff_out(text: str, session_id: str, state: str | None = None) -> pb.MemoryDiff:
    """A stored memory diff (``services.extraction.diff_json``) of a commit of
    ``session_id`` on the wire; ``state`` overrides the stored one (an archive a later commit
    recovered)."""
    diff = read_diff(text)

    def memories(key: str) -> list[str]:
        ids: list[str] = diff.get(key, [])  # type: ignore[assignment]  # the id lists of StoredDiff
        return [names.memory(m) for m in ids]

    return pb.MemoryDiff(
        state=_MEMORY_STATES.get(
            state or diff.get("state", ""), pb.MEMORY_EXTRACTION_STATE_UNSPECIFIED
        ),
        created_memories=memories("created"),
        updated_memories=memories("updated"),
        merged_memories=memories("merged"),
        retired_memories=memories("retired"),
        deduplicated_memories=memories("deduplicated"),
        superseded_memories=memories("superseded"),
        refused=[
            pb.MemoryOpRefusal(
                op_index=r["op_index"],
                op=r["op"],
                text=r["text"],
                target_memories=[names.memory(m) for m in r["target_ids"]],
                reason=r["reason"],
                duplicate=bool(r.get("duplicate")),
            )
            for r in diff.get("refused", [])
        ],
        message=diff.get("message", ""),
        problems=diff.get("problems", []),
        recovered_archives=[names.archive(session_id, s) for s in diff.get("recovered_seqs", [])],
        usage=usage_out(usage_of(diff.get("usage"))),
        empty_reason=EMPTY_REASONS.get(
            diff.get("empty_reason") or "", pb.MEMORY_EXTRACTION_EMPTY_REASON_UNSPECIFIED
        ),
    )


def commit_out(record: CommitRecord) -> pb.Commit:
    """The full commit: summary plus decisions, usage, error, coverage and memory diff."""
    commit = commit_summary_out(record)
    if record.memory_diff_json:
        commit.memory_diff.CopyFrom(
            memory_diff_out(record.memory_diff_json, record.session_id, record.memory_state or None)
        )
    commit.decisions.extend(decision_out(d) for d in read_decisions(record.decisions_json))
    commit.token_usage.CopyFrom(usage_out(usage_of(json.loads(record.usage_json))))
    if record.error_reason:
        commit.error.CopyFrom(error_status(record.error_reason, record.error_message or ""))
    if record.covered_by_seq is not None:
        commit.covered_by_commit = names.commit(
            record.session_id, record.covered_by_commit_id or ""
        )
    return commit
