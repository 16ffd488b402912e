"""Versioned schema of the SQLite engine. Append new migrations; never edit an applied one."""

from __future__ import annotations

# The searchable text of a message row's parts_json (text, tool name and input, tool output),
# as the archive index stores it; the dialect uses the same expression at archive time.
MESSAGE_TEXT = (
    "(SELECT group_concat(COALESCE(j.value ->> '$.t', j.value ->> '$.c',"
    " (j.value ->> '$.n') || ' ' || (j.value ->> '$.i')), ' ') FROM json_each({column}) j)"
)
_FTS = "tokenize = 'unicode61 remove_diacritics 0'"

MIGRATIONS: tuple[tuple[int, str | tuple[str, ...]], ...] = (
    (
        1,
        """
        CREATE TABLE sessions (
            sid INTEGER PRIMARY KEY AUTOINCREMENT,
            tenant TEXT NOT NULL,
            session_id TEXT NOT NULL,
            create_time REAL NOT NULL,
            update_time REAL NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            total_message_count INTEGER NOT NULL DEFAULT 0,
            first_live_position INTEGER NOT NULL DEFAULT 1,
            next_position INTEGER NOT NULL DEFAULT 1,
            live_tokens INTEGER NOT NULL DEFAULT 0,
            pending_tokens INTEGER NOT NULL DEFAULT 0,
            keep_recent_count INTEGER NOT NULL DEFAULT 0,
            archive_count INTEGER NOT NULL DEFAULT 0,
            wm_version INTEGER NOT NULL DEFAULT 0,
            create_request_id TEXT,
            UNIQUE (tenant, session_id)
        );
        CREATE TABLE messages (
            sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            message_id TEXT NOT NULL,
            role TEXT NOT NULL,
            parts_json TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            create_time REAL NOT NULL,
            result_ids TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (sid, position)
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX messages_by_id ON messages (sid, message_id);
        CREATE TABLE tool_calls (
            sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            tool_use_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            PRIMARY KEY (sid, tool_use_id)
        ) WITHOUT ROWID;
        CREATE TABLE commits (
            commit_id TEXT PRIMARY KEY,
            sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            state TEXT NOT NULL,
            keep_recent_count INTEGER NOT NULL,
            archive_seq INTEGER,
            archived_message_count INTEGER NOT NULL DEFAULT 0,
            kept_message_count INTEGER NOT NULL DEFAULT 0,
            archived_tokens INTEGER NOT NULL DEFAULT 0,
            skip_reason TEXT,
            request_id TEXT,
            attempt_count INTEGER NOT NULL DEFAULT 0,
            error_reason TEXT,
            error_message TEXT,
            covered_by_seq INTEGER,
            wm_version INTEGER NOT NULL DEFAULT 0,
            usage_json TEXT NOT NULL DEFAULT '{}',
            decisions_json TEXT NOT NULL DEFAULT '[]',
            last_sequence INTEGER NOT NULL DEFAULT 0,
            create_time REAL NOT NULL,
            complete_time REAL
        );
        CREATE UNIQUE INDEX commits_by_request ON commits (sid, request_id);
        CREATE UNIQUE INDEX commits_by_archive ON commits (sid, archive_seq);
        CREATE INDEX commits_by_session ON commits (sid, create_time);
        CREATE TABLE archives (
            sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            commit_id TEXT NOT NULL,
            message_count INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            first_position INTEGER NOT NULL,
            last_position INTEGER NOT NULL,
            abstract TEXT NOT NULL DEFAULT '',
            create_time REAL NOT NULL,
            PRIMARY KEY (sid, seq)
        ) WITHOUT ROWID;
        CREATE TABLE commit_events (
            commit_id TEXT NOT NULL REFERENCES commits(commit_id) ON DELETE CASCADE,
            sequence INTEGER NOT NULL,
            terminal INTEGER NOT NULL,
            payload BLOB NOT NULL,
            PRIMARY KEY (commit_id, sequence)
        ) WITHOUT ROWID;
        CREATE TABLE phase2_jobs (
            commit_id TEXT PRIMARY KEY REFERENCES commits(commit_id) ON DELETE CASCADE,
            sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            not_before REAL NOT NULL,
            lease_token TEXT,
            lease_expires REAL,
            create_time REAL NOT NULL
        );
        CREATE INDEX phase2_jobs_open ON phase2_jobs (state, not_before);
        CREATE INDEX phase2_jobs_by_session ON phase2_jobs (sid, seq);
        CREATE TABLE working_memories (
            sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            version INTEGER NOT NULL,
            document TEXT NOT NULL,
            archive_seq INTEGER,
            covered_seq INTEGER NOT NULL DEFAULT 0,
            commit_id TEXT,
            estimated_tokens INTEGER NOT NULL,
            create_time REAL NOT NULL,
            PRIMARY KEY (sid, version)
        ) WITHOUT ROWID;
        CREATE TABLE idempotency (
            tenant TEXT NOT NULL,
            method TEXT NOT NULL,
            request_id TEXT NOT NULL,
            result_json TEXT NOT NULL,
            create_time REAL NOT NULL,
            PRIMARY KEY (tenant, method, request_id)
        ) WITHOUT ROWID;
        """,
    ),
    (
        2,
        # One idempotency record per request key (tenant, method, resource, request id), with
        # the request's fingerprint, written in the transaction of its effect. A record of a
        # session goes with it; the old table had no fingerprints, so its records are dropped.
        """
        CREATE TABLE requests (
            request_key TEXT PRIMARY KEY,
            sid INTEGER REFERENCES sessions(sid) ON DELETE CASCADE,
            fingerprint TEXT NOT NULL,
            outcome TEXT NOT NULL,
            create_time REAL NOT NULL
        );
        CREATE INDEX requests_by_time ON requests (create_time);
        CREATE INDEX requests_by_session ON requests (sid);
        DROP TABLE idempotency
        """,
    ),
    (
        3,
        # Values the server makes once and every replica must share, such as the key that
        # signs page tokens when WM_PAGE_TOKEN_KEY is unset.
        """
        CREATE TABLE server_secrets (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )
        """,
    ),
    (
        4,
        # Sessions that manage themselves: the resolved configuration (proto JSON), the idle
        # timeout of its auto-commit policy as a column the idle sweeper can index, the time
        # of the last added message and of the last commit; and what started each commit.
        """
        ALTER TABLE sessions ADD COLUMN config_json TEXT NOT NULL DEFAULT '{}';
        ALTER TABLE sessions ADD COLUMN auto_idle_seconds REAL;
        ALTER TABLE sessions ADD COLUMN last_add_time REAL;
        ALTER TABLE sessions ADD COLUMN last_commit_time REAL;
        ALTER TABLE commits ADD COLUMN commit_trigger TEXT NOT NULL DEFAULT '';
        CREATE INDEX sessions_idle ON sessions (last_add_time) WHERE auto_idle_seconds IS NOT NULL
        """,
    ),
    (
        5,
        # Tool outputs too large to keep in their message, stored whole (issue 18). A rowid
        # table: rows of up to the message size limit are too large for WITHOUT ROWID.
        """
        CREATE TABLE tool_outputs (
            sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            output_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            part_index INTEGER NOT NULL,
            message_id TEXT NOT NULL,
            tool_use_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            format TEXT NOT NULL,
            content TEXT NOT NULL,
            size_bytes INTEGER NOT NULL,
            line_count INTEGER NOT NULL,
            synopsis TEXT NOT NULL,
            create_time REAL NOT NULL,
            PRIMARY KEY (sid, output_id)
        );
        CREATE INDEX tool_outputs_in_order ON tool_outputs (sid, position, part_index)
        """,
    ),
    (
        6,
        # What a guard refused (a fact at emergency size, a line over the size bound), kept
        # per session and shown in the next update prompt until the working memory holds it.
        # A completion replaces the set: ``batch`` (its archive) keeps the new rows' keys
        # apart from the deleted ones, so both writes can go in one statement.
        """
        CREATE TABLE pending_items (
            sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            batch INTEGER NOT NULL,
            position INTEGER NOT NULL,
            section TEXT NOT NULL,
            item TEXT NOT NULL,
            source TEXT NOT NULL,
            archive_seq INTEGER NOT NULL,
            PRIMARY KEY (sid, batch, position)
        ) WITHOUT ROWID
        """,
    ),
    (
        7,
        # Long-term memory (issue 20): sessions name their user and agent; memories of an
        # owner ("user:U", "agent:A", or "session:SID" for a session with neither, which
        # then owns them and takes them along when purged), their superseded versions and
        # sources; FTS5 indexes over memories and over archived messages (only archived
        # ones: Phase 1 writes them), kept in step by triggers in the writing transaction.
        # Archives made before this version are indexed here.
        (
            "ALTER TABLE sessions ADD COLUMN user_id TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE sessions ADD COLUMN agent_id TEXT NOT NULL DEFAULT ''",
            "CREATE INDEX sessions_by_user ON sessions (tenant, user_id) WHERE user_id <> ''",
            "CREATE INDEX sessions_by_agent ON sessions (tenant, agent_id) WHERE agent_id <> ''",
            """CREATE TABLE memories (
                mid INTEGER PRIMARY KEY AUTOINCREMENT,
                memory_id TEXT NOT NULL,
                tenant TEXT NOT NULL,
                owner TEXT NOT NULL,
                sid INTEGER REFERENCES sessions(sid) ON DELETE CASCADE,
                type TEXT NOT NULL,
                text TEXT NOT NULL,
                search_text TEXT NOT NULL,
                memory_key TEXT NOT NULL,
                fields_json TEXT NOT NULL DEFAULT '{}',
                event_time REAL,
                record_time REAL NOT NULL,
                create_time REAL NOT NULL,
                update_time REAL NOT NULL,
                state TEXT NOT NULL,
                version INTEGER NOT NULL DEFAULT 1,
                retire_reason TEXT NOT NULL DEFAULT '',
                UNIQUE (tenant, memory_id)
            )""",
            "CREATE UNIQUE INDEX memories_by_key ON memories (tenant, owner, memory_key)"
            " WHERE state = 'active'",
            "CREATE INDEX memories_by_owner ON memories (tenant, owner, mid)",
            "CREATE INDEX memories_by_session ON memories (sid) WHERE sid IS NOT NULL",
            """CREATE TABLE memory_versions (
                mid INTEGER NOT NULL REFERENCES memories(mid) ON DELETE CASCADE,
                version INTEGER NOT NULL,
                type TEXT NOT NULL,
                text TEXT NOT NULL,
                reason TEXT NOT NULL,
                supersede_time REAL NOT NULL,
                PRIMARY KEY (mid, version)
            ) WITHOUT ROWID""",
            """CREATE TABLE memory_sources (
                mid INTEGER NOT NULL REFERENCES memories(mid) ON DELETE CASCADE,
                n INTEGER NOT NULL,
                session_id TEXT NOT NULL,
                archive_seq INTEGER,
                message_ids TEXT NOT NULL DEFAULT '',
                create_time REAL NOT NULL,
                PRIMARY KEY (mid, n)
            ) WITHOUT ROWID""",
            "CREATE VIRTUAL TABLE memories_fts USING fts5(search_text, content = 'memories',"
            f" content_rowid = 'mid', {_FTS})",
            "CREATE TRIGGER memories_indexed AFTER INSERT ON memories BEGIN"
            " INSERT INTO memories_fts (rowid, search_text) VALUES (new.mid, new.search_text);"
            " END",
            "CREATE TRIGGER memories_unindexed AFTER DELETE ON memories BEGIN"
            " INSERT INTO memories_fts (memories_fts, rowid, search_text)"
            " VALUES ('delete', old.mid, old.search_text); END",
            "CREATE TRIGGER memories_reindexed AFTER UPDATE OF search_text ON memories BEGIN"
            " INSERT INTO memories_fts (memories_fts, rowid, search_text)"
            " VALUES ('delete', old.mid, old.search_text);"
            " INSERT INTO memories_fts (rowid, search_text) VALUES (new.mid, new.search_text);"
            " END",
            """CREATE TABLE archived_texts (
                id INTEGER PRIMARY KEY,
                sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                position INTEGER NOT NULL,
                archive_time REAL NOT NULL,
                body TEXT NOT NULL
            )""",
            "CREATE INDEX archived_texts_by_session ON archived_texts (sid, seq)",
            "CREATE VIRTUAL TABLE archived_fts USING fts5(body, content = 'archived_texts',"
            f" content_rowid = 'id', {_FTS})",
            "CREATE TRIGGER archived_indexed AFTER INSERT ON archived_texts BEGIN"
            " INSERT INTO archived_fts (rowid, body) VALUES (new.id, new.body); END",
            "CREATE TRIGGER archived_unindexed AFTER DELETE ON archived_texts BEGIN"
            " INSERT INTO archived_fts (archived_fts, rowid, body)"
            " VALUES ('delete', old.id, old.body); END",
            "INSERT INTO archived_texts (sid, seq, position, archive_time, body)"
            " SELECT m.sid, a.seq, m.position, a.create_time,"
            f" COALESCE({MESSAGE_TEXT.format(column='m.parts_json')}, '')"
            " FROM archives a JOIN messages m ON m.sid = a.sid"
            " AND m.position BETWEEN a.first_position AND a.last_position",
        ),
    ),
    (
        8,
        # Long-term memory extraction (issue 20): each commit keeps what its Phase 2 did to
        # the owner's memories (the diff, JSON) and the state of its extraction, so that an
        # archive whose extraction failed is offered to the next commit's.
        (
            "ALTER TABLE commits ADD COLUMN memory_diff_json TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE commits ADD COLUMN memory_state TEXT NOT NULL DEFAULT ''",
            "CREATE INDEX commits_memory_failed ON commits (sid, archive_seq)"
            " WHERE memory_state = 'failed'",
        ),
    ),
    (
        9,
        # Each working-memory version keeps the guard decisions of the change that stored it
        # (Phase 2's, as on its commit, or ApplyWorkingMemoryOps'): a client's ops are audited
        # like a model's. Versions stored before keep their commit's.
        (
            "ALTER TABLE working_memories ADD COLUMN decisions_json TEXT NOT NULL DEFAULT '[]'",
            "UPDATE working_memories SET decisions_json = (SELECT c.decisions_json FROM commits c"
            " WHERE c.commit_id = working_memories.commit_id) WHERE commit_id IS NOT NULL"
            " AND EXISTS (SELECT 1 FROM commits c WHERE c.commit_id = working_memories.commit_id)",
        ),
    ),
    (
        10,
        # The text analyzer (issue 34): an archived message's number of terms (its length
        # for BM25, ArchiveRepository.ranked); its index is rewritten in place when the
        # analyzer changes (storage/text_reindex.py, at start, which also
        # re-indexes the rows of a database from before this version).
        (
            "ALTER TABLE archived_texts ADD COLUMN terms INTEGER NOT NULL DEFAULT 0",
            "CREATE TRIGGER archived_reindexed AFTER UPDATE OF body ON archived_texts BEGIN"
            " INSERT INTO archived_fts (archived_fts, rowid, body)"
            " VALUES ('delete', old.id, old.body);"
            " INSERT INTO archived_fts (rowid, body) VALUES (new.id, new.body); END",
        ),
    ),
    (
        11,
        # A memory's lifecycle (issue 35): a memory that replaces older ones names them
        # (supersedes: memory ids, space-separated), each of those is SUPERSEDED, names its
        # successor and keeps when it stopped holding (valid_until); expire_time is when the
        # maintenance loop forgets it (NULL: its type's default retention, or never).
        (
            "ALTER TABLE memories ADD COLUMN supersedes TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE memories ADD COLUMN superseded_by TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE memories ADD COLUMN valid_until REAL",
            "ALTER TABLE memories ADD COLUMN expire_time REAL",
            "CREATE INDEX memories_expiring ON memories (expire_time)"
            " WHERE expire_time IS NOT NULL",
        ),
    ),
    (
        12,
        # Recall by meaning (issue 34; 10 and 11 went to the text analyzer's and the
        # lifecycle's migrations in the merge): one float32 vector per archived message and per
        # memory, with the model that made it and its length (a model change re-embeds).
        (
            """CREATE TABLE message_vectors (
                sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
                position INTEGER NOT NULL,
                seq INTEGER NOT NULL,
                model TEXT NOT NULL,
                dims INTEGER NOT NULL,
                vector BLOB NOT NULL,
                PRIMARY KEY (sid, position)
            ) WITHOUT ROWID""",
            """CREATE TABLE memory_vectors (
                mid INTEGER PRIMARY KEY REFERENCES memories(mid) ON DELETE CASCADE,
                version INTEGER NOT NULL,
                model TEXT NOT NULL,
                dims INTEGER NOT NULL,
                vector BLOB NOT NULL
            )""",
        ),
    ),
    (
        14,
        # Recall speed (issue 34): an archive's text_version changes whenever its rows of the
        # full-text index are written (Phase 1, Phase 2's chunks, a re-index), so the search's
        # in-process BM25 index (services/lexical_index.py) sees what to read again from the
        # archives alone; embedded_model names the model that embedded every one of its
        # messages, so the embedding backfill counts and finds what is missing from the
        # archives instead of an anti-join over every archived message.
        (
            "ALTER TABLE archives ADD COLUMN text_version INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE archives ADD COLUMN embedded_model TEXT NOT NULL DEFAULT ''",
        ),
    ),
    (
        15,
        # One Phase 2 pipeline (issue 39): Phase 1 writes no full-text rows, Phase 2 writes
        # an archive's rows with its completion, and text_version 0 means "not indexed yet"
        # (the search reads the archive's messages). Archives made before were indexed, in
        # part or whole, by Phase 1 already.
        "UPDATE archives SET text_version = 1 WHERE text_version = 0",
    ),
    (
        16,
        # Memory recall per owner (issue 34; services/memory_index.py): every write of an
        # owner's memories, or of their vectors, stamps the row with a new value of one clock
        # (change_version) and records it, with the owner's count of memories, in
        # memory_owners, so a search learns from one row what to read again and reads only the
        # rows written since. Triggers keep them in step: no writer can forget. An owner's row
        # goes with their last memory (PurgeUserData leaves no user key behind); the clock
        # never goes back, so a recreated owner's versions are all new.
        (
            "CREATE TABLE memory_clock (id INTEGER PRIMARY KEY CHECK (id = 1),"
            " version INTEGER NOT NULL)",
            "INSERT INTO memory_clock (id, version) VALUES (1, 1)",
            """CREATE TABLE memory_owners (
                tenant TEXT NOT NULL,
                owner TEXT NOT NULL,
                version INTEGER NOT NULL,
                memories INTEGER NOT NULL,
                PRIMARY KEY (tenant, owner)
            ) WITHOUT ROWID""",
            "INSERT INTO memory_owners (tenant, owner, version, memories)"
            " SELECT tenant, owner, 1, COUNT(*) FROM memories GROUP BY tenant, owner",
            "ALTER TABLE memories ADD COLUMN change_version INTEGER NOT NULL DEFAULT 0",
            "CREATE INDEX memories_by_change ON memories (tenant, owner, change_version)",
            "CREATE TRIGGER memories_counted AFTER INSERT ON memories BEGIN"
            " UPDATE memory_clock SET version = version + 1;"
            " INSERT INTO memory_owners (tenant, owner, version, memories)"
            " VALUES (new.tenant, new.owner, (SELECT version FROM memory_clock), 1)"
            " ON CONFLICT (tenant, owner) DO UPDATE SET version = excluded.version,"
            " memories = memories + 1;"
            " UPDATE memories SET change_version = (SELECT version FROM memory_clock)"
            " WHERE mid = new.mid; END",
            "CREATE TRIGGER memories_changed AFTER UPDATE ON memories"
            " WHEN new.change_version = old.change_version BEGIN"
            " UPDATE memory_clock SET version = version + 1;"
            " UPDATE memory_owners SET version = (SELECT version FROM memory_clock)"
            " WHERE tenant = new.tenant AND owner = new.owner;"
            " UPDATE memories SET change_version = (SELECT version FROM memory_clock)"
            " WHERE mid = new.mid; END",
            "CREATE TRIGGER memories_uncounted AFTER DELETE ON memories BEGIN"
            " UPDATE memory_clock SET version = version + 1;"
            " UPDATE memory_owners SET version = (SELECT version FROM memory_clock),"
            " memories = memories - 1 WHERE tenant = old.tenant AND owner = old.owner;"
            " DELETE FROM memory_owners WHERE tenant = old.tenant AND owner = old.owner"
            " AND memories <= 0; END",
            # A vector stored is a change of its memory (the search holds vectors too).
            "CREATE TRIGGER memory_vector_stored AFTER INSERT ON memory_vectors BEGIN"
            " UPDATE memories SET change_version = change_version WHERE mid = new.mid; END",
            "CREATE TRIGGER memory_vector_restored AFTER UPDATE ON memory_vectors BEGIN"
            " UPDATE memories SET change_version = change_version WHERE mid = new.mid; END",
            # An archive's vector_version changes whenever vectors of its messages are
            # stored (VectorRepository.store_messages), so every replica's VectorCache
            # reads again only the archives whose vectors another one stored.
            "ALTER TABLE archives ADD COLUMN vector_version INTEGER NOT NULL DEFAULT 0",
        ),
    ),
    (
        19,  # (17 and 18 are PostgreSQL's)
        # Message vectors in a rowid table with a unique key, not WITHOUT ROWID: a row holds a
        # 1 KB vector, and a WITHOUT ROWID b-tree keeps whole rows in its interior order, so
        # three fit a page and a completion's 20 rows split pages all the way (1.3-1.5 ms to
        # insert and commit them, against 0.56 ms here).
        (
            """CREATE TABLE message_vectors_rowid (
                sid INTEGER NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
                position INTEGER NOT NULL,
                seq INTEGER NOT NULL,
                model TEXT NOT NULL,
                dims INTEGER NOT NULL,
                vector BLOB NOT NULL,
                UNIQUE (sid, position)
            )""",
            "INSERT INTO message_vectors_rowid (sid, position, seq, model, dims, vector)"
            " SELECT sid, position, seq, model, dims, vector FROM message_vectors"
            " ORDER BY sid, position",
            "DROP TABLE message_vectors",
            "ALTER TABLE message_vectors_rowid RENAME TO message_vectors",
        ),
    ),
)
