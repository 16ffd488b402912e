"""Tool outputs too large to keep inline: their typed synopsis and the externalized message.

A coding agent reads whole logs, dumps JSON, runs test suites; one such output can be larger
than the context window. The server stores it whole and keeps, in the live message, a
synopsis that tells the model what the output is (its shape, header, structure, definitions
or its head, tail and error lines), how large it is and the id to read or search it by. The
synopsis is deterministic (the same output always gives the same text) and bounded, so
``pending_tokens``, Phase 2 and assembly count and see it instead of the output. Pure: the
server decides the id and the threshold, and stores what ``externalize`` returns.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum

from wm_core._messages import Message, Part, TextPart, ToolResultPart, ToolUsePart, message_tokens

# The synopsis never exceeds this many characters, whatever the output.
SYNOPSIS_MAX_CHARS = 6000
_LINE_MAX = 200  # one quoted line of the output
# Shares of a log's or a text's synopsis, in characters: the errors get the most room, so
# that a long head or tail never pushes them out.
_HEAD_CHARS = 1400
_TAIL_CHARS = 1400
_ERROR_CHARS = 2600
_HEAD_LINES = 15
_TAIL_LINES = 15
_ERROR_LINES = 30
_ENTRIES = 60  # keys, definitions, children listed at most
_SAMPLE_CHARS = 600
_KIND_SCAN = 1000  # array items whose types are listed
_SNIFF_LINES = 50
# The key pair an externalized tool input is replaced by (an input must stay a JSON object).
INPUT_ID_KEY = "tool_output_id"
INPUT_SYNOPSIS_KEY = "synopsis"
_HEADER = re.compile(r"\[Tool output ([A-Za-z0-9._:-]{1,160}) stored in full")


class OutputFormat(StrEnum):
    """What a tool output looks like, which decides what its synopsis shows."""

    JSON = "json"
    CSV = "csv"
    TSV = "tsv"
    YAML = "yaml"
    XML = "xml"
    CODE = "code"
    LOG = "log"
    TEXT = "text"


class OutputKind(StrEnum):
    """Which part of a tool exchange was externalized."""

    RESULT = "result"
    INPUT = "input"


@dataclass(frozen=True, slots=True)
class ExternalOutput:
    """One output taken out of a message: what the store keeps whole."""

    output_id: str
    part_index: int
    tool_use_id: str
    kind: OutputKind
    format: OutputFormat
    content: str
    line_count: int
    synopsis: str


def line_count(text: str) -> int:
    """Lines as GetToolOutput numbers them: split on "\\n", a final newline ends the last."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


_YAML_KEY = re.compile(r"^([A-Za-z_][\w.\-/]*):(?:\s|$)")  # no spaces: "step 3: ok" is a log
_XML_TAG = re.compile(r"<(/?)([A-Za-z_][\w.:\-]*)([^<>]*?)(/?)>")
# Both code patterns start at a newline, searched in "\n" + text: the regex engine then skips
# to each newline at C speed instead of trying every position (a 1 MiB file in milliseconds).
_CODE_IMPORT = re.compile(
    r"\n[ \t]*(?:import\s+\S|from\s+\S+\s+import\s|#include\s|using\s+[\w.]+;|use\s+[\w:]+|"
    r"(?:const|let|var)\s+\w+\s*=\s*require\()"
)
_CODE_DEF = re.compile(
    r"\n[ \t]*(?:(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:def|class|function|interface|"
    r"struct|enum|trait|impl|type|module)\s+\w|(?:pub(?:\(\w+\))?\s+)?(?:async\s+)?fn\s+\w|"
    r"func\s+(?:\([^)]*\)\s*)?\w|(?:public|private|protected|static)\s+[\w<>\[\], ]+\s+\w+\s*\()"
)
_LOG_LINE = re.compile(
    r"^\s*(?:\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\[?\d{2}:\d{2}:\d{2}|"
    r"\[?(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL|CRITICAL)\]?[\s:])",
    re.IGNORECASE,
)
# Words that make a line look like an error, matched case-insensitively at a word start
# ("fail" finds failed, failure, FAILED); and line openings of test runners' failure lines.
_ERROR_WORDS = (
    "error", "exception", "traceback", "fail", "fatal", "panic", "critical",
    "segmentation fault", "denied", "refused", "timed out", "timeout", "err!",
)  # fmt: skip
_ERROR_OPENINGS = ("\nE  ", "\nFAIL")


def detect_format(text: str) -> OutputFormat:
    """The format of an output, judged from its opening (and, for JSON, its whole text)."""
    return _detect(text)[0]


def _detect(text: str) -> tuple[OutputFormat, object]:
    """The format and, for JSON, the decoded value (decoding 1 MiB twice costs 30 ms)."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        value = _json_value(stripped)
        if value is not None:
            return OutputFormat.JSON, value
    return _detect_text(stripped), None


def _detect_text(stripped: str) -> OutputFormat:
    if stripped.startswith("<") and stripped.endswith(">") and _XML_TAG.search(stripped[:2000]):
        return OutputFormat.XML
    sample = [line for line in stripped.split("\n", _SNIFF_LINES)[:_SNIFF_LINES] if line.strip()]
    for delimiter, fmt in (("\t", OutputFormat.TSV), (",", OutputFormat.CSV)):
        if len(set(sample)) >= 3 and delimiter in sample[0]:
            widths = {len(_fields(line, delimiter)) for line in sample}
            if len(widths) == 1 and widths.pop() >= 2:
                return fmt
    if sample and (sample[0].startswith("---") or _YAML_KEY.match(sample[0])):
        keys = sum(1 for line in sample if _YAML_KEY.match(line))
        if keys >= 2 and all(
            _YAML_KEY.match(line) or line[:1] in (" ", "\t", "-", "#") for line in sample[1:]
        ):
            return OutputFormat.YAML
    head = "\n" + "\n".join(sample)
    if len(_CODE_IMPORT.findall(head)) + len(_CODE_DEF.findall(head)) >= 3:
        return OutputFormat.CODE
    if sample and sum(1 for line in sample if _LOG_LINE.match(line)) * 3 >= len(sample):
        return OutputFormat.LOG
    return OutputFormat.TEXT


def _fields(line: str, delimiter: str) -> list[str]:
    """The fields of one delimited line; a double-quoted field may hold the delimiter."""
    fields: list[str] = []
    current: list[str] = []
    quoted = False
    for char in line.rstrip("\r"):
        if char == '"':
            quoted = not quoted
        elif char == delimiter and not quoted:
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    fields.append("".join(current))
    return fields


def _json_value(text: str) -> object | None:
    try:
        value: object = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value


def _line(text: str) -> str:
    text = text.rstrip("\r")
    return text if len(text) <= _LINE_MAX else text[: _LINE_MAX - 1] + "…"


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return f"array[{len(value):,}]"
    return "object"


def _shape(value: object, indent: int, depth: int, out: list[str]) -> None:
    """Keys with their types, arrays with their lengths and the shape of their first item."""
    pad = "  " * indent
    if isinstance(value, dict):
        items = list(value.items())
        for key, item in items[:_ENTRIES]:
            out.append(f"{pad}{_line(json.dumps(key, ensure_ascii=False))}: {_type_name(item)}")
            if depth > 0 and isinstance(item, (dict, list)) and item:
                _shape(item, indent + 1, depth - 1, out)
        if len(items) > _ENTRIES:
            out.append(f"{pad}… {len(items) - _ENTRIES:,} more keys")
    elif isinstance(value, list) and value:
        kinds = sorted({_type_name(v).split("[")[0] for v in value[:_KIND_SCAN]})
        seen = "" if len(value) <= _KIND_SCAN else f" (in the first {_KIND_SCAN:,})"
        out.append(f"{pad}items: {' | '.join(kinds)}{seen}; the first one:")
        first = value[0]
        if isinstance(first, (dict, list)) and depth > 0:
            _shape(first, indent + 1, depth - 1, out)
        else:
            out.append(f"{pad}  {_type_name(first)}")


def _json_body(text: str, value: object) -> list[str]:
    out = [f"Shape (top level: {_type_name(value)}):"]
    _shape(value, 1, 3, out)
    sample = " ".join(text[: _SAMPLE_CHARS * 2].split())[:_SAMPLE_CHARS]  # whitespace folded
    out.append(f"Sample (the opening): {sample}{'…' if len(text) > len(sample) else ''}")
    return out


def _table_body(text: str, delimiter: str) -> list[str]:
    lines = [line for line in text.strip("\n").split("\n") if line.strip()]
    header = _fields(lines[0], delimiter) if lines else []
    out = [
        f"Columns ({len(header)}): {_line(', '.join(header))}",
        f"Rows: {len(lines) - 1:,} (not counting the header)",
        "First rows:",
    ]
    out.extend(f"  {_line(line)}" for line in lines[1:4])
    if len(lines) > 4:
        out.append(f"Last row: {_line(lines[-1])}")
    return out


def _yaml_body(text: str) -> list[str]:
    keys = [
        (n, line)
        for n, line in enumerate(text.split("\n"), 1)
        if _YAML_KEY.match(line) and not line.startswith(" ")
    ]
    out = [f"Top-level keys ({len(keys):,}):"]
    out.extend(f"  L{n}: {_line(line)}" for n, line in keys[:_ENTRIES])
    if len(keys) > _ENTRIES:
        out.append(f"  … {len(keys) - _ENTRIES:,} more")
    return out


def _xml_body(text: str) -> list[str]:
    depth = 0
    root = ""
    children: dict[str, int] = {}
    for match in _XML_TAG.finditer(text):
        closing, name, attrs, selfclosing = match.groups()
        if name.startswith(("?", "!")) or attrs.startswith("?"):
            continue
        if closing:
            depth -= 1
            continue
        if depth == 0 and not root:
            root = name
        elif depth == 1:
            children[name] = children.get(name, 0) + 1
        if not selfclosing:
            depth += 1
    out = [f"Root element: <{root}> with {sum(children.values()):,} child elements:"]
    ranked = sorted(children.items(), key=lambda item: (-item[1], item[0]))
    out.extend(f"  <{name}> × {count:,}" for name, count in ranked[:_ENTRIES])
    return out


def _pattern_lines(text: str, pattern: re.Pattern[str]) -> list[int]:
    """Start offsets of the lines where ``pattern`` (which begins with a newline) matches."""
    return sorted({m.start() for m in pattern.finditer("\n" + text)})


def _error_lines(text: str) -> list[int]:
    """Start offsets of the lines that look like errors, found with str.find (fast)."""
    lowered = text.lower() if text.isascii() else text.casefold()
    if len(lowered) != len(text):  # casefold changed lengths: offsets would drift
        lowered = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    starts: set[int] = set()
    for word in _ERROR_WORDS:
        at = lowered.find(word)
        while at >= 0:
            if at == 0 or not lowered[at - 1].isalnum():
                starts.add(text.rfind("\n", 0, at) + 1)
            at = lowered.find(word, at + len(word))
    padded = "\n" + text
    for opening in _ERROR_OPENINGS:
        at = padded.find(opening)
        while at >= 0:
            starts.add(at)
            at = padded.find(opening, at + 1)
    return sorted(starts)


def _numbered(text: str, starts: list[int], limit: int) -> tuple[list[str], int]:
    """The lines at ``starts`` as "L<number>: line", the first ``limit``, and how many."""
    found: list[str] = []
    number = 1
    counted_to = 0
    for start in starts[:limit]:
        number += text.count("\n", counted_to, start)
        counted_to = start
        end = text.find("\n", start)
        found.append(f"  L{number}: {_line(text[start : end if end >= 0 else len(text)].strip())}")
    return found, len(starts)


def _code_body(text: str) -> list[str]:
    imports, import_count = _numbered(text, _pattern_lines(text, _CODE_IMPORT), _ENTRIES // 2)
    defs, def_count = _numbered(text, _pattern_lines(text, _CODE_DEF), _ENTRIES)
    out = [f"Imports ({import_count:,}):", *imports, f"Definitions ({def_count:,}):", *defs]
    return out


def _within(lines: list[str], chars: int) -> list[str]:
    """The leading ``lines`` that fit in ``chars`` characters (at least one)."""
    out: list[str] = []
    used = 0
    for line in lines:
        used += len(line) + 1
        if out and used > chars:
            break
        out.append(line)
    return out


def _text_body(text: str) -> list[str]:
    lines = text.split("\n")
    head = _within(
        [f"  L{n}: {_line(line)}" for n, line in enumerate(lines[:_HEAD_LINES], 1)], _HEAD_CHARS
    )
    out = [f"First {len(head)} lines:", *head]
    if len(lines) > len(head):
        start = max(len(head), len(lines) - _TAIL_LINES)
        numbered = [f"  L{n}: {_line(line)}" for n, line in enumerate(lines[start:], start + 1)]
        tail = _within(numbered[::-1], _TAIL_CHARS)[::-1]
        out.append(f"Last {len(tail)} lines:")
        out.extend(tail)
    errors, total = _numbered(text, _error_lines(text), _ERROR_LINES)
    if total:
        errors = _within(errors, _ERROR_CHARS)
        shown = f", the first {len(errors)} shown" if total > len(errors) else ""
        out.append(f"Lines that look like errors ({total:,}{shown}):")
        out.extend(errors)
    return out


def synopsis(text: str, output_id: str, fmt: OutputFormat | None = None) -> str:
    """The text that stands in for ``text`` in the live message: a header with the sizes,
    the format and the id to read it by, then what the format says about the content."""
    if fmt is None:
        fmt, value = _detect(text)
    else:
        value = _json_value(text.strip()) if fmt is OutputFormat.JSON else None
    return _synopsis(text, output_id, fmt, value)


def _synopsis(text: str, output_id: str, fmt: OutputFormat, value: object) -> str:
    size = len(text.encode("utf-8", "surrogatepass"))
    header = (
        f"[Tool output {output_id} stored in full, not shown here: {size:,} bytes,"
        f" {len(text):,} characters, {line_count(text):,} lines, format {fmt.value}."
        f' Read any part with tool_output_read(output_id="{output_id}") by lines or bytes.]'
    )
    if fmt is OutputFormat.JSON and value is not None:
        body = _json_body(text.strip(), value)
    elif fmt in (OutputFormat.CSV, OutputFormat.TSV):
        body = _table_body(text, "\t" if fmt is OutputFormat.TSV else ",")
    elif fmt is OutputFormat.YAML:
        body = _yaml_body(text)
    elif fmt is OutputFormat.XML:
        body = _xml_body(text)
    elif fmt is OutputFormat.CODE:
        body = _code_body(text)
    else:
        body = _text_body(text)
    out = header + "\n" + "\n".join(body)
    if len(out) > SYNOPSIS_MAX_CHARS:
        out = out[: SYNOPSIS_MAX_CHARS - 40].rsplit("\n", 1)[0] + "\n… (synopsis shortened)"
    return out


def externalize(
    message: Message, threshold: int, id_prefix: str
) -> tuple[Message, tuple[ExternalOutput, ...]]:
    """``message`` with each tool result (and tool input) longer than ``threshold``
    characters replaced by its synopsis, and the outputs taken out. Output ids are
    ``{id_prefix}{part index}``. A part is kept as it is when its synopsis would not be
    shorter; ``threshold`` 0 keeps everything inline."""
    if threshold <= 0:
        return message, ()
    parts: list[Part] = []
    taken: list[ExternalOutput] = []
    for index, part in enumerate(message.parts):
        if isinstance(part, ToolResultPart) and len(part.content) > threshold:
            output_id = f"{id_prefix}{index}"
            fmt, value = _detect(part.content)
            text = _synopsis(part.content, output_id, fmt, value)
            if len(text) < len(part.content):
                taken.append(
                    ExternalOutput(
                        output_id, index, part.tool_use_id, OutputKind.RESULT, fmt,
                        part.content, line_count(part.content), text,
                    )
                )  # fmt: skip
                part = ToolResultPart(part.tool_use_id, text, part.is_error)
        elif isinstance(part, ToolUsePart) and len(part.input_json) > threshold:
            output_id = f"{id_prefix}{index}"
            value = _json_value(part.input_json)
            text = _synopsis(part.input_json, output_id, OutputFormat.JSON, value)
            replaced = json.dumps(
                {INPUT_ID_KEY: output_id, INPUT_SYNOPSIS_KEY: text}, ensure_ascii=False
            )
            if len(replaced) < len(part.input_json):
                taken.append(
                    ExternalOutput(
                        output_id, index, part.id, OutputKind.INPUT, OutputFormat.JSON,
                        part.input_json, line_count(part.input_json), text,
                    )
                )  # fmt: skip
                part = ToolUsePart(part.id, part.name, replaced)
        parts.append(part)
    if not taken:
        return message, ()
    frozen = tuple(parts)
    return Message(message.id, message.role, frozen, message_tokens(frozen)), tuple(taken)


def output_ids(message: Message) -> tuple[str, ...]:
    """The ids of the stored outputs whose synopses ``message`` carries, in part order."""
    found: list[str] = []
    for part in message.parts:
        if isinstance(part, ToolResultPart):
            match = _HEADER.match(part.content)
            if match:
                found.append(match.group(1))
        elif isinstance(part, ToolUsePart) and part.input_json.startswith(f'{{"{INPUT_ID_KEY}"'):
            value = _json_value(part.input_json)
            if isinstance(value, dict) and isinstance(value.get(INPUT_ID_KEY), str):
                found.append(value[INPUT_ID_KEY])
        elif isinstance(part, TextPart):
            continue
    return tuple(found)
