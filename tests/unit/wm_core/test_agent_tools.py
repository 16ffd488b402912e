"""The agent tools GetToolDefinitions serves: their schemas state the limits the service
enforces (the same constants), a caller's copy is its own, and archive ids read back."""

from __future__ import annotations

import re

import pytest
from jsonschema import Draft202012Validator

from wm_core import (
    AGENT_TOOL_NAMES,
    ARCHIVE_ID_PATTERN,
    MAX_MEMORY_HITS,
    MAX_STORED_MEMORY_CHARS,
    MEMORY_ID_PATTERN,
    MEMORY_TOOLS,
    RECALL_TOOLS,
    UPDATE_TOOL,
    agent_tools,
    archive_name,
    archive_number,
    openai_tool,
)


def _schema(name: str) -> Draft202012Validator:
    tool = next(t for t in agent_tools() if t["name"] == name)
    Draft202012Validator.check_schema(tool["input_schema"])
    return Draft202012Validator(tool["input_schema"])


def test_every_tool_the_prompt_names_is_served_once_with_a_valid_schema() -> None:
    names = [t["name"] for t in agent_tools()]
    assert len(names) == len(set(names)) and set(names) == AGENT_TOOL_NAMES
    assert {*RECALL_TOOLS, *MEMORY_TOOLS, UPDATE_TOOL["name"]} == AGENT_TOOL_NAMES
    for tool in agent_tools():
        Draft202012Validator.check_schema(tool["input_schema"])
        assert tool["description"].strip()


def test_the_memory_schemas_state_the_service_limits() -> None:
    store = _schema("memory_store")
    assert store.is_valid({"type": "preference", "text": "x" * MAX_STORED_MEMORY_CHARS})
    assert not store.is_valid({"type": "preference", "text": "x" * (MAX_STORED_MEMORY_CHARS + 1)})
    search = _schema("memory_search")
    assert search.is_valid({"query": "ledger", "limit": MAX_MEMORY_HITS})
    assert not search.is_valid({"query": "ledger", "limit": MAX_MEMORY_HITS + 1})
    forget = _schema("memory_forget")
    assert forget.is_valid({"memory_id": "mem_" + "0a" * 10})
    assert not forget.is_valid({"memory_id": "mem_" + "0A" * 10})
    assert re.fullmatch(MEMORY_ID_PATTERN, "mem_" + "f" * 20)


@pytest.mark.parametrize("seq", [1, 42, 999, 1000, 10**17])
def test_an_archive_name_matches_the_expand_schema_and_reads_back(seq: int) -> None:
    name = archive_name(seq)
    assert _schema("archive_expand").is_valid({"archive_id": name})
    assert re.fullmatch(ARCHIVE_ID_PATTERN, name)
    assert archive_number(name) == seq


@pytest.mark.parametrize(
    "text", ["archive_000", "archive_01", "archive_١٢٣", "archive_" + "1" * 19, "Archive_001", ""]
)
def test_what_is_not_an_archive_id_is_refused_by_both(text: str) -> None:
    assert archive_number(text) is None
    if text != "archive_000":  # the pattern is the shape; number 0 is refused on reading
        assert not _schema("archive_expand").is_valid({"archive_id": text})


def test_a_callers_copy_is_its_own_and_the_openai_shape_carries_the_same_schema() -> None:
    first = agent_tools()
    first[0]["input_schema"]["properties"].clear()
    first[0]["name"] = "changed"
    again = agent_tools()
    assert again[0]["name"] != "changed" and again[0]["input_schema"]["properties"]
    for tool in again:
        shaped = openai_tool(tool)
        assert shaped["type"] == "function"
        assert shaped["function"] == {
            "name": tool["name"],
            "description": tool["description"],
            "parameters": tool["input_schema"],
        }
