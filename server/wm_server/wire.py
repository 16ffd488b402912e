"""The wire form of what the service stores: records rendered as wm.v1 messages.

Both the API adapter (answers) and the event log (stored CommitEvent bytes) speak it, so it
sits beside them rather than inside either; request validation lives in ``api.convert``.
"""

from __future__ import annotations

import functools
import json
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from google.protobuf import any_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import code_pb2, error_details_pb2, status_pb2

from wm_core import (
    SECTIONS,
    Message,
    OpKind,
    Role,
    SectionOp,
    SessionSettings,
    TextPart,
    ToolUsePart,
    Trigger,
    estimate_tokens,
    output_ids,
    parse_document,
)
from wm_proto.v1 import resources_pb2 as pb
from wm_server.llm.port import Usage

if TYPE_CHECKING:
    from wm_server.services.memories import MemoryView
from wm_core import CommitState, SkipReason, archive_name
from wm_server.services.validation import clamped, in_timestamp_range
from wm_server.storage.records import (
    CommitRecord,
    SessionRecord,
    ToolOutputRecord,
    WorkingMemoryRecord,
    WorkingMemoryView,
)

ROLE_OUT = {
    Role.USER: pb.ROLE_USER,
    Role.ASSISTANT: pb.ROLE_ASSISTANT,
    Role.SYSTEM: pb.ROLE_SYSTEM,
    Role.TOOL: pb.ROLE_TOOL,
}
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


def timestamp(seconds: float | None) -> Timestamp | None:
    """Epoch seconds as a Timestamp; None for none, and for a stored time a Timestamp cannot
    carry (written before such times were refused: read as unset, never a failed read)."""
    if seconds is None or not in_timestamp_range(seconds):
        return None
    ts = Timestamp()
    _set_time(ts, clamped(seconds))
    return ts


class MessagesOut:
    """``message_out`` for the messages of assembled contexts, remembered by identity.

    A message assembly passes through unchanged is the very object the message cache
    decoded, and AssembleContext renders every one of them on every call: rendering each
    once per replica instead of once per call is most of what the response costs. An entry
    holds its message, so the identity it is found by cannot be reused while it is cached.
    Bounded by an estimate of the memory the rendered messages hold (least recently used
    out first), well below the message cache's own bound.
    """

    def __init__(self, min_count: int, max_weight: int = 8 * 1024 * 1024) -> None:
        self._items: OrderedDict[int, tuple[Message, pb.Message, int]] = OrderedDict()
        self._weight = 0
        self._max = max_weight
        self._min_count = min_count

    def all(self, messages: Sequence[Message]) -> list[pb.Message]:
        """Every message rendered; remembered only for contexts of ``min_count`` messages or
        more (shorter ones are not made of cached messages: not the same objects next time)."""
        if len(messages) < self._min_count:
            return [message_out(m) for m in messages]
        return [self(m) for m in messages]

    def __call__(self, message: Message) -> pb.Message:
        key = id(message)
        found = self._items.get(key)
        if found is not None and found[0] is message:
            self._items.move_to_end(key)
            return found[1]
        rendered = message_out(message)
        weight = rendered.ByteSize() + 400  # the object's own overhead besides its bytes
        if found is not None:
            self._weight -= found[2]
        self._items[key] = (message, rendered, weight)
        self._weight += weight
        while self._weight > self._max and self._items:
            _, (_, _, dropped) = self._items.popitem(last=False)
            self._weight -= dropped
        return rendered


def message_out(message: Message, position: int = 0, created: float | None = None) -> pb.Message:
    parts = []
    for part in message.parts:
        if isinstance(part, TextPart):
            parts.append(pb.Part(text=part.text))
        elif isinstance(part, ToolUsePart):
            parts.append(
                pb.Part(tool_use=pb.ToolUse(id=part.id, name=part.name, input_json=part.input_json))
            )
        else:
            parts.append(
                pb.Part(
                    tool_result=pb.ToolResult(
                        tool_use_id=part.tool_use_id, content=part.content, is_error=part.is_error
                    )
                )
            )
    return pb.Message(
        id=message.id,
        role=ROLE_OUT[message.role],
        parts=parts,
        estimated_tokens=message.estimated_tokens,
        create_time=timestamp(created),
        position=position,
        tool_output_ids=output_ids(message),
    )


_OUTPUT_KIND = {"result": pb.TOOL_OUTPUT_KIND_RESULT, "input": pb.TOOL_OUTPUT_KIND_INPUT}


def tool_output_out(record: ToolOutputRecord) -> pb.ToolOutput:
    return pb.ToolOutput(
        output_id=record.output_id,
        message_id=record.message_id,
        tool_use_id=record.tool_use_id,
        kind=_OUTPUT_KIND.get(record.kind, pb.TOOL_OUTPUT_KIND_UNSPECIFIED),
        format=record.format,
        size_bytes=record.size_bytes,
        line_count=record.line_count,
        synopsis=record.synopsis,
        create_time=timestamp(record.create_time),
    )


def role_out(role: Role) -> pb.Role.ValueType:
    return ROLE_OUT[role]


def session_out(record: SessionRecord) -> pb.Session:
    """Scalars through the constructor, the timestamps set in place and the configuration
    copied from its rendering (a handful per server): a submessage passed to the constructor
    is built and then copied, a third of what rendering a session cost."""
    session = pb.Session(
        session_id=record.session_id,
        message_count=record.message_count,
        total_message_count=record.total_message_count,
        pending_tokens=record.pending_tokens,
        live_tokens=record.live_tokens,
        keep_recent_count=record.keep_recent_count,
        archive_count=record.archive_count,
        working_memory_version=record.wm_version,
        user_id=record.user_id,
        agent_id=record.agent_id,
    )
    _set_time(session.create_time, record.create_time)
    _set_time(session.update_time, record.update_time)
    session.config.CopyFrom(_rendered_config(record.config))
    return session


def _set_time(field: Timestamp, seconds: float) -> None:
    """Seconds since the epoch into a Timestamp in place (a field of a message, or a new one).
    Whole seconds first: ``int(seconds * 1e9)`` truncates a product whose float spacing is
    ~30 µs near year 9999, which read 9999-12-31T23:59:59Z back as 23:59:58.999998464."""
    whole = math.floor(seconds)
    nanos = round((seconds - whole) * 1e9)
    if nanos > 999_999_999:
        whole, nanos = whole + 1, 0
    field.seconds, field.nanos = whole, nanos


MEMORY_TYPES_OUT = {
    "profile": pb.MEMORY_TYPE_PROFILE,
    "preference": pb.MEMORY_TYPE_PREFERENCE,
    "entity": pb.MEMORY_TYPE_ENTITY,
    "event": pb.MEMORY_TYPE_EVENT,
    "decision": pb.MEMORY_TYPE_DECISION,
    "procedure": pb.MEMORY_TYPE_PROCEDURE,
}
MEMORY_TYPES_IN = {number: name for name, number in MEMORY_TYPES_OUT.items()}
MEMORY_STATES_IN = {
    pb.MEMORY_STATE_ACTIVE: "active",
    pb.MEMORY_STATE_RETIRED: "retired",
    pb.MEMORY_STATE_SUPERSEDED: "superseded",
}
MEMORY_STATES_OUT = {name: number for number, name in MEMORY_STATES_IN.items()}


def memory_out(view: MemoryView) -> pb.Memory:
    row = view.row
    kind, _, who = row.owner.partition(":")
    memory = pb.Memory(
        memory_id=row.memory_id,
        user_id=who if kind == "user" else "",
        agent_id=who if kind == "agent" else "",
        session_id=row.session_id if kind == "session" else "",
        type=MEMORY_TYPES_OUT[row.type],
        text=row.text,
        fields=row.fields,
        event_time=timestamp(row.event_time),
        record_time=timestamp(row.record_time),
        create_time=timestamp(row.create_time),
        update_time=timestamp(row.update_time),
        state=MEMORY_STATES_OUT.get(row.state, pb.MEMORY_STATE_RETIRED),
        version=row.version,
        retire_reason=row.retire_reason,
        supersedes_memory_ids=view.lifecycle.supersedes,
        superseded_by_memory_id=view.lifecycle.superseded_by,
        valid_from=timestamp(row.create_time if row.event_time is None else row.event_time),
        valid_until=timestamp(view.lifecycle.valid_until),
        expire_time=timestamp(view.lifecycle.expire_time),
    )
    memory.sources.extend(
        pb.MemorySource(
            session_id=s.session_id,
            archive_id=archive_id(s.archive_seq) if s.archive_seq else "",
            message_ids=s.message_ids,
        )
        for s in view.sources
    )
    memory.history.extend(
        pb.MemoryVersion(
            version=v.version, text=v.text, type=MEMORY_TYPES_OUT[v.type], reason=v.reason,
            supersede_time=timestamp(v.supersede_time),
        )
        for v in view.history
    )  # fmt: skip
    return memory


@functools.lru_cache(maxsize=256)
def _rendered_config(settings: SessionSettings) -> pb.SessionConfig:
    """One rendering per distinct configuration, only ever copied from (never handed out)."""
    return config_out(settings)


def config_out(settings: SessionSettings) -> pb.SessionConfig:
    config = pb.SessionConfig()
    policy = settings.auto_commit
    for name in (
        "pending_token_threshold", "message_count_threshold", "keep_recent_count",
        "keep_recent_turns",
    ):  # fmt: skip
        if (value := getattr(policy, name)) is not None:
            setattr(config.auto_commit, name, value)
    if policy.idle_timeout_seconds is not None:
        config.auto_commit.idle_timeout.FromNanoseconds(round(policy.idle_timeout_seconds * 1e9))
    if policy.min_commit_interval_seconds is not None:
        config.auto_commit.min_commit_interval.FromNanoseconds(
            round(policy.min_commit_interval_seconds * 1e9)
        )
    if settings.memory_extraction is not None:
        config.memory_extraction = settings.memory_extraction
    if settings.tool_output_inline_chars is not None:
        config.tool_output_inline_chars = settings.tool_output_inline_chars
    if settings.provider is not None:
        config.model.provider = settings.provider
        config.model.model = settings.model or ""
    return config


def state_out(state: CommitState) -> pb.CommitState.ValueType:
    return _STATE_OUT[state]


def skip_out(reason: SkipReason | None) -> pb.SkipReason.ValueType:
    return _SKIP_OUT[reason] if reason else pb.SKIP_REASON_UNSPECIFIED


def working_memory_out(record: WorkingMemoryRecord) -> pb.WorkingMemory:
    bodies = parse_document(record.document)
    return pb.WorkingMemory(
        session_id=record.session_id,
        version=record.version,
        archive_id=archive_id(record.archive_seq),
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
        decisions=[decision_out(d) for d in json.loads(record.decisions_json or "[]")],
    )


def working_memory_view_out(view: WorkingMemoryView) -> pb.WorkingMemory:
    """The working memory with the session's pending items (the latest version only)."""
    memory = working_memory_out(view.record)
    memory.pending_items.extend(
        pb.PendingItem(
            section=p.item.section,
            text=p.item.text,
            source=p.item.source,
            commit_id=p.commit_id or "",
            archive_id=archive_id(p.item.archive_seq) if p.commit_id else "",
        )
        for p in view.pending
    )
    memory.pending_item_limit = view.pending_limit
    return memory


def archive_id(seq: int | None) -> str:
    return archive_name(seq) if seq else ""


def commit_summary_out(record: CommitRecord) -> pb.Commit:
    """The commit without its decisions and usage (see the commits module for the full one)."""
    return pb.Commit(
        commit_id=record.commit_id,
        session_id=record.session_id,
        archive_id=record.archive_id,
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
    """An archive without its messages (GetArchive adds them)."""
    commit = commit_out(record)
    archive = pb.Archive(
        archive_id=record.archive_id,
        session_id=record.session_id,
        commit_id=record.commit_id,
        state=state_out(record.state),
        abstract=record.abstract,
        message_count=record.archived_message_count,
        estimated_tokens=record.archived_tokens,
        decisions=commit.decisions,
        token_usage=commit.token_usage,
        create_time=timestamp(record.create_time),
        covered_by_archive_id=archive_id(record.covered_by_seq),
    )
    if commit.HasField("error"):
        archive.error.CopyFrom(commit.error)
    return archive


def usage_out(usage: Usage | dict[str, int]) -> pb.TokenUsage:
    if isinstance(usage, Usage):
        return pb.TokenUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=usage.cache_read_input_tokens,
            cache_creation_input_tokens=usage.cache_creation_input_tokens,
            llm_calls=usage.llm_calls,
        )
    return pb.TokenUsage(**usage)


def usage_json(usage: Usage) -> str:
    return json.dumps(
        {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "llm_calls": usage.llm_calls,
        }
    )


def kind_out(name: str) -> pb.SectionOpKind.ValueType:
    return _KIND_BY_NAME.get(name.upper(), pb.SECTION_OP_KIND_UNSPECIFIED)


def decision_out(decision: dict[str, Any]) -> pb.GuardDecision:
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
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="wm.v1"))
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


def memory_diff_out(text: str, state: str | None = None) -> pb.MemoryDiff:
    """A stored memory diff (``services.extraction.diff_json``) on the wire; ``state``
    overrides the stored one (an archive a later commit recovered)."""
    diff: dict[str, Any] = json.loads(text) if text else {}
    return pb.MemoryDiff(
        state=_MEMORY_STATES.get(
            state or diff.get("state", ""), pb.MEMORY_EXTRACTION_STATE_UNSPECIFIED
        ),
        created_memory_ids=diff.get("created", []),
        updated_memory_ids=diff.get("updated", []),
        merged_memory_ids=diff.get("merged", []),
        retired_memory_ids=diff.get("retired", []),
        deduplicated_memory_ids=diff.get("deduplicated", []),
        superseded_memory_ids=diff.get("superseded", []),
        refused=[
            pb.MemoryOpRefusal(
                op_index=r["op_index"],
                op=r["op"],
                text=r["text"],
                target_memory_ids=r["target_ids"],
                reason=r["reason"],
                duplicate=bool(r.get("duplicate")),
            )
            for r in diff.get("refused", [])
        ],
        message=diff.get("message", ""),
        problems=diff.get("problems", []),
        recovered_archive_ids=[archive_id(s) for s in diff.get("recovered_seqs", [])],
        usage=usage_out(diff.get("usage") or {}),
        empty_reason=EMPTY_REASONS.get(
            diff.get("empty_reason") or "", pb.MEMORY_EXTRACTION_EMPTY_REASON_UNSPECIFIED
        ),
    )


def commit_out(record: CommitRecord) -> pb.Commit:
    """The full commit: summary plus decisions, usage, error, coverage and memory diff."""
    commit = commit_summary_out(record)
    if record.memory_diff_json:
        commit.memory_diff.CopyFrom(
            memory_diff_out(record.memory_diff_json, record.memory_state or None)
        )
    commit.decisions.extend(decision_out(d) for d in json.loads(record.decisions_json))
    commit.token_usage.CopyFrom(usage_out(json.loads(record.usage_json) or {}))
    if record.error_reason:
        commit.error.CopyFrom(error_status(record.error_reason, record.error_message or ""))
    if record.covered_by_seq is not None:
        commit.covered_by_commit_id = record.covered_by_commit_id or ""
    return commit
