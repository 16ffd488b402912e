"""Reading the arguments of an ``update_working_memory`` call, whatever shape they arrive in.

LLM tool arguments are usually valid JSON, but not always: backends wrap unparseable text as
``{"raw": "..."}``, models forget the ``sections`` wrapper, wrap JSON in code fences, or run out
of tokens mid-string. Each step of the chain below handles one of those, and the result says
what it took: strict JSON, then the ``raw`` wrapper, then a missing ``sections`` wrapper, then
``json-repair``, then a per-section salvage of whatever sections can still be found. Sections
that remain unreadable are KEEP, and are reported as such.

Truncation gets one extra rule: when the text was cut off inside a string, the op that string
belonged to is not trusted (a half-written UPDATE would replace a section with a fragment), so
an UPDATE becomes KEEP and an APPEND loses only its unfinished item.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import json_repair

from wm_core._document.sections import SECTIONS, canonical_name
from wm_core._ops.section_ops import KEEP, OpKind, SectionOp, describe, normalize_op


class ReadMethod(StrEnum):
    """How the arguments object was obtained."""

    OBJECT = "object"  # already decoded by the caller
    JSON = "json"  # strict JSON
    REPAIRED = "repaired"  # json-repair
    SALVAGED = "salvaged"  # no object; sections found one by one in the text
    NONE = "none"  # nothing readable


@dataclass(frozen=True, slots=True)
class ParsedOps:
    """One op for every section, and an account of how they were obtained.

    ``found`` lists the sections read from the input (``salvaged`` the subset that needed the
    per-section salvage, ``distrusted`` the one the text was cut off in, whose op was made
    KEEP or lost its unfinished item), ``defaulted`` the sections set to KEEP because they
    were missing or unreadable. ``problems`` describes every repair and every default in words.
    """

    ops: dict[str, SectionOp]
    problems: tuple[str, ...] = ()
    method: ReadMethod = ReadMethod.NONE
    found: tuple[str, ...] = ()
    salvaged: tuple[str, ...] = ()
    defaulted: tuple[str, ...] = field(default=SECTIONS)
    distrusted: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """Whether any section was read at all (if not, the caller should regenerate)."""
        return bool(self.found)


_NOTHING: Final = object()

_FENCE = re.compile(r"^```[\w.+-]*[ \t]*\n(.*?)\n?```$", re.DOTALL)
_SECTION_KEY = re.compile(
    r'(?<!\\)"\s*(' + "|".join(re.escape(name) for name in SECTIONS) + r')\s*"\s*:',
    re.IGNORECASE,
)
_DECODER: Final = json.JSONDecoder()
# Typographic quotes where JSON has its quotes: after "{", "[", ":" or "," (opening) and before
# ":", ",", "}" or "]" (closing). Models that "prettify" their output do this; json-repair reads
# such strings but ends them at the first comma, so text after a comma in a content is lost.
_CURLY_OPEN = re.compile("([{\\[:,]\\s*)[\u201c\u201d]")
_CURLY_CLOSE = re.compile("[\u201c\u201d](\\s*[:,}\\]])")


def _unfence(text: str) -> str:
    match = _FENCE.match(text)
    return match.group(1).strip() if match else text


def _strict(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOTHING


def _repaired(text: str) -> object:
    try:
        value = json_repair.loads(text)
    except Exception:  # a third-party parser on hostile input: any failure means "no value"
        return _NOTHING
    return value if isinstance(value, (dict, list)) and value else _NOTHING


class _Reader:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def decode(self, text: str) -> tuple[object, ReadMethod]:
        stripped = text.strip()
        if not stripped:
            self.problems.append("arguments are empty")
            return _NOTHING, ReadMethod.NONE
        value = _strict(stripped)
        if value is not _NOTHING:
            return value, ReadMethod.JSON
        unfenced = _unfence(stripped)
        if unfenced is not stripped:
            value = _strict(unfenced)
            if value is not _NOTHING:
                self.problems.append("arguments were wrapped in a code fence")
                return value, ReadMethod.JSON
        if "\u201c" in unfenced or "\u201d" in unfenced:
            value = _strict(_CURLY_CLOSE.sub('"\\1', _CURLY_OPEN.sub('\\1"', unfenced)))
            if value is not _NOTHING:
                self.problems.append("arguments used typographic quotes as JSON quotes; read")
                return value, ReadMethod.REPAIRED
        value = _repaired(unfenced)
        if value is not _NOTHING:
            self.problems.append("arguments were not valid JSON; repaired with json-repair")
            return value, ReadMethod.REPAIRED
        self.problems.append("arguments are not JSON, even after repair")
        return _NOTHING, ReadMethod.NONE

    def locate_sections(self, value: object) -> Mapping[object, object] | None:
        if not isinstance(value, Mapping):
            if value is not _NOTHING:
                self.problems.append(f"arguments are a {type(value).__name__}, not an object")
            return None
        inner = value.get("sections")
        if isinstance(inner, str):
            decoded, _ = self.decode(inner)
            if isinstance(decoded, Mapping):
                self.problems.append("'sections' was a JSON string; decoded")
                inner = decoded
        if isinstance(inner, Mapping):
            return inner
        if any(isinstance(key, str) and canonical_name(key) for key in value):
            self.problems.append("the 'sections' wrapper is missing; read the top level")
            return value
        self.problems.append("no 'sections' object and no section names in the arguments")
        return None

    def read_ops(self, sections: Mapping[object, object], ops: dict[str, SectionOp]) -> None:
        for key, raw in sections.items():
            name = canonical_name(key) if isinstance(key, str) else None
            if name is None:
                self.problems.append(f"{describe(key)!r} is not a section; ignored")
                continue
            if name in ops:
                self.problems.append(f"{name}: given twice; the first op is used")
                continue
            normalized = normalize_op(raw)
            if normalized is None:
                continue
            if normalized.guard is not None:
                self.problems.append(f"{name}: {normalized.reason}")
            ops[name] = normalized.op

    def salvage(self, text: str, ops: dict[str, SectionOp]) -> list[str]:
        """Decode each section's op on its own, between its key and the next section key."""
        salvaged: list[str] = []
        matches = list(_SECTION_KEY.finditer(text))
        for index, match in enumerate(matches):
            name = canonical_name(match.group(1))
            if name is None or name in ops:
                continue
            end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
            value = _fragment(text[match.end() : end])
            if value is _NOTHING:
                continue
            normalized = normalize_op(value)
            if normalized is None:
                continue
            if normalized.guard is not None:
                self.problems.append(f"{name}: {normalized.reason}")
            ops[name] = normalized.op
            salvaged.append(name)
        if salvaged:
            self.problems.append("salvaged section by section: " + ", ".join(salvaged))
        return salvaged

    def distrust_cut_string(self, text: str, ops: dict[str, SectionOp]) -> str | None:
        """The section the text was cut off in (its op is not trusted), if any."""
        tail = _unfence(text.strip()).rstrip(", \t\r\n")
        if tail.endswith(("}", "]")):
            return None
        matches = list(_SECTION_KEY.finditer(text))
        if not matches:
            return None
        name = canonical_name(matches[-1].group(1))
        if name is None:
            return None
        if _ends_with_closed_string(tail):
            # A closed string may end a complete value; but an UPDATE or APPEND cut before
            # its content or items began lost everything it was about to say.
            if not _cut_before_payload(text[matches[-1].end() :]):
                return None
            self.problems.append(f"{name}: the output was cut before its op's payload; kept")
            return name
        if name not in ops:
            return None
        op = ops[name]
        if op.kind is OpKind.UPDATE:
            ops[name] = KEEP
            self.problems.append(f"{name}: the output was cut inside its UPDATE; kept instead")
        elif op.kind is OpKind.APPEND:
            rest = op.items[:-1]
            ops[name] = SectionOp(OpKind.APPEND, items=rest) if rest else KEEP
            self.problems.append(
                f"{name}: the output was cut inside an APPEND item; that item was dropped: "
                f"{op.items[-1]!r}"
            )
        else:
            self.problems.append(f"{name}: the output was cut off while writing its op; kept")
        return name


_OP_NEEDING_PAYLOAD = re.compile(r'"op"\s*:\s*"(?:UPDATE|APPEND)"', re.IGNORECASE)


def _cut_before_payload(fragment: str) -> bool:
    """True for a fragment like ``{"op": "APPEND", `` whose items (or content) never began."""
    return bool(_OP_NEEDING_PAYLOAD.search(fragment)) and not (
        '"items"' in fragment or '"content"' in fragment
    )


def _ends_with_closed_string(tail: str) -> bool:
    if not tail.endswith('"'):
        return False
    backslashes = len(tail) - len(tail[:-1].rstrip("\\")) - 1
    return backslashes % 2 == 0


def decode_arguments(text: str) -> tuple[object | None, ReadMethod, tuple[str, ...]]:
    """Tool arguments text decoded by the same chain as the update tool's (strict JSON, a code
    fence, typographic quotes, json-repair): the value (None when nothing was readable), how
    it was read and what had to be repaired. For other tools' readers (long-term memory)."""
    reader = _Reader()
    value, method = reader.decode(text)
    return (None if value is _NOTHING else value), method, tuple(reader.problems)


def cut_off(text: str) -> bool:
    """Whether JSON text ends before its outermost value closed (the output hit its limit)."""
    tail = _unfence(text.strip()).rstrip(", \t\r\n")
    return not tail.endswith(("}", "]"))


def _fragment(span: str) -> object:
    span = span.strip()
    if not span:
        return _NOTHING
    try:
        value, _ = _DECODER.raw_decode(span)
        return value
    except (ValueError, RecursionError):
        pass
    return _repaired(span)


def _read(raw: object) -> ParsedOps:
    reader = _Reader()
    text: str | None = None
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw).decode("utf-8", "replace")
    if isinstance(raw, str):
        text = raw
        value, method = reader.decode(text)
    elif raw is None:
        reader.problems.append("no arguments")
        value, method = _NOTHING, ReadMethod.NONE
    else:
        value, method = raw, ReadMethod.OBJECT
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        reader.problems.append("arguments were JSON text inside a JSON string; decoded again")
        text = value
        value, method = reader.decode(text)
    if isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get("raw"), str):
        reader.problems.append("arguments came wrapped as {'raw': ...}")
        text = value["raw"]
        value, method = reader.decode(text)

    ops: dict[str, SectionOp] = {}
    sections = reader.locate_sections(value)
    if sections is not None:
        reader.read_ops(sections, ops)
    salvaged: list[str] = []
    if text is not None and len(ops) < len(SECTIONS):
        salvaged = reader.salvage(text, ops)
        if salvaged and method is ReadMethod.NONE:
            method = ReadMethod.SALVAGED
    distrusted: str | None = None
    if text is not None and method not in (ReadMethod.JSON, ReadMethod.OBJECT):
        distrusted = reader.distrust_cut_string(text, ops)
    found = tuple(name for name in SECTIONS if name in ops)
    defaulted = tuple(name for name in SECTIONS if name not in ops)
    if defaulted:
        reader.problems.append("defaulted to KEEP: " + ", ".join(defaulted))
    return ParsedOps(
        ops={name: ops.get(name, KEEP) for name in SECTIONS},
        problems=tuple(reader.problems),
        method=method,
        found=found,
        salvaged=tuple(name for name in SECTIONS if name in salvaged),
        defaulted=defaulted,
        distrusted=(distrusted,) if distrusted is not None else (),
    )


def parse_tool_arguments(raw: object) -> ParsedOps:
    """Every section's op from the arguments of an update tool call. Never raises.

    ``raw`` is the arguments as received: a JSON string, an already-decoded object, or
    anything else (which yields KEEP everywhere, with the reason in ``problems``).
    """
    try:
        return _read(raw)
    except Exception as exc:  # the last line of defence: a bad tool call must not fail a commit
        return ParsedOps(
            ops=dict.fromkeys(SECTIONS, KEEP),
            problems=(f"arguments could not be read ({type(exc).__name__}); every section kept",),
        )
