"""Turning the output of a creation call into a canonical working memory, or refusing it.

Creation runs for the first working memory, to upgrade a legacy summary, and as a fallback when
an update fails. The reference stores that output verbatim, preambles and code fences included;
a document without the canonical headings is then re-created from scratch on the next commit
and everything in it is lost. Here the output is read tolerantly and rewritten canonically, and
an output in which no section can be recognised is rejected so the caller can treat the attempt
as failed and keep the previous working memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

import json_repair

from wm_core._document.markdown import (
    is_working_memory,
    parse_document_detailed,
    render_document,
    sanitize_body,
)
from wm_core._document.sections import SECTIONS, canonical_name
from wm_core._document.text import normalize_newlines
from wm_core._ops.section_ops import describe

# A fence that opens a block: three or more backticks or tildes, an optional info word, at the
# start of a line (indented or not) or after a sentence on the same line.
_OPENING_FENCE = re.compile(r"(?:^|(?<=\s))[ \t]*(`{3,}|~{3,})[ \t]*[\w.+-]*[ \t]*$")


class CreationRejected(ValueError):
    """The creation output has no recognisable section with content."""

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


@dataclass(frozen=True, slots=True)
class CreationResult:
    """A canonical document made from creation output, and what had to be fixed on the way."""

    document: str
    sections: tuple[str, ...]  # the sections that have content
    problems: tuple[str, ...] = ()


def _fenced(text: str) -> tuple[str, str] | None:
    """The body of the first code fence of ``text`` and the text around it, or None.

    Models wrap a document in a fence in many ways: after a preamble, with ``~~~`` or four
    backticks, indented, with Windows line ends, opening at the end of a sentence ("Sure!
    ```markdown"), or cut off before the closing fence. The wrapper closes at its *last* bare
    fence line, so a code sample fenced inside the document stays content.
    """
    lines = text.split("\n")
    for index, line in enumerate(lines):
        opening = _OPENING_FENCE.search(line)
        if opening is None:
            continue
        fence = opening.group(1)
        close = next(
            (
                j
                for j in range(len(lines) - 1, index, -1)
                if (bare := lines[j].strip()).startswith(fence) and not bare.strip(fence[0])
            ),
            None,
        )
        before = line[: opening.start()]
        inside = lines[index + 1 : close]
        after = lines[close + 1 :] if close is not None else []
        if close is None and inside and inside[-1].rstrip().endswith(fence):
            inside[-1] = inside[-1].rstrip()[: -len(fence)]  # "- last item```"
        outside = "\n".join([*lines[:index], before, *after])
        return "\n".join(inside), outside
    return None


def _unfence(text: str, problems: list[str] | None = None) -> str:
    """The document inside a code fence, when the model wrapped it in one.

    Only when the sections are inside the fence and not outside it: a fenced snippet inside a
    real document (a code sample in Key Facts) is content, not a wrapper.
    """
    if "```" not in text and "~~~" not in text:
        return text
    found = _fenced(text)
    if found is None:
        return text
    inside, outside = found
    if is_working_memory(inside) and not is_working_memory(outside):
        if problems is not None and outside.strip():
            problems.append("text outside the code fence around the document was ignored")
        return inside.strip()
    return text


def _decode_object(text: str) -> Mapping[object, object] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        try:
            value = json_repair.loads(text)
        except Exception:  # hostile input to a third-party parser: treat as "not JSON"
            return None
    return value if isinstance(value, Mapping) else None


def _from_markdown(text: str, problems: list[str]) -> dict[str, str]:
    parsed = parse_document_detailed(_unfence(normalize_newlines(text).strip(), problems))
    if parsed.preamble_without_title:
        problems.append("text before the first section was ignored")
    for extra in parsed.extras:
        problems.append(f"section {extra.title!r} is not one of the seven; ignored")
    for name in dict.fromkeys(parsed.duplicates):
        problems.append(f"section {name!r} appeared more than once; bodies joined")
    return dict(parsed.bodies)


def _from_mapping(value: Mapping[object, object], problems: list[str]) -> dict[str, str]:
    if len(value) == 1 and isinstance(value.get("raw"), str):
        problems.append("output came wrapped as {'raw': ...}")
        return _from_text(str(value["raw"]), problems)
    document = value.get("working_memory")
    if isinstance(document, str):
        return _from_markdown(document, problems)
    sections = value.get("sections")
    source = sections if isinstance(sections, Mapping) else value
    bodies: dict[str, str] = {}
    for key, body in source.items():
        name = canonical_name(key) if isinstance(key, str) else None
        if name is None:
            problems.append(f"{describe(key)!r} is not a section; ignored")
        elif body is None:
            continue
        elif not isinstance(body, str):
            problems.append(f"{name}: a {type(body).__name__}, not text; left empty")
        elif name in bodies:
            problems.append(f"{name}: given twice; the first is used")
        else:
            cleaned = sanitize_body(body, name)
            if cleaned.rewritten:
                problems.append(f"{name}: headings inside the text were demoted")
            bodies[name] = cleaned.text
    return bodies


def _from_text(text: str, problems: list[str]) -> dict[str, str]:
    stripped = normalize_newlines(text).strip()
    candidates = [stripped]
    fenced = _fenced(stripped) if "```" in stripped or "~~~" in stripped else None
    if fenced is not None:
        candidates.append(fenced[0].strip())
    for candidate in candidates:
        if candidate.startswith("{"):
            decoded = _decode_object(candidate)
            if decoded is not None:
                return _from_mapping(decoded, problems)
    return _from_markdown(stripped, problems)


def normalize_creation(output: object) -> CreationResult:
    """The canonical document for creation output (tool arguments or free Markdown).

    Raises :class:`CreationRejected` when no canonical section with content is found.
    """
    problems: list[str] = []
    if isinstance(output, (bytes, bytearray)):
        output = bytes(output).decode("utf-8", "replace")
    if isinstance(output, str):
        bodies = _from_text(output, problems)
    elif isinstance(output, Mapping):
        bodies = _from_mapping(output, problems)
    else:
        raise CreationRejected(f"creation output is a {type(output).__name__}, not text")
    present = tuple(name for name in SECTIONS if bodies.get(name))
    if not present:
        raise CreationRejected(
            "no recognisable working-memory section with content", tuple(problems)
        )
    missing = [name for name in SECTIONS if name not in bodies]
    if missing:
        problems.append("sections missing (left empty): " + ", ".join(missing))
    return CreationResult(render_document(bodies), present, tuple(problems))
