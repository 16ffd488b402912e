"""Reading and writing the working-memory document.

Reading is tolerant because documents come from LLMs and from older systems: a section heading
may use any level and any case, text before the first section is ignored, and foreign sections
are reported instead of being glued to a neighbour. Writing is strict and canonical: one title,
the seven sections in order, each body free of anything that would split it when read back.
That pair of rules is what makes ``parse_document(render_document(b))`` give back ``b``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from wm_core._document.sections import SECTIONS, canonical_name
from wm_core._document.text import normalize_newlines

DOCUMENT_TITLE: Final = "# Working Memory"

# The deepest heading level that still ends a section when its name is not canonical.
_SECTION_LEVEL: Final = 2
# Where a body's own headings are pushed so that they stay inside the body.
_BODY_LEVEL: Final = 3

_HEADING = re.compile(r"[ \t]*(#{1,6})[ \t]+(\S.*)")
# Where a line after the first may open a heading: a newline, spaces or tabs, a "#".
_HASH_LINE = re.compile(r"\n[ \t]*#")


class _Heading(NamedTuple):
    start: int  # offset of the line
    hashes: int  # offset of the first '#'
    after: int  # offset just past the '#' run
    end: int  # offset of the line end (exclusive of the newline)
    level: int
    title: str


def _clean_title(raw: str) -> str:
    title = raw.rstrip()
    if title.endswith("#"):
        without = title.rstrip("#")
        if not without or without[-1] in " \t":  # an ATX closing sequence, not "C#"
            title = without.rstrip()
    return title


def _headings(text: str) -> list[_Heading]:
    """The heading lines of ``text``: spaces or tabs, 1 to 6 "#", a space or tab, a title."""
    found: list[_Heading] = []
    # Only lines whose first non-blank character is "#" are tried: the regex engine finds
    # them from the newlines (a literal prefix it scans for in C), so a "#" inside a line
    # ("issue #12", "C#") costs nothing. A per-"#" loop in Python cost 1.3 us per "#": 0.4 ms
    # on the Phase 2 benchmark's 12K-token document, whose bullets each hold one.
    for line_start in (0, *(match.start() + 1 for match in _HASH_LINE.finditer(text))):
        match = _HEADING.match(text, line_start)
        if match is not None:
            position, after = match.span(1)
            title = _clean_title(match.group(2))
            found.append(
                _Heading(line_start, position, after, match.end(), after - position, title)
            )
    return found


@dataclass(frozen=True, slots=True)
class ExtraSection:
    """A section whose heading is not one of the seven (reported, never merged)."""

    title: str
    level: int
    body: str


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """Everything a read of a document found, including what does not fit the canon."""

    bodies: Mapping[str, str] = field(default_factory=dict)  # canonical sections, in order
    extras: tuple[ExtraSection, ...] = ()
    preamble: str = ""  # text before the first canonical section, stripped
    duplicates: tuple[str, ...] = ()  # canonical sections that appeared more than once

    @property
    def preamble_without_title(self) -> str:
        """The preamble minus the document title line, i.e. text a reader would lose."""
        if not self.preamble or self.preamble == DOCUMENT_TITLE:
            return ""
        lines = [
            line
            for line in self.preamble.split("\n")
            if line.strip() and line.strip().casefold() != DOCUMENT_TITLE.casefold()
        ]
        return "\n".join(lines)


_TITLE_LINE: Final = DOCUMENT_TITLE + "\n"
_HEADING_LINES: Final = tuple(f"\n## {name}" for name in SECTIONS)


def _parse_rendered(text: str) -> ParsedDocument | None:
    """The parse of a document exactly as this engine renders it; None for any other text.

    Every merge reads the previous document, which is almost always one we rendered: this
    reader is 3x faster than the general one on the 16 KB benchmark document (half of an
    all-KEEP merge). When the only "#" are the title's and those of the seven heading lines,
    in order, the sections are exactly what those lines delimit, as the general reader finds.
    """
    if not text.startswith(_TITLE_LINE):
        return None
    spans: list[tuple[int, int]] = []  # per section, where its heading line starts and ends
    position = len(DOCUMENT_TITLE)
    for line in _HEADING_LINES:
        start = text.find("#", position) - 1  # the next "#" must open the next heading line
        position = start + len(line)
        at_line_end = text[position : position + 1] in ("\n", "")
        if start < 0 or not text.startswith(line, start) or not at_line_end:
            return None
        spans.append((start + 1, position))
    if text.find("#", position) != -1:
        return None
    ends = [start for start, _ in spans[1:]] + [len(text)]
    bodies = {
        name: text[heading_end:end].strip()
        for name, (_, heading_end), end in zip(SECTIONS, spans, ends, strict=True)
    }
    return ParsedDocument(bodies=bodies, preamble=text[: spans[0][0]].strip())


def parse_document_detailed(text: str | None) -> ParsedDocument:
    """Read a document, keeping track of foreign sections, duplicates and the preamble.

    A heading opens a section when its text names a canonical section (any level), or, for a
    foreign name, when it is a level 1 or 2 heading after the first canonical section. Deeper
    foreign headings are ordinary body lines, so a "### Backend" group inside Key Facts stays
    there. A section that appears twice keeps both bodies, in order.
    """
    if not text:
        return ParsedDocument()
    text = normalize_newlines(text)
    rendered = _parse_rendered(text)
    if rendered is not None:
        return rendered
    collected: dict[str, list[str]] = {}
    extras: list[ExtraSection] = []
    duplicates: list[str] = []
    # Boundaries: (heading, canonical name or None for a foreign section).
    boundaries: list[tuple[_Heading, str | None]] = []
    for heading in _headings(text):
        name = canonical_name(heading.title)
        if name is None and (heading.level > _SECTION_LEVEL or not boundaries):
            continue  # a body line, or part of the preamble
        boundaries.append((heading, name))
    if not boundaries:
        return ParsedDocument(preamble=text.strip())
    for index, (heading, name) in enumerate(boundaries):
        end = boundaries[index + 1][0].start if index + 1 < len(boundaries) else len(text)
        body = text[heading.end : end].strip()
        if name is None:
            extras.append(ExtraSection(heading.title, heading.level, body))
        elif name in collected:
            duplicates.append(name)
            collected[name].append(body)
        else:
            collected[name] = [body]
    bodies = {
        name: parts[0] if len(parts) == 1 else "\n".join(part for part in parts if part)
        for name in SECTIONS
        if (parts := collected.get(name)) is not None
    }
    return ParsedDocument(
        bodies=bodies,
        extras=tuple(extras),
        preamble=text[: boundaries[0][0].start].strip(),
        duplicates=tuple(duplicates),
    )


def parse_document(text: str | None) -> dict[str, str]:
    """The bodies of the canonical sections present in ``text``, in canonical order."""
    return dict(parse_document_detailed(text).bodies)


def is_working_memory(text: str | None) -> bool:
    """Whether ``text`` has at least one canonical section heading (of any level).

    A mere mention of a section name inside a sentence does not count: such a document would
    read as empty, and treating it as a working memory would lose it.
    """
    if not text:
        return False
    return any(canonical_name(h.title) is not None for h in _headings(normalize_newlines(text)))


@dataclass(frozen=True, slots=True)
class SanitizedBody:
    """A body made safe to render, and what had to change for that."""

    text: str
    rewritten: tuple[str, ...] = ()  # heading lines that were demoted or neutralised
    removed: tuple[str, ...] = ()  # a leading heading that repeated the section's name

    @property
    def changed(self) -> bool:
        return bool(self.rewritten or self.removed)


def sanitize_body(body: str, section: str | None = None) -> SanitizedBody:
    """Rewrite the lines of ``body`` that would split the document when read back.

    A heading naming a canonical section becomes a bold line; foreign headings of level 1 or 2
    are pushed down (keeping their relative depth) to level 3. A first line that merely
    repeats ``section``'s own heading is removed, since the renderer writes that heading. The
    result is stripped.
    """
    text = normalize_newlines(body).strip()
    if "#" not in text:
        return SanitizedBody(text)
    headings = _headings(text)
    if not headings:
        return SanitizedBody(text)
    removed: tuple[str, ...] = ()
    first = headings[0]
    if section is not None and first.start == 0 and canonical_name(first.title) == section:
        removed = (text[: first.end],)
        rest = sanitize_body(text[first.end :])
        return SanitizedBody(rest.text, rest.rewritten, removed + rest.removed)
    foreign_levels = [h.level for h in headings if canonical_name(h.title) is None]
    shift = max(0, _BODY_LEVEL - min(foreign_levels)) if foreign_levels else 0
    pieces: list[str] = []
    rewritten: list[str] = []
    cursor = 0
    for heading in headings:
        is_canonical = canonical_name(heading.title) is not None
        if not is_canonical and shift == 0:
            continue
        pieces.append(text[cursor : heading.start])
        original = text[heading.start : heading.end]
        if is_canonical:
            replacement = "**" + heading.title.replace("*", "") + "**"
        else:
            level = min(6, heading.level + shift)
            replacement = (
                text[heading.start : heading.hashes]
                + "#" * level
                + text[heading.after : heading.end]
            )
        pieces.append(replacement)
        rewritten.append(original)
        cursor = heading.end
    if not rewritten:
        return SanitizedBody(text)
    pieces.append(text[cursor:])
    return SanitizedBody("".join(pieces).strip(), tuple(rewritten), removed)


def sanitize_item(item: str) -> SanitizedBody:
    """Like :func:`sanitize_body` for an APPEND item, whose first line is rendered after "- "."""
    item = normalize_newlines(item).strip()
    first, newline, rest = item.partition("\n")
    if not newline or "#" not in rest:
        return SanitizedBody(item)
    cleaned = sanitize_body(rest)
    if not cleaned.changed:
        return SanitizedBody(item)
    return SanitizedBody(first + "\n" + cleaned.text, cleaned.rewritten)


_HEADERS: Final = tuple("## " + name for name in SECTIONS)


def assemble_document(bodies: Mapping[str, str]) -> str:
    """The canonical text for bodies that are already sanitised and stripped.

    The title, a blank line, then per section its heading, its body when not empty and an
    empty line; joined with newlines, the last empty line becomes the final newline.
    """
    parts = [DOCUMENT_TITLE, ""]
    for name, header in zip(SECTIONS, _HEADERS, strict=True):
        parts.append(header)
        body = bodies.get(name)
        if body:
            parts.append(body)
        parts.append("")
    return "\n".join(parts)


def render_document(bodies: Mapping[str, str]) -> str:
    """The canonical document for the given section bodies (keys are the canonical names).

    Missing sections render empty; keys that are not canonical names are ignored.
    """
    safe: dict[str, str] = {}
    for name in SECTIONS:
        body = bodies.get(name)
        if isinstance(body, str) and body:
            safe[name] = sanitize_body(body, name).text
    return assemble_document(safe)
