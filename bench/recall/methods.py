"""The recall evaluation's methods: one registry, ``METHODS``, keyed by name.

A method turns a question into message ids, best first. Those that ask the service go through
the real client (``Context.client``); ``bm25`` is the in-process baseline: rank_bm25's Okapi
BM25 over the very rows the service stores (each message of the question's user, as the
dataset gives it), words lower-cased, nothing else done to them. To add a method (``dense``,
``hybrid``): write ``async def search(context, question) -> list[str]`` and ``register`` it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from rank_bm25 import BM25Okapi

from bench.retrieval.generator import Dataset, Message, Question
from bench.retrieval.harness import MAX_HITS, literal_keywords, memories
from wm_client import WmClient

_WORD: Final = re.compile(r"[^\W_]+")


def row_text(message: Message) -> str:
    """What the service stores of a message, as the baseline indexes it."""
    return message.text or f"{message.tool} {message.tool_input}".strip() or message.tool_output


def words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


@dataclass(slots=True)
class Context:
    """What a method may use: the client of the server holding the dataset, and the dataset."""

    client: WmClient
    dataset: Dataset
    _bm25: dict[str, tuple[BM25Okapi, list[str]]] = field(default_factory=dict)

    def bm25(self, user: str) -> tuple[BM25Okapi, list[str]]:
        """The user's in-process BM25 index and its row ids (built once)."""
        if user not in self._bm25:
            rows = [m for s in self.dataset.sessions if s.user == user for m in s.messages]
            index = BM25Okapi([words(row_text(m)) or [""] for m in rows])
            self._bm25[user] = (index, [m.id for m in rows])
        return self._bm25[user]


Search = Callable[[Context, Question], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class Method:
    key: str
    label: str
    search: Search


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    METHODS[method.key] = method
    return method


async def _literal(context: Context, question: Question) -> list[str]:
    return await literal_keywords(context.client, question)


async def _lexical(context: Context, question: Question) -> list[str]:
    found = await context.client.search_archives(
        question.text, all_sessions=True, user_id=question.user, page_size=MAX_HITS, ranked=True
    )
    return [hit.message.rsplit("/", 1)[1] for hit in found.hits]


async def _bm25(context: Context, question: Question) -> list[str]:
    index, ids = context.bm25(question.user)
    scores = index.get_scores(words(question.text))
    order = sorted(range(len(ids)), key=lambda i: -scores[i])
    return [ids[i] for i in order[:MAX_HITS] if scores[i] > 0]


register(Method("literal", "literal SearchArchives, one call per keyword", _literal))
register(Method("lexical", "ranked SearchArchives (the service's lexical search)", _lexical))
register(Method("bm25", "in-process BM25 (rank_bm25) over the same rows", _bm25))


async def _hybrid(context: Context, question: Question) -> list[str]:
    found = await context.client.search_archives(
        question.text, all_sessions=True, user_id=question.user, page_size=MAX_HITS, hybrid=True
    )
    return [hit.message.rsplit("/", 1)[1] for hit in found.hits]


_DENSE: dict[tuple[int, str], tuple[list[str], object]] = {}


async def _dense(context: Context, question: Question) -> list[str]:
    """The server's default embedder in process, cosine over the user's rows (dense alone)."""
    import numpy as np

    from wm_server.embedding.embedded import WordLlamaEmbedder
    from wm_server.embedding.port import TextRole

    embedder = _DENSE.setdefault((0, ""), ([], WordLlamaEmbedder()))[1]
    assert isinstance(embedder, WordLlamaEmbedder)
    key = (id(context.dataset), question.user)
    if key not in _DENSE:
        rows = [m for s in context.dataset.sessions if s.user == question.user for m in s.messages]
        _DENSE[key] = ([m.id for m in rows], await embedder.embed(
            [row_text(m) for m in rows], TextRole.PASSAGE))  # fmt: skip
    ids, matrix = _DENSE[key]
    vector = (await embedder.embed([question.text], TextRole.QUERY))[0]
    scores = np.asarray(matrix) @ vector
    return [ids[i] for i in np.argsort(-scores)[:MAX_HITS]]


register(Method("dense", "in-process cosine of the default embedder (wordllama)", _dense))
register(Method("hybrid", "hybrid SearchArchives (lexical + dense, fused)", _hybrid))


async def _memories(context: Context, question: Question) -> list[str]:
    return await memories(context.client, question)


register(Method("memories", "SearchMemories: the messages behind the memories it finds", _memories))
