"""The working memory as the summary of a context, trimmed to a room (pure: no I/O).

Under pressure the assembly asks how large the summary is at several rooms: its own bound, the
share it gets beside the older messages, then that share plus the room they left. Each answer
is the same walk, dropping bullets of the lower-priority sections oldest first until the summary
fits, so the walk is done once (:class:`SummaryTrim`): the size after each dropped bullet is
worked out the first time a room needs it, by re-weighing the one section that changed (token
estimates add up over concatenation, in quarter tokens), and the summary is rendered once, at
the room finally given. Asking again costs a scan of integers, not a render of the document
per bullet (what three trims cost before).
"""

from __future__ import annotations

from wm_core._document.markdown import assemble_document, parse_document, sanitize_body
from wm_core._document.sections import SECTIONS
from wm_core._tokens.estimate import estimate_tokens, quarter_tokens

SUMMARY_HEADER = "[Session History Summary]"

# Trimming order when the working memory exceeds its budget: first listed, first trimmed.
# Session Title and Current State are never trimmed.
TRIM_ORDER = (
    "Files & Context",
    "Errors & Corrections",
    "Key Facts & Decisions",
    "Task & Goals",
    "Open Issues",
)

# A dropped line, until the body is joined again.
_GONE = "\x00"
# The summary's first line, before the document: "[Session History Summary]\n".
_HEADER_QUARTERS = quarter_tokens(SUMMARY_HEADER + "\n")
_HEADER_TOKENS = estimate_tokens(SUMMARY_HEADER + "\n")
# The canonical document with every body empty (title, headings, blank lines).
_FRAME_QUARTERS = quarter_tokens(assemble_document({}))

# Every way of trimming: the whole document as given (no render), or this many bullets dropped.
WHOLE = -1


def _bullets(body: str) -> list[tuple[int, int]]:
    """(start_line, end_line) of each bullet item, continuation lines included."""
    lines = body.split("\n")
    spans: list[tuple[int, int]] = []
    for index, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(("- ", "* ", "+ ")) and len(line) - len(stripped) < 2:
            spans.append((index, index))
        elif spans and line.strip() and line.startswith((" ", "\t")):
            start, _ = spans[-1]
            spans[-1] = (start, index)
    return spans


def _section_quarters(name: str, body: str) -> int:
    """What a body adds to the rendered document, in quarter tokens: its sanitized text and
    a newline, or nothing when that text is empty (the renderer leaves it out)."""
    text = sanitize_body(body, name).text if body else ""
    return quarter_tokens(text) + 1 if text else 0


class SummaryTrim:
    """One working memory and its trims: ``fit(room)`` says how many bullets must go for the
    summary to fit ``room`` tokens, ``summary_tokens`` and ``render`` what that gives."""

    def __init__(self, document: str) -> None:
        self.document = document
        self._whole_quarters = quarter_tokens(document)
        self._bodies = parse_document(document)
        self._lines = {name: self._bodies.get(name, "").split("\n") for name in TRIM_ORDER}
        # The bullets in the order they go: (section, first line, last line), and the report.
        self._steps: list[tuple[str, int, int]] = []
        self.labels: list[str] = []
        for name in TRIM_ORDER:
            lines = self._lines[name]
            for start, end in _bullets(self._bodies.get(name, "")):
                item = "\n".join(lines[start : end + 1]).strip()
                self.labels.append(f"{name}: {item.lstrip('-*+ ').strip()}")
                self._steps.append((name, start, end))
        self._parts = {
            name: _section_quarters(name, self._bodies.get(name, "")) for name in SECTIONS
        }
        # Title and state only: the summary when everything that can go has gone.
        kept = sum(quarters for name, quarters in self._parts.items() if name not in TRIM_ORDER)
        self.floor_tokens = -(-(_HEADER_QUARTERS + _FRAME_QUARTERS + kept) // 4)
        # The rendered document's quarter tokens after 0, 1, 2... dropped bullets, so far.
        self._sizes = [_FRAME_QUARTERS + sum(self._parts.values())]

    def _size(self, dropped: int) -> int:
        """The rendered document's quarter tokens with the first ``dropped`` bullets gone."""
        while len(self._sizes) <= dropped:
            name, start, end = self._steps[len(self._sizes) - 1]
            lines = self._lines[name]
            for index in range(start, end + 1):
                lines[index] = _GONE
            body = "\n".join(line for line in lines if line != _GONE)
            before = self._parts[name]
            self._parts[name] = _section_quarters(name, body)
            self._sizes.append(self._sizes[-1] - before + self._parts[name])
        return self._sizes[dropped]

    def fit(self, room: int) -> int:
        """How many bullets go for the summary text (and its header line) to fit ``room``
        tokens: WHOLE when the document fits as given, all of them when nothing smaller fits."""
        if -(-self._whole_quarters // 4) + _HEADER_TOKENS <= room:
            return WHOLE
        for dropped in range(len(self._steps)):
            if -(-self._size(dropped) // 4) + _HEADER_TOKENS <= room:
                return dropped
        return len(self._steps)

    def summary_tokens(self, dropped: int) -> int:
        """The estimate of the summary message (header line and text) after ``fit``."""
        quarters = self._whole_quarters if dropped == WHOLE else self._size(dropped)
        return -(-(_HEADER_QUARTERS + quarters) // 4)

    def render(self, dropped: int) -> tuple[str, list[str]]:
        """The summary text after ``fit``, and the trimmed bullets, as ``section: item``."""
        if dropped == WHOLE:
            return self.document, []
        bodies = dict(self._bodies)
        gone: dict[str, set[int]] = {}
        for name, start, end in self._steps[:dropped]:
            gone.setdefault(name, set()).update(range(start, end + 1))
        for name, indexes in gone.items():
            lines = self._bodies.get(name, "").split("\n")
            bodies[name] = "\n".join(
                line for index, line in enumerate(lines) if index not in indexes and line != _GONE
            )
        safe = {
            name: sanitize_body(body, name).text
            for name in SECTIONS
            if isinstance(body := bodies.get(name), str) and body
        }
        return assemble_document(safe), self.labels[:dropped]


def trim_working_memory(document: str, budget: int) -> tuple[str, list[str]]:
    """Drop the oldest bullets of lower-priority sections until the summary fits."""
    trim = SummaryTrim(document)
    return trim.render(trim.fit(budget))
