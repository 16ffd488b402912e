"""The embedder providers (issue 34): the embedded default really embeds offline, the
OpenAI-compatible one through the real SDK against a local server (retries, timeout,
breaker), ``none``; and the fusion's arithmetic."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from support.fake_embeddings import FakeEmbeddings
from support.fake_http import Reply, slow
from wm_server.breaker import BreakerSettings, BreakerState
from wm_server.config import Settings
from wm_server.embedding.embedded import WordLlamaEmbedder
from wm_server.embedding.factory import build_embedder
from wm_server.embedding.fusion import fuse, nearest, rrf
from wm_server.embedding.openai_embeddings import OpenAIEmbedder
from wm_server.embedding.port import EmbedderUnavailable, TextRole


async def test_the_embedded_default_embeds_offline_and_similar_texts_score_higher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # any download attempt would fail
    embedder = build_embedder(Settings(embedder="wordllama"))
    assert isinstance(embedder, WordLlamaEmbedder)
    assert embedder.model_id == "wordllama/l2_supercat_256" and embedder.dimensions == 256
    docs = await embedder.embed(
        ["My sister started a pottery class", "We deploy the API with Kubernetes",
         "The invoice total was wrong"],
        TextRole.PASSAGE,
    )  # fmt: skip
    assert docs.shape == (3, 256) and docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    query = (await embedder.embed(["ceramics lessons for a sibling"], TextRole.QUERY))[0]
    scores = docs @ query
    assert int(np.argmax(scores)) == 0
    assert os.environ["HF_HUB_OFFLINE"] == "1"


async def test_a_text_without_words_embeds_as_a_zero_vector_not_nan() -> None:
    """An empty or blank text (a message of tool calls only) is a zero row, which scores 0
    against every query; a NaN row would make every ranking that reads it undefined."""
    embedder = WordLlamaEmbedder()
    vectors = await embedder.embed(["", "the ledger runs on Postgres", "   "], TextRole.PASSAGE)
    assert not np.isnan(vectors).any()
    assert not vectors[0].any() and abs(float(np.linalg.norm(vectors[1])) - 1.0) < 1e-5


def test_none_turns_semantic_recall_off() -> None:
    assert build_embedder(Settings(embedder="none")) is None


async def test_openai_compatible_embeddings_through_the_sdk() -> None:
    with FakeEmbeddings(dimensions=32) as fake:
        embedder = build_embedder(
            Settings(embedder="openai", embedder_base_url=fake.base_url,
                     embedder_model="embed-small", embedder_dimensions=32,
                     embedder_api_key="sk-test")  # type: ignore[arg-type]
        )  # fmt: skip
        assert isinstance(embedder, OpenAIEmbedder) and embedder.model_id == "openai/embed-small"
        vectors = await embedder.embed(["ledger database", "pottery class"], TextRole.PASSAGE)
        assert vectors.shape == (2, 32)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        (request,) = fake.requests
        assert request.body["model"] == "embed-small"
        assert request.body["input"] == ["ledger database", "pottery class"]
        assert request.headers["authorization"] == "Bearer sk-test"
        await embedder.close()


async def test_retries_then_timeout_then_the_breaker_fails_fast() -> None:
    with FakeEmbeddings(dimensions=8) as fake:
        embedder = OpenAIEmbedder(
            base_url=fake.base_url, model="m", dimensions=8, api_key=None, timeout=0.3,
            max_retries=1, breaker=BreakerSettings(threshold=2, cooldown=30.0),
        )  # fmt: skip
        fake.enqueue(Reply(status=503, body={"error": {"message": "busy"}}))
        assert (await embedder.embed(["a"], TextRole.QUERY)).shape == (1, 8)  # retried
        assert len(fake.requests) == 2
        fake.clear()
        fake.set_default(slow(Reply(body={}), 2.0))
        for _ in range(2):  # each: a timeout, retried once, then unavailable
            with pytest.raises(EmbedderUnavailable):
                await embedder.embed(["a"], TextRole.QUERY)
        assert embedder.breaker.state is BreakerState.OPEN
        asked = len(fake.requests)
        started = time.monotonic()
        with pytest.raises(EmbedderUnavailable, match="breaker"):
            await embedder.embed(["a"], TextRole.QUERY)
        # refused by the open breaker: no request, and sooner than one timeout (2 s) would be
        assert time.monotonic() - started < 1.0 and len(fake.requests) == asked
        await embedder.close()


async def test_a_wrong_length_or_a_refusal_is_unavailable_not_a_crash() -> None:
    with FakeEmbeddings(dimensions=16) as fake:
        embedder = OpenAIEmbedder(
            base_url=fake.base_url, model="m", dimensions=8, api_key=None, max_retries=0
        )
        with pytest.raises(EmbedderUnavailable, match="16 dimensions"):
            await embedder.embed(["a"], TextRole.PASSAGE)
        fake.enqueue(Reply(status=400, body={"error": {"message": "bad"}}))
        with pytest.raises(EmbedderUnavailable, match="400"):
            await embedder.embed(["a"], TextRole.PASSAGE)
        assert embedder.breaker.state is BreakerState.CLOSED  # an answer is not an outage
        await embedder.close()


def test_fusion_normalizes_each_list_and_reports_each_part() -> None:
    lexical = [("a", 12.0), ("b", 6.0), ("c", 0.0)]
    dense = [("c", 0.9), ("a", 0.5), ("d", 0.1)]
    fused = fuse(lexical, dense, 10, weight=0.5)
    by_key = {f.key: f for f in fused}
    assert by_key["a"].lexical == 0.5 and by_key["a"].dense == pytest.approx(0.25)
    assert by_key["c"].lexical == 0 and by_key["c"].dense == pytest.approx(0.5)
    assert [f.key for f in fused] == ["a", "c", "b", "d"]
    assert all(f.score == pytest.approx(f.lexical + f.dense) for f in fused)
    assert [f.key for f in fuse(lexical, dense, 10, weight=0.5, min_score=0.5)] == ["a", "c"]
    assert [f.key for f in fuse(lexical, [], 2)] == ["a", "b"]  # lexical only, its order


def test_rrf_and_nearest() -> None:
    assert [k for k, _ in rrf([[("a", 1), ("b", 1)], [("b", 1)]], 2)] == ["b", "a"]
    matrix = np.eye(4, dtype=np.float32)
    query = np.array([0, 0.8, 0.6, 0], dtype=np.float32)
    assert [i for i, _ in nearest(query, matrix, 2)] == [1, 2]
    assert nearest(query, np.zeros((0, 4), dtype=np.float32), 3) == []
