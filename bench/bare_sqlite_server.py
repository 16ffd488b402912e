"""The least a durable AddMessages and a GetSession can cost on this stack: the same SQLite file
(schema, pragmas) as the service, one bare grpc.aio handler each on uvloop, nothing else.

``bench/service_bench.py`` starts it beside the bare health server so that the service's
request-path ratios can be read against what the stack itself allows: grpc.aio's per-call cost
plus the statements no durable one-message add can do without (BEGIN IMMEDIATE, read the
session row, insert the message, update its counters, COMMIT) and, for GetSession, one row
read rendered as a ``Session``. No interceptor, authentication, validation, idempotency,
window accounting or auto-commit: those are what the service adds on top of this. Usage:
``python bench/bare_sqlite_server.py 127.0.0.1:PORT FOLDER`` (serves session ``floor``).
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import uvloop

from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_server.storage.sqlite import SqliteDatabase

SESSION = "floor"
_READ = (
    "SELECT sid, next_position, session_id, create_time, update_time, message_count,"
    " total_message_count, pending_tokens, live_tokens FROM sessions"
    " WHERE tenant = 'default' AND session_id = ?"
)
_INSERT = (
    "INSERT INTO messages (sid, position, message_id, role, parts_json, tokens, create_time)"
    " VALUES (?, ?, ?, 'user', ?, ?, ?)"
)
_COUNT = (
    "UPDATE sessions SET next_position = next_position + 1, message_count = message_count + 1,"
    " total_message_count = total_message_count + 1, live_tokens = live_tokens + ?,"
    " update_time = ? WHERE sid = ?"
)


async def serve(address: str, folder: Path) -> None:
    database = SqliteDatabase(folder / "floor.sqlite3")
    await database.open()  # the service's schema and pragmas
    conn = database._connection().conn  # the engine's inline writer connection
    conn.execute(
        "INSERT INTO sessions (tenant, session_id, create_time, update_time)"
        " VALUES ('default', ?, ?, ?)",
        (SESSION, time.time(), time.time()),
    )
    ids = itertools.count(1)

    async def add(request: api.AddMessagesRequest, context: Any) -> api.AddMessagesResponse:
        text = request.messages[0].parts[0].text
        tokens, now, message_id = len(text) // 4, time.time(), f"m{next(ids)}"
        conn.execute("BEGIN IMMEDIATE")
        try:
            sid, position, name, _, _, count, _, pending, _ = conn.execute(
                _READ, (request.parent.removeprefix("sessions/"),)
            ).fetchone()
            conn.execute(
                _INSERT, (sid, position, message_id, json.dumps([{"t": text}]), tokens, now)
            )
            conn.execute(_COUNT, (tokens, now, sid))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return api.AddMessagesResponse(
            session=f"sessions/{name}",
            message_count=count + 1,
            pending_tokens=pending,
            added_message_ids=[message_id],
        )

    async def get(request: api.GetSessionRequest, context: Any) -> pb.Session:
        _, _, name, created, updated, count, total, pending, live = conn.execute(
            _READ, (request.name.removeprefix("sessions/"),)
        ).fetchone()
        session = pb.Session(
            name=f"sessions/{name}",
            message_count=count,
            total_message_count=total,
            pending_tokens=pending,
            live_tokens=live,
        )
        session.create_time.FromNanoseconds(int(created * 1e9))
        session.update_time.FromNanoseconds(int(updated * 1e9))
        return session

    handlers = {
        "AddMessages": grpc.unary_unary_rpc_method_handler(
            add,
            request_deserializer=api.AddMessagesRequest.FromString,
            response_serializer=api.AddMessagesResponse.SerializeToString,
        ),
        "GetSession": grpc.unary_unary_rpc_method_handler(
            get,
            request_deserializer=api.GetSessionRequest.FromString,
            response_serializer=pb.Session.SerializeToString,
        ),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("wm.v1.WorkingMemoryService", handlers),)
    )
    server.add_insecure_port(address)
    await server.start()
    try:
        await server.wait_for_termination()
    finally:
        await database.close()


if __name__ == "__main__":
    uvloop.run(serve(sys.argv[1], Path(sys.argv[2])))
