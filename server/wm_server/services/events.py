"""Builders of the commit progress events, serialized as wm.v1.CommitEvent.

Events are stored as the exact bytes a client receives, so a replay through WatchCommit is a
read and a write with no re-encoding, and what a client sees late is what it would have seen
live.
"""

from __future__ import annotations

import time
from typing import Any

from wm_core import Decision, SectionOp
from wm_proto.v1 import resources_pb2 as pb
from wm_server.llm.port import Usage
from wm_server.storage.records import CommitRecord, CommitState, WorkingMemoryRecord
from wm_server.wire import (
    commit_out,
    commit_summary_out,
    decision_out,
    op_out,
    state_out,
    timestamp,
    usage_out,
)


def _event(commit_id: str, sequence: int, stage: int, state: CommitState, **detail: Any) -> bytes:
    event = pb.CommitEvent(
        commit_id=commit_id,
        sequence=sequence,
        stage=stage,
        terminal=stage
        in (pb.COMMIT_STAGE_COMPLETED, pb.COMMIT_STAGE_FAILED, pb.COMMIT_STAGE_SKIPPED),
        create_time=timestamp(time.time()),
        state=state_out(state),
        **detail,
    )
    return event.SerializeToString()


def phase1(record: CommitRecord) -> bytes:
    archived = record.state is not CommitState.SKIPPED
    if archived:
        message = (
            f"archived {record.archived_message_count} messages into {record.archive_id};"
            f" kept {record.kept_message_count}"
        )
    elif record.skip_reason and record.skip_reason.value == "no_messages":
        message = "nothing to archive: the session has no live messages"
    else:
        message = (
            f"nothing to archive: all {record.kept_message_count} live messages are within"
            f" the keep window of {record.keep_recent_count}"
        )
    outcome = pb.Phase1Outcome(
        archived=archived,
        archive_id=record.archive_id,
        archived_message_count=record.archived_message_count,
        kept_message_count=record.kept_message_count,
        archived_tokens=record.archived_tokens,
        skip_reason=commit_summary_out(record).skip_reason,
        message=message,
    )
    stage = pb.COMMIT_STAGE_ARCHIVED if archived else pb.COMMIT_STAGE_SKIPPED
    return _event(record.commit_id, 1, stage, record.state, phase1=outcome)


def phase2_started(
    commit_id: str, seq: int, attempt: int, create: bool, previous: int, covered: list[str]
) -> bytes:
    detail = pb.Phase2Started(
        attempt=attempt,
        mode=pb.PHASE2_MODE_CREATE if create else pb.PHASE2_MODE_UPDATE,
        previous_version=previous,
        covered_archive_ids=covered,
    )
    return _event(
        commit_id, seq, pb.COMMIT_STAGE_PHASE2_STARTED, CommitState.RUNNING, phase2_started=detail
    )


def llm_request(commit_id: str, seq: int, provider: str, model: str, purpose: str) -> bytes:
    detail = pb.LlmRequestSent(provider=provider, model=model, purpose=purpose)
    return _event(
        commit_id,
        seq,
        pb.COMMIT_STAGE_LLM_REQUEST_SENT,
        CommitState.RUNNING,
        llm_request_sent=detail,
    )


def llm_response(
    commit_id: str, seq: int, stop_reason: str, usage: Usage, duration_ms: int
) -> bytes:
    detail = pb.LlmResponseReceived(
        stop_reason=stop_reason, usage=usage_out(usage), duration_ms=duration_ms
    )
    return _event(
        commit_id,
        seq,
        pb.COMMIT_STAGE_LLM_RESPONSE_RECEIVED,
        CommitState.RUNNING,
        llm_response_received=detail,
    )


def ops_parsed(commit_id: str, seq: int, ops: dict[str, SectionOp], problems: list[str]) -> bytes:
    detail = pb.OpsParsed(ops=[op_out(s, op) for s, op in ops.items()], problems=problems)
    return _event(
        commit_id, seq, pb.COMMIT_STAGE_OPS_PARSED, CommitState.RUNNING, ops_parsed=detail
    )


def guard_decision(commit_id: str, seq: int, decision: Decision) -> bytes:
    return _event(
        commit_id,
        seq,
        pb.COMMIT_STAGE_GUARD_DECISION,
        CommitState.RUNNING,
        guard_decision=decision_out(decision.to_dict()),
    )


def retry_scheduled(commit_id: str, seq: int, attempt: int, delay: float, reason: str) -> bytes:
    detail = pb.RetryScheduled(attempt=attempt, delay_ms=int(delay * 1000), reason=reason)
    return _event(
        commit_id, seq, pb.COMMIT_STAGE_RETRY_SCHEDULED, CommitState.PENDING, retry_scheduled=detail
    )


def retry_requested(commit_id: str, seq: int) -> bytes:
    detail = pb.RetryScheduled(attempt=0, delay_ms=0, reason="RetryCommit requested")
    return _event(
        commit_id, seq, pb.COMMIT_STAGE_RETRY_SCHEDULED, CommitState.PENDING, retry_scheduled=detail
    )


def completion(
    record: CommitRecord, wm: WorkingMemoryRecord | None, first_seq: int
) -> list[tuple[int, bytes, bool]]:
    """WM stored + completed (or just failed), numbered from ``first_seq``."""
    if wm is None:
        return [
            (
                first_seq,
                _event(
                    record.commit_id,
                    first_seq,
                    pb.COMMIT_STAGE_FAILED,
                    record.state,
                    failed=_final(record, first_seq),
                ),
                True,
            )
        ]
    stored = pb.WorkingMemoryStored(
        version=wm.version, estimated_tokens=wm.estimated_tokens, abstract=record.abstract
    )
    return [
        (
            first_seq,
            _event(
                record.commit_id,
                first_seq,
                pb.COMMIT_STAGE_WORKING_MEMORY_STORED,
                CommitState.RUNNING,
                working_memory_stored=stored,
            ),
            False,
        ),
        (
            first_seq + 1,
            _event(
                record.commit_id,
                first_seq + 1,
                pb.COMMIT_STAGE_COMPLETED,
                record.state,
                completed=_final(record, first_seq + 1),
            ),
            True,
        ),
    ]


def _final(record: CommitRecord, last_sequence: int) -> pb.Commit:
    commit = commit_out(record)
    commit.last_sequence = last_sequence
    return commit


def heartbeat(commit_id: str, last_sequence: int, state: CommitState) -> pb.CommitEvent:
    return pb.CommitEvent(
        commit_id=commit_id,
        sequence=last_sequence,
        stage=pb.COMMIT_STAGE_HEARTBEAT,
        create_time=timestamp(time.time()),
        state=state_out(state),
        heartbeat=pb.Heartbeat(last_sequence=last_sequence),
    )
