"""The one encoder of commit events: a domain event → ``wm.v1.CommitEvent`` bytes.

Events are stored as the exact bytes a client receives, so a replay through WatchCommit is a
read and a write with no re-encoding, and what a client sees late is what it would have seen
live. The composition root hands this encoder to the event log.
"""

from __future__ import annotations

import time
from typing import Any

from google.protobuf.duration_pb2 import Duration

from wm_core import CommitState, SkipReason
from wm_proto.v1 import resources_pb2 as pb
from wm_server.api import names
from wm_server.api.commit_wire import (
    commit_out,
    commit_summary_out,
    decision_out,
    memory_diff_out,
    op_out,
    state_out,
    usage_out,
)
from wm_server.api.stored_wire import timestamp
from wm_server.llm.chain import LlmCallFinished, LlmCallStarted, OpsParsed
from wm_server.services.commit_event_log import (
    CommitEvent,
    Completed,
    Failed,
    GuardDecided,
    Heartbeat,
    MemoriesExtracted,
    Phase1Finished,
    Phase2Started,
    RetryScheduled,
    WorkingMemoryStored,
    is_terminal,
)
from wm_server.storage.records import CommitRecord


def encode_event(session_id: str, commit_id: str, sequence: int, event: CommitEvent) -> bytes:
    stage, state, detail = _parts(session_id, event, sequence)
    message = pb.CommitEvent(
        commit=names.commit(session_id, commit_id),
        sequence=sequence,
        stage=stage,
        terminal=is_terminal(event),
        create_time=timestamp(time.time()),
        state=state_out(state),
        **detail,
    )
    return message.SerializeToString()


def _seconds(value: float) -> Duration:
    duration = Duration()
    duration.FromNanoseconds(round(value * 1e9))
    return duration


def _parts(
    session_id: str, event: CommitEvent, sequence: int
) -> tuple[pb.CommitStage.ValueType, CommitState, dict[str, Any]]:
    running = CommitState.RUNNING
    if isinstance(event, Phase1Finished):
        return _phase1(event.commit)
    if isinstance(event, Phase2Started):
        detail = pb.Phase2Started(
            attempt=event.attempt,
            mode=pb.PHASE2_MODE_CREATE if event.create else pb.PHASE2_MODE_UPDATE,
            previous_version=event.previous_version,
            covered_archives=[names.archive(session_id, s) for s in event.covered_seqs],
        )
        return pb.COMMIT_STAGE_PHASE2_STARTED, running, {"phase2_started": detail}
    if isinstance(event, LlmCallStarted):
        sent = pb.LlmRequestSent(
            provider=event.provider, model=event.model, purpose=str(event.purpose)
        )
        return pb.COMMIT_STAGE_LLM_REQUEST_SENT, running, {"llm_request_sent": sent}
    if isinstance(event, LlmCallFinished):
        received = pb.LlmResponseReceived(
            stop_reason=event.stop_reason,
            usage=usage_out(event.usage),
            duration=_seconds(event.duration_ms / 1000),
        )
        return pb.COMMIT_STAGE_LLM_RESPONSE_RECEIVED, running, {"llm_response_received": received}
    if isinstance(event, OpsParsed):
        parsed = pb.OpsParsed(
            ops=[op_out(s, op) for s, op in event.ops.items()], problems=list(event.problems)
        )
        return pb.COMMIT_STAGE_OPS_PARSED, running, {"ops_parsed": parsed}
    if isinstance(event, GuardDecided):
        decision = decision_out(event.decision.to_dict())
        return pb.COMMIT_STAGE_GUARD_DECISION, running, {"guard_decision": decision}
    if isinstance(event, WorkingMemoryStored):
        stored = pb.WorkingMemoryStored(
            version=event.version,
            estimated_tokens=event.estimated_tokens,
            abstract=event.abstract,
            pending_items=event.pending_items,
            pending_items_dropped=event.pending_dropped,
        )
        return pb.COMMIT_STAGE_WORKING_MEMORY_STORED, running, {"working_memory_stored": stored}
    if isinstance(event, MemoriesExtracted):
        diff = memory_diff_out(event.diff_json, session_id)
        return pb.COMMIT_STAGE_MEMORIES_EXTRACTED, running, {"memories_extracted": diff}
    if isinstance(event, RetryScheduled):
        retry = pb.RetryScheduled(
            attempt=event.attempt,
            delay=_seconds(event.delay_seconds),
            reason=event.reason,
            next_attempt_time=timestamp(event.next_attempt_at),
            provider_unavailable=event.provider_unavailable,
            wait_remaining=_seconds(event.wait_remaining_seconds),
        )
        return pb.COMMIT_STAGE_RETRY_SCHEDULED, CommitState.PENDING, {"retry_scheduled": retry}
    if isinstance(event, Completed):
        return pb.COMMIT_STAGE_COMPLETED, event.commit.state, {"completed": _final(event, sequence)}
    if isinstance(event, Failed):
        return pb.COMMIT_STAGE_FAILED, event.commit.state, {"failed": _final(event, sequence)}
    assert isinstance(event, Heartbeat)
    beat = pb.Heartbeat(last_sequence=sequence)
    return pb.COMMIT_STAGE_HEARTBEAT, event.state, {"heartbeat": beat}


def _phase1(record: CommitRecord) -> tuple[pb.CommitStage.ValueType, CommitState, dict[str, Any]]:
    archived = record.state is not CommitState.SKIPPED
    if archived:
        message = (
            f"archived {record.archived_message_count} messages into {record.archive_id};"
            f" kept {record.kept_message_count}"
        )
    elif record.skip_reason is SkipReason.NO_MESSAGES:
        message = "nothing to archive: the session has no live messages"
    else:
        message = (
            f"nothing to archive: all {record.kept_message_count} live messages are within"
            f" the keep window of {record.keep_recent_count}"
        )
    outcome = pb.Phase1Outcome(
        archived=archived,
        archive=names.archive_of_id(record.session_id, record.archive_id),
        archived_message_count=record.archived_message_count,
        kept_message_count=record.kept_message_count,
        archived_tokens=record.archived_tokens,
        skip_reason=commit_summary_out(record).skip_reason,
        message=message,
    )
    stage = pb.COMMIT_STAGE_ARCHIVED if archived else pb.COMMIT_STAGE_SKIPPED
    return stage, record.state, {"phase1": outcome}


def _final(event: Completed | Failed, sequence: int) -> pb.Commit:
    commit = commit_out(event.commit)
    commit.last_sequence = sequence
    return commit
