"""Commit events stored before wm.v1 named its resources replay as the contract says them now.

A database written by the previous contract holds events with bare ids in the fields that
carry names today (the commit, its archive, the memories of a diff) and millisecond integers
where Durations are now. The stored bytes are rewritten here into that old form, exactly as
the old encoder wrote them (same field numbers, ids instead of names, integers in place of the
Durations), and WatchCommit must hand out names and Durations.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_server.app import Application


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bare(value: str) -> str:
    """A name as the previous contract stored it: the last id of it."""
    return value.rsplit("/", 1)[1] if value.startswith(("sessions/", "memories/")) else value


def _strip_names(message: Any) -> None:
    """Every name a message holds (nested messages included) back to its bare id."""
    for field, value in message.ListFields():
        if field.type == field.TYPE_STRING and field.is_repeated:
            bare = [_bare(v) for v in value]
            del value[:]
            value.extend(bare)
        elif field.type == field.TYPE_STRING:
            setattr(message, field.name, _bare(value))
        elif field.type == field.TYPE_MESSAGE and field.is_repeated:
            if not field.message_type.GetOptions().map_entry:
                for item in value:
                    _strip_names(item)
        elif field.type == field.TYPE_MESSAGE:
            _strip_names(value)


def _old_form(event: pb.CommitEvent) -> bytes:
    """The event as the encoder of the previous contract wrote it."""
    _strip_names(event)
    if event.HasField("llm_response_received"):
        received = event.llm_response_received
        millis = received.duration.ToMilliseconds() or 1234
        received.ClearField("duration")
        old = received.SerializeToString() + b"\x18" + _varint(millis)  # int64 duration_ms = 3
        received.ParseFromString(old)
    return event.SerializeToString()


async def test_old_events_replay_with_names(app: Application, stub: Any, tmp_path: Path) -> None:
    await stub.CreateSession(
        api.CreateSessionRequest(session_id="old", session=pb.Session(user_id="u1"))
    )
    messages = []
    for index in range(6):
        message = pb.Message(
            id=f"m{index}", role=pb.ROLE_USER if index % 2 == 0 else pb.ROLE_ASSISTANT
        )
        message.parts.add(text=f"turn {index}: my name is Dana and we chose PostgreSQL")
        messages.append(message)
    await stub.AddMessages(api.AddMessagesRequest(parent="sessions/old", messages=messages))
    commit = await stub.CreateCommit(
        api.CreateCommitRequest(parent="sessions/old", keep_recent_count=2)
    )
    live = [event async for event in stub.WatchCommit(api.WatchCommitRequest(name=commit.name))]
    assert live[-1].terminal and live[-1].stage == pb.COMMIT_STAGE_COMPLETED
    commit_id = commit.name.rsplit("/", 1)[1]

    with sqlite3.connect(tmp_path / "wm.sqlite3") as db:
        rows = db.execute(
            "SELECT sequence, payload FROM commit_events WHERE commit_id = ? ORDER BY sequence",
            (commit_id,),
        ).fetchall()
        assert len(rows) == len(live)
        old = {seq: _old_form(pb.CommitEvent.FromString(payload)) for seq, payload in rows}
        assert all(b"sessions/old" not in payload for payload in old.values())
        db.executemany(
            "UPDATE commit_events SET payload = ? WHERE commit_id = ? AND sequence = ?",
            [(payload, commit_id, seq) for seq, payload in old.items()],
        )

    replayed = [event async for event in stub.WatchCommit(api.WatchCommitRequest(name=commit.name))]
    assert [e.sequence for e in replayed] == [e.sequence for e in live]
    assert all(e.commit == commit.name for e in replayed)
    first = replayed[0]
    assert first.phase1.archive == "sessions/old/archives/archive_001"
    final = replayed[-1].completed
    assert final.name == commit.name and final.archive == "sessions/old/archives/archive_001"
    assert list(final.memory_diff.created_memories) == list(
        live[-1].completed.memory_diff.created_memories
    )
    durations = [
        e.llm_response_received.duration for e in replayed if e.HasField("llm_response_received")
    ]
    assert durations and all(d.ToNanoseconds() > 0 for d in durations)
    assert all(not e.SerializeToString().count(b"\x18" + _varint(1234)) for e in replayed)
