"""An OpenAI-compatible ``/v1/embeddings`` server on loopback, for the embedder provider.

Its default answer embeds each input as a hashed bag of words (deterministic, and texts that
share words get similar vectors), so a server pointed at it searches plausibly; faults are
scripted as for the other fakes (``enqueue(Reply(status=503))``, ``slow``, resets).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from support.fake_http import FakeApi, RecordedRequest, Reply


def hashed_vector(text: str, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    for word in re.findall(r"\w+", text.casefold()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[int.from_bytes(digest[:4], "little") % dimensions] += 1.0
    return vector


def embeddings(texts: list[str], dimensions: int, model: str = "fake-embed") -> dict[str, Any]:
    return {
        "object": "list",
        "model": model,
        "data": [
            {"object": "embedding", "index": i, "embedding": hashed_vector(t, dimensions)}
            for i, t in enumerate(texts)
        ],
        "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
    }


class FakeEmbeddings(FakeApi):
    route = "/v1/embeddings"
    base_path = "/v1"

    def __init__(self, dimensions: int = 64) -> None:
        super().__init__(default=self._answer)
        self.dimensions = dimensions

    def _answer(self, request: RecordedRequest) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        given = body.get("input", [])
        texts = [given] if isinstance(given, str) else [str(t) for t in given]
        return Reply(body=embeddings(texts, self.dimensions, str(body.get("model", ""))))

    def unscripted(self) -> Reply:
        return Reply(status=500, body={"error": {"message": "no reply"}},
                     headers={"x-should-retry": "false"})  # fmt: skip

    def not_found(self, path: str) -> Reply:
        return Reply(status=404, body={"error": {"message": f"no route {path}"}})
