"""What every literal search (archived messages, stored tool outputs) compares and returns:
the query's limits and the folded literal, with the prefilter a database may apply first."""

from __future__ import annotations

from dataclasses import dataclass

from wm_core import fold_text
from wm_server import contract
from wm_server.errors import invalid

MAX_QUERY = contract.MAX_QUERY
DEFAULT_HITS = 12
MAX_HITS = contract.MAX_SEARCH_HITS
_JSON_ESCAPED = {'"', "\\"}


def checked_query(query: str) -> str:
    """A search's query without its surrounding blanks (every search: literal, ranked,
    hybrid, memories). Its length and that it is not blank are the proto's rules, checked at
    the edge; but the edge's blank (CEL ``trim()``, Unicode White_Space) leaves U+001C-U+001F,
    which ``str.strip`` removes, so a query of only those is refused here, not searched as
    nothing."""
    text = query.strip()
    if not text:
        raise invalid("query", contract.QUERY_NOT_BLANK.message, contract.QUERY_NOT_BLANK.id)
    return text


def search_terms(query: str, max_hits: int) -> tuple[str, int]:
    """The literal a search looks for and how many hits it returns; the same limits for
    every literal search (archives, tool outputs)."""
    needle = checked_query(query)
    if max_hits < 0:
        raise invalid("max_hits", "must not be negative", "OUT_OF_RANGE")
    return needle, min(max_hits or DEFAULT_HITS, MAX_HITS)


@dataclass(frozen=True, slots=True)
class Literal:
    """A literal as every literal search compares it: folded (``wm_core.fold_text``), with
    the ASCII text rows may be prefiltered by in the database (None: no prefilter)."""

    folded: str
    prefilter: str | None

    @classmethod
    def of(cls, needle: str, *, json_rows: bool) -> Literal:
        folded = fold_text(needle)
        usable = folded.isascii() and folded.isprintable()
        if json_rows:  # rows hold JSON, where quotes and backslashes are escaped
            usable = usable and not (_JSON_ESCAPED & set(folded))
            # A tool call is searched as "name input" but stored as two JSON fields, so a
            # literal may span the space between them ("grep {"); none of its space-separated
            # pieces can: the row must hold the longest one.
            piece = max(folded.split(" "), key=len)
            return cls(folded, piece if usable and piece else None)
        return cls(folded, folded if usable else None)

    def find(self, text: str) -> tuple[int, int] | None:
        """(start, length) in ``text`` of the first match, or None: found on the folded text,
        then mapped back character by character (folding may change lengths: "ß" is "ss")."""
        folded = fold_text(text)
        at = folded.find(self.folded)
        if at < 0:
            return None
        if len(folded) == len(text):
            return at, len(self.folded)
        start, seen = -1, 0
        for index, char in enumerate(text):
            if start < 0 and seen + len(fold_text(char)) > at:
                start = index
            seen += len(fold_text(char))
            if start >= 0 and seen >= at + len(self.folded):
                return start, index + 1 - start
        return max(start, 0), len(text) - max(start, 0)
