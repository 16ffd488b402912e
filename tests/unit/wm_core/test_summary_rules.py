"""The offline summarizer's rules (wm_core): titles, sorting into sections, path spellings."""

from __future__ import annotations

import pytest

from support.conversation import load_conversation
from wm_core import (
    Message,
    PathSpellings,
    Role,
    TextPart,
    ToolResultPart,
    summarize,
    summary_title,
)


@pytest.fixture
def conversation() -> list[Message]:
    return load_conversation()


def test_title_skips_greetings_and_request_phrasing():
    assert summary_title("Hello! Could you please add CSV export to the report page?") == (
        "Add CSV export to the report page?".rstrip("?")
    )
    assert summary_title("hi, can you migrate the billing service to Postgres 16") == (
        "Migrate the billing service to Postgres 16"
    )
    assert len(summary_title(" ".join(["word"] * 30)).split()) == 10


def test_extraction_of_a_small_exchange(conversation: list[Message]):
    found = summarize(conversation[:6])

    assert found.title == "Fix the CSV importer in ledgerline"
    assert found.errors[0].startswith(
        "bash failed (python -m ledgerline import samples/dkb_2025-01.csv --account giro): "
        "ValueError: time data"
    )
    assert "next: Reproduced: `parse_date` uses a fixed `%Y-%m-%d` format." in found.errors[0]
    assert found.files[0] == "samples/dkb_2025-01.csv — mentioned by user, in bash command"
    assert found.files[1].startswith("ledgerline/importers/csv_importer.py — read")


def test_edge_messages_are_handled():
    messages = [
        Message("s", Role.SYSTEM, (TextPart("You must always answer in French. TODO: none"),)),
        Message("u", Role.USER, (TextPart("Ok"),)),
        Message("r", Role.USER, (ToolResultPart("toolu_old", "PermissionError: /etc/shadow"),)),
        Message("r2", Role.USER, (ToolResultPart("toolu_old2", "boom", is_error=True),)),
        Message("a", Role.ASSISTANT, (TextPart("Shall I retry with sudo? Or skip it?"),)),
    ]

    found = summarize(messages)

    assert found.title == ""  # "Ok" is no title
    assert found.facts == ()  # nothing from the system prompt
    assert not any("French" in issue or "none" in issue for issue in found.open_issues)
    assert "PermissionError: /etc/shadow (in tool output)" in found.errors
    assert "tool call toolu_old2 failed: boom — next: Shall I retry with sudo?" in found.errors
    assert found.goals == ()  # "Ok" is no task either
    assert found.open_issues == (
        "Waiting for the user: Shall I retry with sudo?",
        "Waiting for the user: Or skip it?",
    )
    assert found.current_state == "Shall I retry with sudo? Or skip it?"


def test_a_bare_name_with_two_candidates_and_paths_outside_the_root_stay_as_written():
    spellings = PathSpellings(
        [
            "/srv/app/src/a/cli.py",
            "src/a/cli.py",
            "src/b/cli.py",
            "cli.py",
            "./src/b/util.py",
            "util.py",
            "/etc/hosts.conf",
            "~/.config/app/settings.toml",
            "https://example.com/a/cli.py",
        ]
    )

    assert spellings.root == "/srv/app"
    assert spellings.canonical("/srv/app/src/a/cli.py") == "src/a/cli.py"
    assert spellings.canonical("cli.py") == "cli.py"  # two files of that name
    assert spellings.canonical("util.py") == "src/b/util.py"
    assert spellings.canonical("./src/b/util.py") == "src/b/util.py"
    assert spellings.canonical("/etc/hosts.conf") == "/etc/hosts.conf"
    assert spellings.canonical("~/.config/app/settings.toml") == "~/.config/app/settings.toml"
    assert spellings.canonical("https://example.com/a/cli.py") == "https://example.com/a/cli.py"
    assert PathSpellings(["/opt/x/y.py", "z/y.py"]).root is None  # no evidence, no root
    assert PathSpellings(["/w/p/y.py"], workdirs=["/w/p"]).canonical("/w/p/y.py") == "y.py"


def test_a_path_under_a_home_folder_is_spelled_home_relative_and_a_projects_is_not() -> None:
    spellings = PathSpellings(
        [".local/share/app/x.db", "~/.local/share/app/x.db", ".github/workflows/ci.yml"]
    )
    assert spellings.canonical(".local/share/app/x.db") == "~/.local/share/app/x.db"
    assert spellings.canonical("~/.local/share/app/x.db") == "~/.local/share/app/x.db"
    assert spellings.canonical(".github/workflows/ci.yml") == ".github/workflows/ci.yml"
    assert spellings.canonical("./.config/tool.toml") == "~/.config/tool.toml"
