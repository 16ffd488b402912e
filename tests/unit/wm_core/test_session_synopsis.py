"""Typed synopses of externalized tool outputs (wm_core.synopsis, externalize, output_ids)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from wm_core import (
    SYNOPSIS_MAX_CHARS,
    Message,
    OutputFormat,
    OutputKind,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    detect_format,
    externalize,
    line_count,
    message_tokens,
    output_ids,
    synopsis,
)


def _msg(*parts: TextPart | ToolUsePart | ToolResultPart, role: Role = Role.USER) -> Message:
    return Message("m1", role, parts, message_tokens(parts))


JSON_DUMP = json.dumps(
    {
        "items": [{"id": n, "name": f"row {n}", "tags": ["a", "b"]} for n in range(1500)],
        "total": 1500,
        "next": None,
    }
)
CSV_DUMP = "id,name,amount\n" + "".join(f'{n},"Doe, J{n}",{n * 1.5}\n' for n in range(2000))
TSV_DUMP = "id\tname\n" + "".join(f"{n}\tname{n}\n" for n in range(900))
YAML_DUMP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: wm\ndata:\n" + "".join(
    f"  key{n}: value{n}\n" for n in range(3000)
)
XML_DUMP = (
    "<?xml version='1.0'?>\n<suite name='all'>"
    + "".join(f"<case id='{n}'><ok/></case>" for n in range(1200))
    + "<summary failed='1'/></suite>"
)
CODE_DUMP = (
    "import os\nfrom pathlib import Path\n\n\nclass Ledger:\n    def post(self, entry):\n"
    "        return entry\n\n\n"
    + "".join(f"def helper_{n}(x):\n    return x + {n}\n\n" for n in range(800))
)
LOG_DUMP = (
    "2026-12-01 10:00:00 INFO starting\n"
    + "".join(f"2026-12-01 10:00:{n % 60:02d} INFO step {n} ok\n" for n in range(3000))
    + "2026-12-01 10:01:00 ERROR ledger: connection refused\nTraceback (most recent call last):\n"
    + "2026-12-01 10:01:01 INFO shutting down\n"
)


def test_each_format_is_recognized() -> None:
    assert detect_format(JSON_DUMP) is OutputFormat.JSON
    assert detect_format(CSV_DUMP) is OutputFormat.CSV
    assert detect_format(TSV_DUMP) is OutputFormat.TSV
    assert detect_format(YAML_DUMP) is OutputFormat.YAML
    assert detect_format(XML_DUMP) is OutputFormat.XML
    assert detect_format(CODE_DUMP) is OutputFormat.CODE
    assert detect_format(LOG_DUMP) is OutputFormat.LOG
    assert detect_format("just some prose, nothing more\n" * 900) is OutputFormat.TEXT
    assert detect_format("".join(f"step {n}: ok\n" for n in range(900))) is OutputFormat.TEXT
    prose = "".join(f"Line {n} of the report{', with a clause' * (n % 3)}.\n" for n in range(900))
    assert detect_format(prose) is OutputFormat.TEXT
    assert detect_format("{not json" + "x" * 30_000) is OutputFormat.TEXT


def test_json_synopsis_gives_the_shape_lengths_and_a_sample() -> None:
    text = synopsis(JSON_DUMP, "out_3_0")
    assert text.startswith("[Tool output out_3_0 stored in full, not shown here: ")
    assert f"{len(JSON_DUMP):,} bytes" in text and "format json" in text
    assert '"items": array[1,500]' in text and '"total": number' in text
    assert '"next": null' in text and '"name": string' in text
    assert 'Sample (the opening): {"items": [{"id": 0, "name": "row 0"' in text


def test_table_synopsis_gives_the_header_and_row_count() -> None:
    text = synopsis(CSV_DUMP, "o")
    assert (
        "Columns (3): id, name, amount" in text and "Rows: 2,000 (not counting the header)" in text
    )
    assert 'Last row: 1999,"Doe, J1999",2998.5' in text
    assert "Columns (2): id, name" in synopsis(TSV_DUMP, "o")


def test_yaml_and_xml_synopses_give_the_top_level() -> None:
    yaml = synopsis(YAML_DUMP, "o")
    assert "Top-level keys (4):" in yaml and "L1: apiVersion: v1" in yaml and "L5: data:" in yaml
    assert "key17" not in yaml
    xml = synopsis(XML_DUMP, "o")
    assert "Root element: <suite> with 1,201 child elements:" in xml
    assert "<case> × 1,200" in xml and "<summary> × 1" in xml


def test_code_synopsis_lists_imports_and_definitions() -> None:
    text = synopsis(CODE_DUMP, "o")
    assert (
        "Imports (2):" in text
        and "L1: import os" in text
        and "L2: from pathlib import Path" in text
    )
    assert (
        "Definitions (802):" in text
        and "L5: class Ledger:" in text
        and "L6: def post(self, entry):" in text
    )


def test_log_synopsis_gives_head_tail_and_every_error_looking_line() -> None:
    text = synopsis(LOG_DUMP, "o")
    lines = line_count(LOG_DUMP)
    assert "L1: 2026-12-01 10:00:00 INFO starting" in text
    assert f"L{lines}: 2026-12-01 10:01:01 INFO shutting down" in text
    assert "Lines that look like errors (2):" in text
    assert f"L{lines - 2}: 2026-12-01 10:01:00 ERROR ledger: connection refused" in text
    assert f"L{lines - 1}: Traceback (most recent call last):" in text


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=0, max_size=3000), st.sampled_from([*OutputFormat, None]))
def test_synopsis_is_deterministic_and_bounded(text: str, fmt: OutputFormat | None) -> None:
    big = text * 20
    if fmt is OutputFormat.JSON:
        big = json.dumps({"k": big})
    first = synopsis(big, "out_1_0", fmt)
    assert first == synopsis(big, "out_1_0", fmt)
    assert len(first) <= SYNOPSIS_MAX_CHARS
    assert output_ids(_msg(ToolResultPart("t", first))) == ("out_1_0",)


def test_externalize_replaces_large_results_and_inputs_only() -> None:
    big_input = json.dumps({"path": "a.json", "body": JSON_DUMP})
    message = _msg(
        TextPart("x" * 50_000),  # text is the user's own words: never externalized
        ToolUsePart("t1", "write", big_input),
        ToolResultPart("t2", LOG_DUMP, is_error=True),
        ToolResultPart("t3", "small"),
        role=Role.ASSISTANT,
    )
    replaced, taken = externalize(message, 20_000, "out_7_")
    assert [(t.output_id, t.part_index, t.tool_use_id, t.kind) for t in taken] == [
        ("out_7_1", 1, "t1", OutputKind.INPUT),
        ("out_7_2", 2, "t2", OutputKind.RESULT),
    ]
    assert taken[0].content == big_input and taken[1].content == LOG_DUMP
    assert taken[1].synopsis == replaced.parts[2].content  # type: ignore[union-attr]
    assert taken[1].format is OutputFormat.LOG and taken[1].line_count == line_count(LOG_DUMP)
    assert replaced.parts[0] == message.parts[0] and replaced.parts[3] == message.parts[3]
    use = replaced.parts[1]
    assert isinstance(use, ToolUsePart) and use.id == "t1" and use.name == "write"
    assert json.loads(use.input_json)["tool_output_id"] == "out_7_1"
    result = replaced.parts[2]
    assert isinstance(result, ToolResultPart) and result.is_error and result.tool_use_id == "t2"
    assert replaced.estimated_tokens == message_tokens(replaced.parts)
    assert replaced.estimated_tokens <= 12_500 + 2 * (SYNOPSIS_MAX_CHARS + 100) // 4
    assert output_ids(replaced) == ("out_7_1", "out_7_2")
    assert output_ids(message) == ()


def test_externalize_keeps_what_is_small_or_when_turned_off() -> None:
    message = _msg(ToolResultPart("t", "y" * 30_000))
    assert externalize(message, 0, "o") == (message, ())
    assert externalize(message, 30_000, "o") == (message, ())
    # a threshold below the synopsis size never makes a message larger
    small = _msg(ToolResultPart("t", "z" * 300))
    assert externalize(small, 10, "o") == (small, ())
