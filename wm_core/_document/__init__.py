"""The working-memory document: its seven sections, reading and writing it, and the items and
references inside a section body."""
