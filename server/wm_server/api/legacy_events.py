"""Commit events stored before wm.v1's resource names, read as the contract says them now.

Events are stored as the bytes a client receives (``api.commit_event_encoder``). A database
written before the contract named its resources holds events whose reference fields carry
bare ids at the same field numbers (the commit, its archive, the archives a run covered, the
memories a diff names) and a few fields that changed type (millisecond integers that are
Durations now, ids of fields since removed). Such an event parses, with the bare ids in the
name fields and the retyped values among the unknown fields; this turns it into the event
the encoder writes today, so a replay never hands a client an id where a name belongs. The
retyped durations are read back from their old integers; the removed fields are dropped.
An event is recognised by its commit field: a bare id has no "/".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from wm_proto.v1 import resources_pb2 as pb
from wm_server.api import names


def is_legacy(event: pb.CommitEvent) -> bool:
    return bool(event.commit) and "/" not in event.commit


def upgraded(event: pb.CommitEvent, session_id: str) -> pb.CommitEvent:
    """``event`` with names where it stored ids, its old durations as Durations."""
    event.commit = names.commit(session_id, event.commit)
    which = event.WhichOneof("detail")
    if which == "phase1":
        event.phase1.archive = names.archive_of_id(session_id, event.phase1.archive)
    elif which == "phase2_started":
        covered = [
            names.archive_of_id(session_id, a) for a in event.phase2_started.covered_archives
        ]
        del event.phase2_started.covered_archives[:]
        event.phase2_started.covered_archives.extend(covered)
    elif which == "llm_response_received":
        _retype(event.llm_response_received, {3: ("duration", 1e-3)})
    elif which == "retry_scheduled":
        _retype(event.retry_scheduled, {2: ("delay", 1e-3), 6: ("wait_remaining", 1.0)})
    elif which in ("completed", "failed"):
        _commit(getattr(event, which), session_id)
    elif which == "memories_extracted":
        _diff(event.memories_extracted, session_id)
    event.DiscardUnknownFields()
    return event


def _retype(message: Message, fields: dict[int, tuple[str, float]]) -> None:
    """Old integer fields (``number`` → (Duration field, seconds per unit)) kept among the
    unknown fields, set as the Durations they are now."""
    found = UnknownFieldSet(message)
    for index in range(len(found)):
        unknown = found[index]
        if unknown.field_number in fields and isinstance(unknown.data, int):
            name, unit = fields[unknown.field_number]
            duration: Duration = getattr(message, name)
            duration.FromNanoseconds(round(unknown.data * unit * 1e9))


def _commit(commit: pb.Commit, session_id: str) -> None:
    commit.name = _named(commit.name, lambda c: names.commit(session_id, c))
    commit.archive = _named(commit.archive, lambda a: names.archive_of_id(session_id, a))
    commit.covered_by_commit = _named(
        commit.covered_by_commit, lambda c: names.commit(session_id, c)
    )
    if commit.HasField("memory_diff"):
        _diff(commit.memory_diff, session_id)


def _named(value: str, name: Callable[[str], str]) -> str:
    """An old bare id as its name; empty, or already a name, as it is."""
    return name(value) if value and "/" not in value else value


def _diff(diff: pb.MemoryDiff, session_id: str) -> None:
    for field in (
        diff.created_memories, diff.updated_memories, diff.merged_memories,
        diff.retired_memories, diff.deduplicated_memories, diff.superseded_memories,
    ):  # fmt: skip
        _rename(field, names.memory)
    _rename(diff.recovered_archives, lambda a: names.archive_of_id(session_id, a))
    for refusal in diff.refused:
        _rename(refusal.target_memories, names.memory)


def _rename(values: Any, name: Callable[[str], str]) -> None:
    """A repeated field of ids, as names (an entry already a name is kept)."""
    items = list(values)
    if any("/" not in v for v in items):
        del values[:]
        values.extend(_named(v, name) for v in items)
