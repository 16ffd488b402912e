"""Persistence: the storage port and its engines (SQLite embedded, PostgreSQL for replicas)."""
