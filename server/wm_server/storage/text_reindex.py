"""Re-index every stored row when the text analyzer differs from the one the database was
indexed with (``wm_server.search.analyzer.analyzer_id``, kept in ``server_secrets``): a
database from before the analyzer (migrations SQLite 10, PostgreSQL 11), or a change of
WM_TEXT_LANGUAGE. Runs at start, in the migration's transaction and under its lock, so a
query and the rows it searches are always analyzed alike. Both engines, one code: the rows
are analyzed here and written back through the dialect's index column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import structlog

from wm_server.search.analyzer import analyzer_id
from wm_server.storage.codec import message_body
from wm_server.storage.connection import Connection
from wm_server.storage.text_index import TextIndex, term_count

log = structlog.get_logger(__name__)

_MARKER = "text_analyzer"
_CHUNK = 5000


def memory_search_text(text: str, fields: Mapping[str, str]) -> str:
    """What a memory's index entry holds before analysis: its text and its field values
    (names, dates, numbers)."""
    return " ".join([text, *fields.values()])


async def reindex(conn: Connection, index: TextIndex, since: int) -> int:
    """Analyze every archived message and memory again if the stored analyzer is not this
    one; the number of rows re-indexed. Nothing before the schema has version ``since``
    (the engine's analyzer migration: its columns are needed)."""
    version = await conn.one("SELECT MAX(version) FROM schema_migrations", {})
    if version is None or version[0] is None or int(version[0]) < since:
        return 0
    wanted = analyzer_id(index.language)
    row = await conn.one("SELECT value FROM server_secrets WHERE name = :name", {"name": _MARKER})
    if row is not None and row[0] == wanted:
        return 0
    done = 0
    archived = index.value("archived", ":body")
    assert archived is not None
    rows = await conn.all(
        "SELECT x.id, m.message_id, m.role, m.parts_json FROM archived_texts x"
        " JOIN messages m ON m.sid = x.sid AND m.position = x.position",
        {},
    )
    for start in range(0, len(rows), _CHUNK):
        bodies = [
            (index.indexed(message_body(mid, role, parts)), int(key))
            for key, mid, role, parts in rows[start : start + _CHUNK]
        ]
        await conn.many(
            f"UPDATE archived_texts SET terms = :terms, {archived[0]} = {archived[1]}"
            " WHERE id = :id",
            [(term_count(body), body, key) for body, key in bodies],
        )
    done += len(rows)
    # Archives not indexed yet (version 0) stay so: the search reads them from their messages.
    await conn.run("UPDATE archives SET text_version = text_version + 1 WHERE text_version > 0", {})
    memories = await conn.all("SELECT mid, text, fields_json FROM memories", {})
    memory = index.value("memories", ":search_text")
    extra = f", {memory[0]} = {memory[1]}" if memory else ""
    copies = 2 if memory else 1  # ``many`` binds each occurrence of a name
    await conn.many(
        f"UPDATE memories SET search_text = :search_text{extra} WHERE mid = :mid",
        [
            (
                *[index.indexed(memory_search_text(text, json.loads(fields or "{}")))] * copies,
                int(mid),
            )
            for mid, text, fields in memories
        ],
    )
    done += len(memories)
    await conn.run(
        "INSERT INTO server_secrets (name, value) VALUES (:name, :value)"
        " ON CONFLICT (name) DO UPDATE SET value = :value",
        {"name": _MARKER, "value": wanted},
    )
    log.info("text_reindexed", analyzer=wanted, rows=done)
    return done
