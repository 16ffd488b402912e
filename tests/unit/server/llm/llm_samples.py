"""Sample documents, tool answers and messages shared by the provider tests."""

from __future__ import annotations

from typing import Any

from wm_core import Message, Role, TextPart, ToolResultPart, ToolUsePart

TEST_MODEL = "claude-test-model"
OPENAI_TEST_MODEL = "gpt-4o-mini"  # a model of the context-window table

PREVIOUS_WM = """# Working Memory

## Session Title
Ledgerline CSV importer for German bank exports

## Current State
Dates and amounts of the DKB export parse; duplicate detection is next.

## Task & Goals
- Make samples/dkb_2025-01.csv import cleanly

## Key Facts & Decisions
- The layout is detected from the header row; no --bank flag

## Files & Context
- ledgerline/importers/csv_importer.py — the importer, edited
- ledgerline/importers/dialects.py — new dialect module

## Errors & Corrections
- ValueError on '31.01.2025': parse_date only knew ISO dates; fixed with dialects

## Open Issues
- Should pending (Vorgemerkt) rows be imported?
"""


def valid_update_input() -> dict[str, Any]:
    """A complete, schema-valid ``update_working_memory`` argument object."""
    return {
        "sections": {
            "Session Title": {"op": "KEEP"},
            "Current State": {
                "op": "UPDATE",
                "content": "Duplicates are detected with an occurrence counter; --dry-run is next.",
            },
            "Task & Goals": {"op": "APPEND", "items": ["Add a --dry-run flag to `import`"]},
            "Key Facts & Decisions": {
                "op": "APPEND",
                "items": ["External ids hash date, amount, payee and an occurrence counter"],
            },
            "Files & Context": {"op": "APPEND", "items": ["ledgerline/db.py — schema, untouched"]},
            "Errors & Corrections": {
                "op": "APPEND",
                "items": ["sqlite3.IntegrityError on external_id: same-day rows collided"],
            },
            "Open Issues": {
                "op": "UPDATE",
                "content": (
                    "- [resolved] Should pending (Vorgemerkt) rows be imported? No, skipped.\n"
                    "- Categorize spending by payee?"
                ),
            },
        }
    }


def short_messages() -> list[Message]:
    """A small exchange with a failing tool call, enough for a prompt."""
    return [
        Message("u1", Role.USER, (TextPart("Please import samples/dkb_2025-01.csv again."),)),
        Message(
            "a1",
            Role.ASSISTANT,
            (
                TextPart("Running the import."),
                ToolUsePart("toolu_1", "bash", '{"command": "ledgerline import x.csv"}'),
            ),
        ),
        Message(
            "u2",
            Role.USER,
            (
                ToolResultPart(
                    "toolu_1", "sqlite3.IntegrityError: UNIQUE constraint failed", is_error=True
                ),
            ),
        ),
    ]
