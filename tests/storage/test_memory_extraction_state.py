"""The storage contract of a commit's memory extraction state (issue 20 point 2) on every
engine: the diff stored with the completion, the failed archives offered to a later
extraction, and their recovery."""

from __future__ import annotations

import json

from storage_support import Services

from wm_core import Message, Role, TextPart, message_tokens
from wm_server.services.sessions import find_session
from wm_server.storage.database import Database


async def _archive(services: Services, session: str, text: str) -> str:
    parts = (TextPart(text),)
    message = Message(f"{session}-{text[-1]}", Role.USER, parts, message_tokens(parts))
    await services.sessions.add_messages(
        session, [message], create_if_missing=True, request_id="", fingerprint=""
    )
    commit, _ = await services.commits.phase1(session, 0, None)
    return commit.commit_id


async def test_failed_extractions_are_offered_in_order_and_recovered(
    services: Services, database: Database
) -> None:
    ids = [await _archive(services, "s", f"archive number {n}") for n in range(1, 6)]
    diff = json.dumps({"state": "failed", "message": "provider refused"})
    async with database.unit_of_work() as uow:
        row = await find_session(uow, "s")
        for seq, commit_id in enumerate(ids[:4], start=1):
            state = "failed" if seq != 2 else "extracted"
            await uow.write(
                uow.commits.completing(
                    commit_id,
                    1,
                    version=seq,
                    usage_json="{}",
                    decisions_json="[]",
                    now=1.0,
                    memory_diff_json=diff,
                    memory_state=state,
                )
            )
        await uow.commit()
    async with database.reader() as uow:
        # the newest two failed before archive 5, oldest first; archive 2 succeeded
        assert await uow.commits.memory_failed_before(row.sid, 5, 2) == [3, 4]
        assert await uow.commits.memory_failed_before(row.sid, 5, 10) == [1, 3, 4]
        assert await uow.commits.memory_failed_before(row.sid, 3, 10) == [1]
    async with database.unit_of_work() as uow:
        await uow.write(uow.commits.memory_recovering(row.sid, [1, 3]))
        await uow.commit()
    async with database.reader() as uow:
        assert await uow.commits.memory_failed_before(row.sid, 5, 10) == [4]
        first = await uow.commits.get(ids[0])
        second = await uow.commits.get(ids[1])
        untouched = await uow.commits.get(ids[4])
    assert first is not None and second is not None and untouched is not None
    assert first.memory_state == "recovered"
    assert json.loads(first.memory_diff_json)["message"] == "provider refused"  # kept
    assert second.memory_state == "extracted"
    assert (untouched.memory_state, untouched.memory_diff_json) == ("", "")
