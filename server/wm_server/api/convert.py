"""Conversion between wm.v1 messages and domain values, validating on the way in.

Incoming messages are checked field by field; every problem becomes a BadRequest field
violation with its path (``messages[3].parts[0].tool_use.input_json``), so a client sees all
that is wrong with a batch at once, and nothing is stored.
"""

from __future__ import annotations

import json

from google.protobuf.timestamp_pb2 import Timestamp

from wm_core import SECTIONS, estimate_tokens, parse_document
from wm_core.messages import (
    Message,
    Part,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)
from wm_core.ops import SectionOp
from wm_proto.v1 import resources_pb2 as pb
from wm_server.errors import FieldViolation, InvalidArgument
from wm_server.services.validation import MAX_BATCH, MESSAGE_ID_PATTERN
from wm_server.storage.records import (
    CommitRecord,
    CommitState,
    SessionRecord,
    SkipReason,
    StoredMessage,
    WorkingMemoryRecord,
    archive_name,
)

MAX_PARTS = 256

_ROLE_IN = {
    pb.ROLE_USER: Role.USER,
    pb.ROLE_ASSISTANT: Role.ASSISTANT,
    pb.ROLE_SYSTEM: Role.SYSTEM,
    pb.ROLE_TOOL: Role.TOOL,
}
_ROLE_OUT = {v: k for k, v in _ROLE_IN.items()}
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


def timestamp(seconds: float | None) -> Timestamp | None:
    if seconds is None:
        return None
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def messages_in(messages: list[pb.Message], max_bytes: int) -> list[Message]:
    """Validate and convert a batch; raise InvalidArgument listing every violation."""
    violations: list[FieldViolation] = []
    if not messages:
        violations.append(
            FieldViolation("messages", "at least one message is required", "REQUIRED")
        )
    elif len(messages) > MAX_BATCH:
        violations.append(
            FieldViolation("messages", f"at most {MAX_BATCH} messages per call", "TOO_MANY")
        )
    if violations:
        raise InvalidArgument(violations)
    out: list[Message] = []
    for index, message in enumerate(messages):
        converted = _message_in(message, f"messages[{index}]", max_bytes, violations)
        if converted is not None:
            out.append(converted)
    if violations:
        raise InvalidArgument(violations[:100])
    return out


def _message_in(
    message: pb.Message, path: str, max_bytes: int, violations: list[FieldViolation]
) -> Message | None:
    before = len(violations)
    if message.id and not MESSAGE_ID_PATTERN.fullmatch(message.id):
        violations.append(
            FieldViolation(
                f"{path}.id", "must be 1-128 characters of [A-Za-z0-9._:-]", "INVALID_FORMAT"
            )
        )
    role = _ROLE_IN.get(message.role)
    if role is None:
        violations.append(
            FieldViolation(f"{path}.role", f"unknown role {message.role}", "INVALID_ENUM")
        )
    if not message.parts:
        violations.append(
            FieldViolation(f"{path}.parts", "at least one part is required", "REQUIRED")
        )
    elif len(message.parts) > MAX_PARTS:
        violations.append(FieldViolation(f"{path}.parts", f"at most {MAX_PARTS} parts", "TOO_MANY"))
    parts: list[Part] = []
    size = len(message.id)
    for index, part in enumerate(message.parts):
        part_path = f"{path}.parts[{index}]"
        kind = part.WhichOneof("kind")
        if kind == "text":
            parts.append(TextPart(part.text))
            size += len(part.text.encode())
        elif kind == "tool_use":
            use = part.tool_use
            if not use.id:
                violations.append(
                    FieldViolation(f"{part_path}.tool_use.id", "required", "REQUIRED")
                )
            if not use.name:
                violations.append(
                    FieldViolation(f"{part_path}.tool_use.name", "required", "REQUIRED")
                )
            input_json = use.input_json or "{}"
            try:
                decoded = json.loads(input_json)
            except ValueError:
                decoded = None
            if not isinstance(decoded, dict):
                violations.append(
                    FieldViolation(
                        f"{part_path}.tool_use.input_json", "must be a JSON object", "INVALID_JSON"
                    )
                )
            parts.append(ToolUsePart(use.id, use.name, input_json))
            size += len(use.id) + len(use.name.encode()) + len(input_json.encode())
        elif kind == "tool_result":
            result = part.tool_result
            if not result.tool_use_id:
                violations.append(
                    FieldViolation(f"{part_path}.tool_result.tool_use_id", "required", "REQUIRED")
                )
            parts.append(ToolResultPart(result.tool_use_id, result.content, result.is_error))
            size += len(result.tool_use_id) + len(result.content.encode())
        else:
            violations.append(
                FieldViolation(
                    part_path, "one of text, tool_use or tool_result is required", "REQUIRED"
                )
            )
    if size > max_bytes:
        violations.append(
            FieldViolation(path, f"message is {size} bytes; the limit is {max_bytes}", "TOO_LARGE")
        )
    if len(violations) > before or role is None:
        return None
    frozen = tuple(parts)
    return Message(message.id, role, frozen, message_tokens(frozen))


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
        role=_ROLE_OUT[message.role],
        parts=parts,
        estimated_tokens=message.estimated_tokens,
        create_time=timestamp(created),
        position=position,
    )


def stored_message_out(stored: StoredMessage) -> pb.Message:
    return message_out(stored.message, stored.position, stored.create_time)


def role_out(role: Role) -> int:
    return _ROLE_OUT[role]


def session_out(record: SessionRecord) -> pb.Session:
    return pb.Session(
        session_id=record.session_id,
        create_time=timestamp(record.create_time),
        update_time=timestamp(record.update_time),
        message_count=record.message_count,
        total_message_count=record.total_message_count,
        pending_tokens=record.pending_tokens,
        live_tokens=record.live_tokens,
        keep_recent_count=record.keep_recent_count,
        archive_count=record.archive_count,
        working_memory_version=record.wm_version,
    )


def state_out(state: CommitState) -> int:
    return _STATE_OUT[state]


def skip_out(reason: SkipReason | None) -> int:
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
    )


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
    )


def ops_in(ops: list[pb.SectionOp]) -> dict[str, SectionOp]:
    """Client ops by section; unknown or repeated sections are field violations."""
    violations: list[FieldViolation] = []
    out: dict[str, SectionOp] = {}
    for index, op in enumerate(ops):
        path = f"ops[{index}]"
        if op.section not in SECTIONS:
            violations.append(
                FieldViolation(
                    f"{path}.section", f"must be one of {', '.join(SECTIONS)}", "UNKNOWN_SECTION"
                )
            )
            continue
        if op.section in out:
            violations.append(FieldViolation(f"{path}.section", "section given twice", "DUPLICATE"))
            continue
        if op.kind == pb.SECTION_OP_KIND_UPDATE:
            out[op.section] = SectionOp.update(op.content)
        elif op.kind == pb.SECTION_OP_KIND_APPEND:
            if not op.items:
                violations.append(FieldViolation(f"{path}.items", "APPEND needs items", "REQUIRED"))
                continue
            out[op.section] = SectionOp.append(op.items)
        elif op.kind in (pb.SECTION_OP_KIND_KEEP, pb.SECTION_OP_KIND_UNSPECIFIED):
            out[op.section] = SectionOp.keep()
        else:
            violations.append(
                FieldViolation(f"{path}.kind", f"unknown kind {op.kind}", "INVALID_ENUM")
            )
    if violations:
        raise InvalidArgument(violations)
    for section in SECTIONS:
        out.setdefault(section, SectionOp.keep())
    return out


def archive_out(record: CommitRecord) -> pb.Archive:
    """An archive without its messages (GetArchive adds them)."""
    from wm_server.services.events import commit_out

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
