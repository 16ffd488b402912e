"""Versioned schema of the PostgreSQL engine. Append new migrations; never edit an applied one.

The tables mirror ``schema_sqlite`` column for column so both engines share one codec and
behave identically; the differences are PostgreSQL types (identity keys, ``bytea``,
``boolean``, ``double precision`` epoch seconds) and one extra column, ``commits.cid``, which
plays the part of SQLite's implicit rowid as a stable tie-break for listing commits.
Statements are separated by ``;`` and contain no other semicolon (the runner splits on it);
a migration whose statements need one lists them in a tuple instead.
"""

from __future__ import annotations

# The searchable text of a message row's parts_json (text, tool name and input, tool output),
# as the archive index reads it; the dialect uses the same expression at archive time.
MESSAGE_TEXT = (
    "(SELECT string_agg(COALESCE(e ->> 't', e ->> 'c', (e ->> 'n') || ' ' || (e ->> 'i')), ' ')"
    " FROM json_array_elements(CAST({column} AS json)) e)"
)
# The text search configuration the migration indexes with; the server re-indexes at start
# (from version 10 on, rows hold the analyzer's terms: storage/text_reindex.py).
INITIAL_TEXT_SEARCH_CONFIG = "simple"

MIGRATIONS: tuple[tuple[int, str | tuple[str, ...]], ...] = (
    (
        1,
        """
        CREATE TABLE sessions (
            sid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            tenant TEXT NOT NULL,
            session_id TEXT NOT NULL,
            create_time DOUBLE PRECISION NOT NULL,
            update_time DOUBLE PRECISION NOT NULL,
            message_count BIGINT NOT NULL DEFAULT 0,
            total_message_count BIGINT NOT NULL DEFAULT 0,
            first_live_position BIGINT NOT NULL DEFAULT 1,
            next_position BIGINT NOT NULL DEFAULT 1,
            live_tokens BIGINT NOT NULL DEFAULT 0,
            pending_tokens BIGINT NOT NULL DEFAULT 0,
            keep_recent_count BIGINT NOT NULL DEFAULT 0,
            archive_count BIGINT NOT NULL DEFAULT 0,
            wm_version BIGINT NOT NULL DEFAULT 0,
            create_request_id TEXT,
            UNIQUE (tenant, session_id)
        );
        CREATE INDEX sessions_by_tenant ON sessions (tenant, sid);
        CREATE TABLE messages (
            sid BIGINT NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            position BIGINT NOT NULL,
            message_id TEXT NOT NULL,
            role TEXT NOT NULL,
            parts_json TEXT NOT NULL,
            tokens BIGINT NOT NULL,
            create_time DOUBLE PRECISION NOT NULL,
            result_ids TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (sid, position)
        );
        CREATE UNIQUE INDEX messages_by_id ON messages (sid, message_id);
        CREATE TABLE tool_calls (
            sid BIGINT NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            tool_use_id TEXT NOT NULL,
            position BIGINT NOT NULL,
            PRIMARY KEY (sid, tool_use_id)
        );
        CREATE TABLE commits (
            commit_id TEXT PRIMARY KEY,
            cid BIGINT GENERATED ALWAYS AS IDENTITY,
            sid BIGINT NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            state TEXT NOT NULL,
            keep_recent_count BIGINT NOT NULL,
            archive_seq BIGINT,
            archived_message_count BIGINT NOT NULL DEFAULT 0,
            kept_message_count BIGINT NOT NULL DEFAULT 0,
            archived_tokens BIGINT NOT NULL DEFAULT 0,
            skip_reason TEXT,
            request_id TEXT,
            attempt_count BIGINT NOT NULL DEFAULT 0,
            error_reason TEXT,
            error_message TEXT,
            covered_by_seq BIGINT,
            wm_version BIGINT NOT NULL DEFAULT 0,
            usage_json TEXT NOT NULL DEFAULT '{}',
            decisions_json TEXT NOT NULL DEFAULT '[]',
            last_sequence BIGINT NOT NULL DEFAULT 0,
            create_time DOUBLE PRECISION NOT NULL,
            complete_time DOUBLE PRECISION
        );
        CREATE UNIQUE INDEX commits_by_request ON commits (sid, request_id);
        CREATE UNIQUE INDEX commits_by_archive ON commits (sid, archive_seq);
        CREATE INDEX commits_by_session ON commits (sid, create_time, cid);
        CREATE TABLE archives (
            sid BIGINT NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            commit_id TEXT NOT NULL,
            message_count BIGINT NOT NULL,
            tokens BIGINT NOT NULL,
            first_position BIGINT NOT NULL,
            last_position BIGINT NOT NULL,
            abstract TEXT NOT NULL DEFAULT '',
            create_time DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (sid, seq)
        );
        CREATE TABLE commit_events (
            commit_id TEXT NOT NULL REFERENCES commits(commit_id) ON DELETE CASCADE,
            sequence BIGINT NOT NULL,
            terminal BOOLEAN NOT NULL,
            payload BYTEA NOT NULL,
            PRIMARY KEY (commit_id, sequence)
        );
        CREATE TABLE phase2_jobs (
            commit_id TEXT PRIMARY KEY REFERENCES commits(commit_id) ON DELETE CASCADE,
            sid BIGINT NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            state TEXT NOT NULL,
            attempts BIGINT NOT NULL DEFAULT 0,
            not_before DOUBLE PRECISION NOT NULL,
            lease_token TEXT,
            lease_expires DOUBLE PRECISION,
            create_time DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX phase2_jobs_open ON phase2_jobs (not_before, create_time)
            WHERE state <> 'done';
        CREATE INDEX phase2_jobs_by_session ON phase2_jobs (sid, seq);
        CREATE TABLE working_memories (
            sid BIGINT NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            version BIGINT NOT NULL,
            document TEXT NOT NULL,
            archive_seq BIGINT,
            covered_seq BIGINT NOT NULL DEFAULT 0,
            commit_id TEXT,
            estimated_tokens BIGINT NOT NULL,
            create_time DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (sid, version)
        );
        CREATE TABLE idempotency (
            tenant TEXT NOT NULL,
            method TEXT NOT NULL,
            request_id TEXT NOT NULL,
            result_json TEXT NOT NULL,
            create_time DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (tenant, method, request_id)
        )
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
            sid BIGINT REFERENCES sessions(sid) ON DELETE CASCADE,
            fingerprint TEXT NOT NULL,
            outcome TEXT NOT NULL,
            create_time DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX requests_by_time ON requests (create_time);
        CREATE INDEX requests_by_session ON requests (sid);
        DROP TABLE idempotency
        """,
    ),
    (
        3,
        # Other replicas learn of stored events from the database itself: one round trip less
        # per event write than a NOTIFY statement, and no writer can forget it. PostgreSQL
        # folds the identical notifications of one transaction into one.
        (
            "CREATE FUNCTION wm_commit_event_stored() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN PERFORM pg_notify('wm_commit_events', NEW.commit_id); RETURN NULL; END $$",
            "CREATE TRIGGER commit_event_stored AFTER INSERT ON commit_events"
            " FOR EACH ROW EXECUTE FUNCTION wm_commit_event_stored()",
        ),
    ),
    (
        4,
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
        5,
        # Sessions that manage themselves: the resolved configuration (proto JSON), the idle
        # timeout of its auto-commit policy as a column the idle sweeper can index, the time
        # of the last added message and of the last commit; and what started each commit.
        """
        ALTER TABLE sessions ADD COLUMN config_json TEXT NOT NULL DEFAULT '{}';
        ALTER TABLE sessions ADD COLUMN auto_idle_seconds DOUBLE PRECISION;
        ALTER TABLE sessions ADD COLUMN last_add_time DOUBLE PRECISION;
        ALTER TABLE sessions ADD COLUMN last_commit_time DOUBLE PRECISION;
        ALTER TABLE commits ADD COLUMN commit_trigger TEXT NOT NULL DEFAULT '';
        CREATE INDEX sessions_idle ON sessions (last_add_time) WHERE auto_idle_seconds IS NOT NULL
        """,
    ),
    (
        6,
        # Tool outputs too large to keep in their message, stored whole (issue 18).
        """
        CREATE TABLE tool_outputs (
            sid BIGINT NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            output_id TEXT NOT NULL,
            position BIGINT NOT NULL,
            part_index BIGINT NOT NULL,
            message_id TEXT NOT NULL,
            tool_use_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            format TEXT NOT NULL,
            content TEXT NOT NULL,
            size_bytes BIGINT NOT NULL,
            line_count BIGINT NOT NULL,
            synopsis TEXT NOT NULL,
            create_time DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (sid, output_id)
        );
        CREATE INDEX tool_outputs_in_order ON tool_outputs (sid, position, part_index)
        """,
    ),
    (
        7,
        # What a guard refused (a fact at emergency size, a line over the size bound), kept
        # per session and shown in the next update prompt until the working memory holds it.
        # A completion replaces the set: ``batch`` (its archive) keeps the new rows' keys
        # apart from the deleted ones, so both writes can go in one statement.
        """
        CREATE TABLE pending_items (
            sid BIGINT NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            batch INTEGER NOT NULL,
            position INTEGER NOT NULL,
            section TEXT NOT NULL,
            item TEXT NOT NULL,
            source TEXT NOT NULL,
            archive_seq INTEGER NOT NULL,
            PRIMARY KEY (sid, batch, position)
        )
        """,
    ),
    (
        8,
        # Long-term memory (issue 20): as SQLite's version 7, with a tsvector column per
        # indexed row (written by the statement that writes the row) under a GIN index.
        # Archives made before this version are indexed here.
        f"""
        ALTER TABLE sessions ADD COLUMN user_id TEXT NOT NULL DEFAULT '';
        ALTER TABLE sessions ADD COLUMN agent_id TEXT NOT NULL DEFAULT '';
        CREATE INDEX sessions_by_user ON sessions (tenant, user_id) WHERE user_id <> '';
        CREATE INDEX sessions_by_agent ON sessions (tenant, agent_id) WHERE agent_id <> '';
        CREATE TABLE memories (
            mid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            memory_id TEXT NOT NULL,
            tenant TEXT NOT NULL,
            owner TEXT NOT NULL,
            sid BIGINT REFERENCES sessions(sid) ON DELETE CASCADE,
            type TEXT NOT NULL,
            text TEXT NOT NULL,
            search_text TEXT NOT NULL,
            memory_key TEXT NOT NULL,
            fields_json TEXT NOT NULL DEFAULT '{{}}',
            event_time DOUBLE PRECISION,
            record_time DOUBLE PRECISION NOT NULL,
            create_time DOUBLE PRECISION NOT NULL,
            update_time DOUBLE PRECISION NOT NULL,
            state TEXT NOT NULL,
            version BIGINT NOT NULL DEFAULT 1,
            retire_reason TEXT NOT NULL DEFAULT '',
            search tsvector NOT NULL,
            UNIQUE (tenant, memory_id)
        );
        CREATE UNIQUE INDEX memories_by_key ON memories (tenant, owner, memory_key)
            WHERE state = 'active';
        CREATE INDEX memories_by_owner ON memories (tenant, owner, mid);
        CREATE INDEX memories_by_session ON memories (sid) WHERE sid IS NOT NULL;
        CREATE INDEX memories_search ON memories USING GIN (search);
        CREATE TABLE memory_versions (
            mid BIGINT NOT NULL REFERENCES memories(mid) ON DELETE CASCADE,
            version BIGINT NOT NULL,
            type TEXT NOT NULL,
            text TEXT NOT NULL,
            reason TEXT NOT NULL,
            supersede_time DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (mid, version)
        );
        CREATE TABLE memory_sources (
            mid BIGINT NOT NULL REFERENCES memories(mid) ON DELETE CASCADE,
            n BIGINT NOT NULL,
            session_id TEXT NOT NULL,
            archive_seq BIGINT,
            message_ids TEXT NOT NULL DEFAULT '',
            create_time DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (mid, n)
        );
        CREATE TABLE archived_texts (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            sid BIGINT NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            position BIGINT NOT NULL,
            archive_time DOUBLE PRECISION NOT NULL,
            search tsvector NOT NULL
        );
        CREATE INDEX archived_texts_by_session ON archived_texts (sid, seq);
        CREATE INDEX archived_texts_search ON archived_texts USING GIN (search);
        INSERT INTO archived_texts (sid, seq, position, archive_time, search)
            SELECT m.sid, a.seq, m.position, a.create_time,
            to_tsvector('{INITIAL_TEXT_SEARCH_CONFIG}',
                COALESCE({MESSAGE_TEXT.format(column="m.parts_json")}, ''))
            FROM archives a JOIN messages m ON m.sid = a.sid
            AND m.position BETWEEN a.first_position AND a.last_position
        """,
    ),
    (
        9,
        # Long-term memory extraction (issue 20): as SQLite's version 8.
        """
        ALTER TABLE commits ADD COLUMN memory_diff_json TEXT NOT NULL DEFAULT '';
        ALTER TABLE commits ADD COLUMN memory_state TEXT NOT NULL DEFAULT '';
        CREATE INDEX commits_memory_failed ON commits (sid, archive_seq)
            WHERE memory_state = 'failed';
        """,
    ),
    (
        10,
        # Each version keeps its guard decisions: as SQLite's version 9.
        """
        ALTER TABLE working_memories ADD COLUMN decisions_json TEXT NOT NULL DEFAULT '[]';
        UPDATE working_memories w SET decisions_json = c.decisions_json
            FROM commits c WHERE c.commit_id = w.commit_id;
        """,
    ),
    (
        11,
        # The text analyzer (issue 34): rows are indexed with the analyzer's terms under the
        # "simple" configuration (storage/text_reindex.py re-indexes the rows of a database
        # from before this version at start); the configuration is no longer a setting. An
        # archived message's number of terms is its length for BM25 (ArchiveRepository.ranked).
        """
        DELETE FROM server_secrets WHERE name = 'text_search_config';
        ALTER TABLE archived_texts ADD COLUMN terms INTEGER NOT NULL DEFAULT 0
        """,
    ),
    (
        12,
        # A memory's lifecycle (issue 35): as SQLite's version 11.
        """
        ALTER TABLE memories ADD COLUMN supersedes TEXT NOT NULL DEFAULT '';
        ALTER TABLE memories ADD COLUMN superseded_by TEXT NOT NULL DEFAULT '';
        ALTER TABLE memories ADD COLUMN valid_until DOUBLE PRECISION;
        ALTER TABLE memories ADD COLUMN expire_time DOUBLE PRECISION;
        CREATE INDEX memories_expiring ON memories (expire_time) WHERE expire_time IS NOT NULL;
        """,
    ),
    (
        13,
        # Recall by meaning (issue 34; 10 and 11 went to the text analyzer's and the
        # lifecycle's migrations in the merge): as SQLite's version 12.
        """
        CREATE TABLE message_vectors (
            sid BIGINT NOT NULL REFERENCES sessions(sid) ON DELETE CASCADE,
            position BIGINT NOT NULL,
            seq BIGINT NOT NULL,
            model TEXT NOT NULL,
            dims INTEGER NOT NULL,
            vector BYTEA NOT NULL,
            PRIMARY KEY (sid, position)
        );
        CREATE TABLE memory_vectors (
            mid BIGINT PRIMARY KEY REFERENCES memories(mid) ON DELETE CASCADE,
            version BIGINT NOT NULL,
            model TEXT NOT NULL,
            dims INTEGER NOT NULL,
            vector BYTEA NOT NULL
        );
        """,
    ),
    (
        15,
        # Recall speed (issue 34): as SQLite's version 14.
        """
        ALTER TABLE archives ADD COLUMN text_version BIGINT NOT NULL DEFAULT 0;
        ALTER TABLE archives ADD COLUMN embedded_model TEXT NOT NULL DEFAULT ''
        """,
    ),
    (
        16,
        # One Phase 2 pipeline (issue 39): as SQLite's version 15.
        "UPDATE archives SET text_version = 1 WHERE text_version = 0",
    ),
    (
        17,
        # Memory recall per owner: as SQLite's version 16, the clock a sequence. A writer
        # takes the owner's row lock in memory_owners (held to its commit) before it draws
        # its version, so one owner's versions commit in order and a reader that saw version
        # v never misses a row stamped at or below v.
        (
            "CREATE SEQUENCE memory_changes",
            """CREATE TABLE memory_owners (
                tenant TEXT NOT NULL,
                owner TEXT NOT NULL,
                version BIGINT NOT NULL,
                memories BIGINT NOT NULL,
                PRIMARY KEY (tenant, owner)
            )""",
            "INSERT INTO memory_owners (tenant, owner, version, memories)"
            " SELECT tenant, owner, nextval('memory_changes'), COUNT(*) FROM memories"
            " GROUP BY tenant, owner",
            "ALTER TABLE memories ADD COLUMN change_version BIGINT NOT NULL DEFAULT 0",
            "CREATE INDEX memories_by_change ON memories (tenant, owner, change_version)",
            "CREATE FUNCTION wm_memory_written() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN"
            " INSERT INTO memory_owners AS o (tenant, owner, version, memories)"
            " VALUES (NEW.tenant, NEW.owner, nextval('memory_changes'), 0)"
            " ON CONFLICT (tenant, owner) DO UPDATE SET version = nextval('memory_changes')"
            " RETURNING o.version INTO NEW.change_version;"
            " RETURN NEW; END $$",
            "CREATE TRIGGER memory_written BEFORE INSERT OR UPDATE ON memories"
            " FOR EACH ROW EXECUTE FUNCTION wm_memory_written()",
            "CREATE FUNCTION wm_memory_counted() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN"
            " IF TG_OP = 'INSERT' THEN"
            " UPDATE memory_owners SET memories = memories + 1"
            " WHERE tenant = NEW.tenant AND owner = NEW.owner;"
            " ELSE"
            " UPDATE memory_owners SET version = nextval('memory_changes'),"
            " memories = memories - 1 WHERE tenant = OLD.tenant AND owner = OLD.owner;"
            " DELETE FROM memory_owners WHERE tenant = OLD.tenant AND owner = OLD.owner"
            " AND memories <= 0;"
            " END IF;"
            " RETURN NULL; END $$",
            "CREATE TRIGGER memory_counted AFTER INSERT OR DELETE ON memories"
            " FOR EACH ROW EXECUTE FUNCTION wm_memory_counted()",
            "CREATE FUNCTION wm_memory_vector_stored() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN UPDATE memories SET change_version = change_version WHERE mid = NEW.mid;"
            " RETURN NULL; END $$",
            "CREATE TRIGGER memory_vector_stored AFTER INSERT OR UPDATE ON memory_vectors"
            " FOR EACH ROW EXECUTE FUNCTION wm_memory_vector_stored()",
            "ALTER TABLE archives ADD COLUMN vector_version BIGINT NOT NULL DEFAULT 0",
        ),
    ),
    (
        18,
        # A working memory's document (tens of kilobytes, written by every Phase 2 and
        # ApplyWorkingMemoryOps) is compressed with lz4 rather than pglz: a 56 KB document
        # took 0.72 ms to insert with pglz, 0.27 ms with lz4, and 40% less space. Only the
        # compression of rows written from now on changes, never what a row holds; a server
        # built without lz4 (or before PostgreSQL 14) keeps pglz.
        (
            "DO $$ BEGIN"
            " EXECUTE 'ALTER TABLE working_memories ALTER COLUMN document SET COMPRESSION lz4';"
            " EXCEPTION WHEN feature_not_supported OR syntax_error THEN NULL;"
            " END $$",
        ),
    ),
)
