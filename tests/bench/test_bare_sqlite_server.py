"""The request path's lower bound still runs against today's schema and still does the work it
stands for: every AddMessages a durable row and a counted session, GetSession the row as it is.

``bench/bare_sqlite_server.py`` writes raw SQL against the engine's own file; a migration that
renames or constrains a column it touches must fail here, not in a benchmark run.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path

import grpc

from support.server_process import free_port
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bare_sqlite_server import SESSION  # noqa: E402


async def test_the_bare_handlers_store_count_and_read_back(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    server = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "bare_sqlite_server.py"), address, str(tmp_path)
    )
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            await channel.channel_ready()
            texts = [f"message {i}: " + "lorem " * 20 for i in range(3)]
            answers = [
                await stub.AddMessages(
                    api.AddMessagesRequest(
                        parent=f"sessions/{SESSION}",
                        messages=[pb.Message(role=pb.ROLE_USER, parts=[pb.Part(text=text)])],
                    )
                )
                for text in texts
            ]
            session = await stub.GetSession(api.GetSessionRequest(name=f"sessions/{SESSION}"))
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)
    assert [a.message_count for a in answers] == [1, 2, 3]
    assert len({a.added_message_ids[0] for a in answers}) == 3
    assert session.name == f"sessions/{SESSION}" and session.message_count == 3
    assert session.live_tokens == sum(len(t) // 4 for t in texts)
    assert session.create_time.seconds > 0
    with sqlite3.connect(tmp_path / "floor.sqlite3") as db:  # durable: on disk after exit
        rows = db.execute(
            "SELECT m.position, m.parts_json FROM messages m JOIN sessions s ON s.sid = m.sid"
            " WHERE s.session_id = ? ORDER BY m.position",
            (SESSION,),
        ).fetchall()
        (next_position,) = db.execute(
            "SELECT next_position FROM sessions WHERE session_id = ?", (SESSION,)
        ).fetchone()
    assert [r[0] for r in rows] == [1, 2, 3] and next_position == 4
    assert all(text in parts for text, (_, parts) in zip(texts, rows, strict=True))
