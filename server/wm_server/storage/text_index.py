"""The one component where the two engines' full-text indexes differ: how a row's words are
indexed, how a query is written, matched and scored. Every ranked statement (memories and
archived messages) is written once in the repositories around these fragments.

Two indexes exist, each over a content table aliased in the statements:
``memories`` (alias ``m``, its ``search_text``) and ``archived`` (``archived_texts``, alias
``x``, the text of an archived message). SQLite keeps FTS5 external-content tables in step by
triggers on the content tables (same transaction); PostgreSQL keeps a ``tsvector`` column
(GIN-indexed) written by the statement that writes the row (same statement). Both tokenize the
same way (Unicode words, case-folded, no stemming), so a query finds the same rows on both.
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from typing import ClassVar

# Query words: letters and digits; "_" and punctuation separate (as both tokenizers do).
_WORD = re.compile(r"[^\W_]+")
MAX_QUERY_WORDS = 32
# Rows a ranked query scores at most when it can choose (see ``TextIndex.frequencies``):
# scoring is the cost of a ranked search, and a word in most rows adds little to any score.
CANDIDATES = 2000
ENOUGH = 100  # ... unless the rarest words select fewer rows than this


def query_words(query: str) -> list[str]:
    """The distinct words of a query (lower-cased, in order), at most MAX_QUERY_WORDS."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        seen.setdefault(word, None)
    return list(seen)[:MAX_QUERY_WORDS]


@functools.lru_cache(maxsize=8192)  # consolidation compares each memory with many others
def words_of(text: str) -> frozenset[str]:
    """Every distinct word of a text as the indexes analyze it (case-folded Unicode words):
    the token set near-duplicate memories are compared by."""
    return frozenset(_WORD.findall(text.lower()))


class TextIndex(ABC):
    """Fragments of the ranked statements for one engine."""

    @abstractmethod
    def query(self, words: list[str], scoring: list[str] | None = None) -> str:
        """The match parameter: rows with any of ``words``; ``scoring`` words (common ones)
        count in the score of those rows but bring in no row of their own."""

    def frequencies(self, index: str) -> str | None:
        """A statement of (word, rows that have it) for the words ``{members}``, when the
        engine keeps those counts cheaply; None otherwise (every word then selects rows)."""
        return None

    @abstractmethod
    def source(self, index: str) -> str:
        """What follows the content table in FROM (the index joined, or the query)."""

    @abstractmethod
    def match(self, index: str) -> str:
        """The WHERE condition: the row has a word of ``:query``."""

    @abstractmethod
    def score(self, index: str) -> str:
        """The relevance of the row, higher is better."""

    @abstractmethod
    def value(self, index: str, text: str) -> tuple[str, str] | None:
        """(column, expression) that indexes the SQL text ``text`` when a row of the content
        table is written; None when the engine maintains the index itself (triggers)."""


_ALIAS = {"memories": "m", "archived": "x"}


class Fts5Index(TextIndex):
    """SQLite FTS5 (external content, unicode61 tokenizer), ranked by bm25."""

    _TABLES: ClassVar[dict[str, str]] = {"memories": "memories_fts", "archived": "archived_fts"}

    _VOCABULARIES: ClassVar[dict[str, str]] = {
        "memories": "temp.memories_vocab",
        "archived": "temp.archived_vocab",
    }

    def query(self, words: list[str], scoring: list[str] | None = None) -> str:
        selecting = " OR ".join(f'"{w}"' for w in words)
        if not scoring:
            return selecting
        common = " OR ".join(f'"{w}"' for w in scoring)
        return f"{selecting} OR (({common}) AND ({selecting}))"

    def frequencies(self, index: str) -> str | None:
        return f"SELECT term, doc FROM {self._VOCABULARIES[index]} WHERE term {{members}}"

    def source(self, index: str) -> str:
        table = self._TABLES[index]
        return f" JOIN {table} ON {table}.rowid = {_ALIAS[index]}.rowid"

    def match(self, index: str) -> str:
        return f"{self._TABLES[index]} MATCH :query"

    def score(self, index: str) -> str:
        return f"(-bm25({self._TABLES[index]}))"

    def value(self, index: str, text: str) -> tuple[str, str] | None:
        if index == "archived":
            return "body", text  # the external content the FTS5 table indexes
        return None


class TsvectorIndex(TextIndex):
    """PostgreSQL ``tsvector`` with a GIN index, ranked by ``ts_rank_cd``, under one text
    search configuration (WM_TEXT_SEARCH_CONFIG)."""

    def __init__(self, config: str) -> None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", config):
            raise ValueError(f"not a text search configuration name: {config!r}")
        self.config = config

    def query(self, words: list[str], scoring: list[str] | None = None) -> str:
        return " | ".join(f"'{w}'" for w in [*words, *(scoring or ())])

    def source(self, index: str) -> str:
        return f" CROSS JOIN to_tsquery('{self.config}', :query) q"

    def match(self, index: str) -> str:
        return f"{_ALIAS[index]}.search @@ q"

    def score(self, index: str) -> str:
        return f"ts_rank_cd({_ALIAS[index]}.search, q)"

    def value(self, index: str, text: str) -> tuple[str, str] | None:
        return "search", f"to_tsvector('{self.config}', {text})"
