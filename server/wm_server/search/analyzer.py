"""The one text analyzer: what every full-text index stores and what every ranked query
searches for, on both engines, so that SQLite FTS5 and PostgreSQL see the same terms.

Steps, in order: NFKC normalization and case folding (so "ﬁle", "FILE" and "Ｆile" are one
word), Unicode words (letters and digits; "_" and punctuation separate), stop words dropped
(a short English list, see ``STOP_WORDS``; PyStemmer ships none, so other languages keep
every word), then a Snowball stem ("deploys", "deployed", "deploying" -> "deploy"). The analyzed terms are
joined by spaces and indexed as they are: FTS5 with its plain ``unicode61`` tokenizer and
PostgreSQL with the ``simple`` configuration, neither of which changes them again.

Why in Python and in the server, not in each engine: the engines' own stemmers differ
(FTS5's ``porter`` is English only and older than PostgreSQL's Snowball), and a query
analyzed by one and rows by another miss each other. Why here rather than in ``wm_core``:
it needs PyStemmer (a C extension), and wm_core has no dependencies. PyStemmer is the
Snowball project's own binding: every Snowball language, about a microsecond a word.

The language is a setting (``WM_TEXT_LANGUAGE``); ``analyzer_id`` names the analyzer a
database was indexed with, and a change re-indexes it at the next start.
"""

from __future__ import annotations

import re
import string
import unicodedata
from functools import lru_cache
from typing import Final

import Stemmer

# A query's words beyond this are ignored (a ranked query's cost grows with them).
MAX_QUERY_TERMS: Final = 32
_WORD: Final = re.compile(r"[^\W_]+")
# Bumped when analysis changes in a way that needs stored rows analyzed again.
_VERSION: Final = 1

# English stop words: articles, conjunctions and question words only. Measured on the recall
# benchmark's dev split (bench/recall_bench.py, in-process BM25 over the analyzed rows): R@10
# 67.6 stemmed with no stop words, 67.3 with this list, 45.5 with Snowball's usual list
# (pronouns, auxiliaries, prepositions): "what did I say about my dad" finds the turn where
# the user said "I ... my dad" through exactly the words that list drops.
_ENGLISH_WORDS: Final = "a an the and or but if nor what which who whom whose when where why how"
_ENGLISH: Final = frozenset(_ENGLISH_WORDS.split())
STOP_WORDS: Final = {"english": _ENGLISH}


def languages() -> list[str]:
    """The languages a stemmer exists for (the values WM_TEXT_LANGUAGE accepts)."""
    return sorted(Stemmer.algorithms())


@lru_cache(maxsize=8)
def _stemmer(language: str) -> Stemmer.Stemmer:
    return Stemmer.Stemmer(language)


def analyzer_id(language: str) -> str:
    """The name stored with an index: the same name, the same terms for the same text."""
    return f"snowball-{language}-{_VERSION}"


# ASCII text's words without the regex: every ASCII character that is not a letter or a digit
# becomes a space and upper case lower, so ``split()`` gives the words ``_WORD`` finds in the
# folded text (NFKC leaves ASCII as it is, and case folding an ASCII letter lowers it). About
# 3x faster than ``findall`` on a commit's messages (0.047 against 0.133 ms for 20 messages of
# 200 characters), which Phase 2 analyzes twice (its archive's index rows, its memory query).
_ASCII_WORDS: Final = str.maketrans(
    {c: " " for c in map(chr, range(128)) if not c.isalnum()}
    | {c: c.lower() for c in string.ascii_uppercase}
)
# Words stemmed at a time while a query's distinct terms are collected (``query_terms``).
_QUERY_BATCH: Final = 64
# Words whose term ``_terms`` remembers, per language, before it starts a new table.
_MAX_REMEMBERED: Final = 50_000


def _words(text: str) -> list[str]:
    """The words of ``text`` after NFKC normalization and case folding: letters and digits,
    as ``_WORD`` finds them (the ASCII path gives the same list, faster)."""
    if text.isascii():
        return text.translate(_ASCII_WORDS).split()
    found: list[str] = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    return found


def analyze(text: str, language: str = "english") -> list[str]:
    """The terms of ``text``, in order, repeats kept (term frequency counts)."""
    return _terms(_words(text), language)


def index_text(text: str, language: str = "english") -> str:
    """What an index stores for ``text``: its terms joined by spaces."""
    return " ".join(analyze(text, language))


def query_terms(query: str, language: str = "english") -> list[str]:
    """The distinct terms of a query, in order, at most MAX_QUERY_TERMS: the first distinct
    ones of ``analyze(query)``. A long query (Phase 2 ranks the owner's memories against a
    commit's messages, up to 4,000 characters) usually has them in its first hundred words,
    so the words are taken a batch at a time until it has them."""
    words = _words(query)
    terms: dict[str, None] = {}
    for start in range(0, len(words), _QUERY_BATCH):
        terms.update(dict.fromkeys(_terms(words[start : start + _QUERY_BATCH], language)))
        if len(terms) >= MAX_QUERY_TERMS:
            break
    return list(terms)[:MAX_QUERY_TERMS]


# Per language: word -> its stem, or None for a stop word (``_terms``).
_REMEMBERED: dict[str, dict[str, str | None]] = {}


def _terms(words: list[str], language: str) -> list[str]:
    """The stems of ``words`` in order, stop words left out, each word stemmed once per
    process: a Snowball stem depends on the word alone, and a commit's messages and a
    memory query repeat their words (a dict lookup a word instead of PyStemmer's call, the
    stop-word test included: 20 messages of 200 characters 0.23 -> 0.16 ms, of prose 0.43 ->
    0.32 ms, medians of 2,000 alternated). The table starts again past ``_MAX_REMEMBERED``
    words."""
    table = _REMEMBERED.get(language)
    if table is None or len(table) > _MAX_REMEMBERED:
        table = _REMEMBERED[language] = dict.fromkeys(STOP_WORDS.get(language, ()))
    unknown = [w for w in words if w not in table]
    if unknown:
        table.update(zip(unknown, _stemmer(language).stemWords(unknown), strict=True))
    return [term for term in map(table.__getitem__, words) if term is not None]
