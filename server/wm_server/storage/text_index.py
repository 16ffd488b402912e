"""The one component where the two engines' full-text indexes differ: how a row's words are
indexed, how a query is written, matched and scored. Every ranked statement (memories and
archived messages) is written once in the repositories around these fragments.

Two indexes exist, each over a content table aliased in the statements:
``memories`` (alias ``m``, its ``search_text``) and ``archived`` (``archived_texts``, alias
``x``, the text of an archived message). SQLite keeps FTS5 external-content tables in step by
triggers on the content tables (same transaction); PostgreSQL keeps a ``tsvector`` column
(GIN-indexed) written by the statement that writes the row (same statement). Neither engine
analyzes text: both index the terms of ``wm_server.search.analyzer`` (stemmed, stop words
dropped), FTS5 with ``unicode61`` and PostgreSQL with ``simple``, which keep them as they are,
and a query searches for the terms the same analyzer makes of it. So a query finds the same
rows on both engines.
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from typing import ClassVar

from wm_server.search.analyzer import index_text, query_terms

# Query words as typed (for snippets, which show the text as stored): letters and digits.
_WORD = re.compile(r"[^\W_]+")
MAX_QUERY_WORDS = 32
# Rows a ranked query scores at most when it can choose (see ``TextIndex.frequencies``):
# scoring is the cost of a ranked search, and a word in most rows adds little to any score.
CANDIDATES = 2000
ENOUGH = 100  # ... unless the rarest words select fewer rows than this


def query_words(query: str) -> list[str]:
    """The distinct words of a query as typed (lower-cased, in order), at most
    MAX_QUERY_WORDS: what a snippet looks for. Matching uses ``TextIndex.terms``."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        seen.setdefault(word, None)
    return list(seen)[:MAX_QUERY_WORDS]


def term_count(indexed: str) -> int:
    """The number of terms of an indexed text (a row's length for BM25)."""
    return indexed.count(" ") + 1 if indexed else 0


@functools.lru_cache(maxsize=8192)  # consolidation compares each memory with many others
def words_of(text: str) -> frozenset[str]:
    """Every distinct word of a text as the indexes analyze it (case-folded Unicode words):
    the token set near-duplicate memories are compared by."""
    return frozenset(_WORD.findall(text.lower()))


class TextIndex(ABC):
    """Fragments of the ranked statements for one engine, and the analyzer's language."""

    def __init__(self, language: str = "english") -> None:
        self.language = language

    def terms(self, query: str) -> list[str]:
        """The terms a ranked query searches for (the analyzer's, distinct)."""
        return query_terms(query, self.language)

    def indexed(self, text: str) -> str:
        """What the index stores for ``text`` (the analyzer's terms, space-separated)."""
        return index_text(text, self.language)

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
    def postings(self, where: str, members: str) -> str:
        """A SELECT of (id, term, tf) of the archived rows that satisfy ``where`` (over alias
        ``x``) for each analyzed term (``term {members}``) they hold: what BM25 is computed
        from, in the same statement on both engines (``ArchiveRepository.ranked``)."""

    @abstractmethod
    def stored_terms(self) -> str:
        """The analyzed terms an archived row (alias ``x``) is indexed with, space-separated,
        each repeated as often as it occurs: what the in-process BM25 index reads
        (``services/lexical_index.py``)."""

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

    def postings(self, where: str, members: str) -> str:
        # fts5vocab "instance": one row per occurrence of a term, looked up by term.
        return (
            "SELECT v.doc AS id, v.term AS term, COUNT(*) AS tf FROM temp.archived_instances v"
            f" JOIN archived_texts x ON x.id = v.doc WHERE v.term {members} AND {where}"
            " GROUP BY v.doc, v.term"
        )

    def source(self, index: str) -> str:
        table = self._TABLES[index]
        return f" JOIN {table} ON {table}.rowid = {_ALIAS[index]}.rowid"

    def match(self, index: str) -> str:
        return f"{self._TABLES[index]} MATCH :query"

    def score(self, index: str) -> str:
        return f"(-bm25({self._TABLES[index]}))"

    def stored_terms(self) -> str:
        return "x.body"  # the external content: the analyzer's terms as they were

    def value(self, index: str, text: str) -> tuple[str, str] | None:
        if index == "archived":
            return "body", text  # the external content the FTS5 table indexes
        return None


class TsvectorIndex(TextIndex):
    """PostgreSQL ``tsvector`` with a GIN index, ranked by ``ts_rank_cd``, over the analyzer's
    terms under the ``simple`` configuration (which only lower-cases them: they already are)."""

    config = "simple"

    def query(self, words: list[str], scoring: list[str] | None = None) -> str:
        return " | ".join(f"'{w}'" for w in [*words, *(scoring or ())])

    def postings(self, where: str, members: str) -> str:
        # A tsvector keeps each lexeme's positions: their number is its frequency.
        return (
            "SELECT x.id AS id, u.lexeme AS term, cardinality(u.positions) AS tf"
            f" FROM archived_texts x CROSS JOIN to_tsquery('{self.config}', :query) q"
            f" CROSS JOIN unnest(x.search) u WHERE x.search @@ q AND u.lexeme {members}"
            f" AND {where}"
        )

    def source(self, index: str) -> str:
        return f" CROSS JOIN to_tsquery('{self.config}', :query) q"

    def match(self, index: str) -> str:
        return f"{_ALIAS[index]}.search @@ q"

    def score(self, index: str) -> str:
        return f"ts_rank_cd({_ALIAS[index]}.search, q)"

    def stored_terms(self) -> str:
        # A lexeme's positions are its occurrences (PostgreSQL keeps up to 256 of them).
        return (
            "COALESCE((SELECT string_agg(repeat(u.lexeme || ' ',"
            " GREATEST(cardinality(u.positions), 1)), '') FROM unnest(x.search) u), '')"
        )

    def value(self, index: str, text: str) -> tuple[str, str] | None:
        return "search", f"to_tsvector('{self.config}', {text})"
