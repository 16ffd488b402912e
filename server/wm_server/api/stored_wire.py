"""The wire form of what the service stores, for the records every RPC shares: timestamps,
messages, tool outputs, sessions and their configuration, long-term memories.

The servicer answers with these and the event encoder stamps its events with ``timestamp``;
what commits produce (commits, archives, working memories, guard decisions, memory diffs) is
``api.commit_wire``'s. Request validation lives in ``api.convert``.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Sequence

from google.protobuf.timestamp_pb2 import Timestamp

from wm_core import Message, Role, SessionSettings, TextPart, ToolUsePart, output_ids
from wm_proto.v1 import resources_pb2 as pb
from wm_server.api import names
from wm_server.services.memory_content import MemoryView
from wm_server.services.validation import clamped, in_timestamp_range
from wm_server.storage.records import SessionRecord, ToolOutputRecord

ROLE_OUT = {
    Role.USER: pb.ROLE_USER,
    Role.ASSISTANT: pb.ROLE_ASSISTANT,
    Role.SYSTEM: pb.ROLE_SYSTEM,
    Role.TOOL: pb.ROLE_TOOL,
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

    def all(self, messages: Sequence[Message], session_id: str) -> list[pb.Message]:
        """Every message rendered; remembered only for contexts of ``min_count`` messages or
        more (shorter ones are not made of cached messages: not the same objects next time).
        A cached message object belongs to one session, so its identity keys the session too."""
        if len(messages) < self._min_count:
            return [message_out(m, session_id, stored=False) for m in messages]
        return [self(m, session_id) for m in messages]

    def __call__(self, message: Message, session_id: str) -> pb.Message:
        key = id(message)
        found = self._items.get(key)
        if found is not None and found[0] is message:
            self._items.move_to_end(key)
            return found[1]
        rendered = message_out(message, session_id, stored=False)
        weight = rendered.ByteSize() + 400  # the object's own overhead besides its bytes
        if found is not None:
            self._weight -= found[2]
        self._items[key] = (message, rendered, weight)
        self._weight += weight
        while self._weight > self._max and self._items:
            _, (_, _, dropped) = self._items.popitem(last=False)
            self._weight -= dropped
        return rendered


def message_out(
    message: Message,
    session_id: str,
    position: int = 0,
    created: float | None = None,
    *,
    stored: bool = True,
) -> pb.Message:
    """A message on the wire; ``stored``: a message of the session (it has a name), not one
    AssembleContext made up (the summary, merged neighbours)."""
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
        tool_outputs=[names.tool_output(session_id, o) for o in output_ids(message)],
        name=names.message(session_id, message.id) if stored else "",
    )


_OUTPUT_KIND = {"result": pb.TOOL_OUTPUT_KIND_RESULT, "input": pb.TOOL_OUTPUT_KIND_INPUT}


def tool_output_out(record: ToolOutputRecord, session_id: str) -> pb.ToolOutput:
    return pb.ToolOutput(
        name=names.tool_output(session_id, record.output_id),
        message=names.message(session_id, record.message_id),
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
        name=names.session(record.session_id),
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
        name=names.memory(row.memory_id),
        owner=names.owner(kind, row.session_id if kind == "session" else who),
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
        supersedes=[names.memory(m) for m in view.lifecycle.supersedes],
        superseded_by=names.memory(view.lifecycle.superseded_by),
        valid_from=timestamp(row.create_time if row.event_time is None else row.event_time),
        valid_until=timestamp(view.lifecycle.valid_until),
        expire_time=timestamp(view.lifecycle.expire_time),
    )
    memory.sources.extend(
        pb.MemorySource(
            session=names.session(s.session_id),
            archive=names.archive(s.session_id, s.archive_seq),
            messages=[names.message(s.session_id, m) for m in s.message_ids],
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
