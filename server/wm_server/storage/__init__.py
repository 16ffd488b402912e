"""Persistence: row access for both engines (repositories written once, a dialect for what
differs), units of work, and the engines themselves (SQLite embedded, PostgreSQL for replicas)."""
