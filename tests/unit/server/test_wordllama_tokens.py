"""The embedded embedder makes wordllama's own vectors, only faster (hypothesis).

``WordLlamaEmbedder`` pools its model's embeddings itself (``_Pooling``): the texts are
normalized here for the model's tokenizer with its normalizer taken off (unless a special
token is spelled out in them), encoded with ``encode_batch_fast`` without padding, and padded
here. The vectors are made of the ids and the attention mask, so these must be what
wordllama's own tokenizer gives, and the vectors wordllama's own, bit for bit, for any batch
of texts: compared with a model loaded apart, as wordllama loads it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import wordllama
from hypothesis import given, settings
from hypothesis import strategies as st
from wordllama import WordLlama

from wm_server.embedding.embedded import WordLlamaEmbedder, _Pooling

_texts = st.lists(
    st.one_of(
        st.text(max_size=300),
        st.text(alphabet="abc xyz-_./`#\n\t\u00e9\u4e2d\U0001f600\u2581", max_size=200),
        st.lists(st.sampled_from(["<s>", "</s>", "<unk>", " ", "a", "<", "/"]), max_size=12).map(
            "".join
        ),  # special tokens spelled out
        st.just(""),
        st.just(" "),
    ),
    min_size=1,
    max_size=8,
)


@functools.cache
def _reference() -> Any:
    """wordllama's model as it loads it, its tokenizer untouched."""
    folder = Path(wordllama.__file__).parent
    return WordLlama.load(dim=256, cache_dir=folder, disable_download=True)


def _pooling() -> tuple[Any, _Pooling]:
    embedder = WordLlamaEmbedder()
    assert embedder._pooling is not None  # the faster path is taken
    return _reference(), embedder._pooling


@settings(max_examples=200, deadline=None)
@given(_texts)
def test_the_same_ids_and_masks_as_wordllamas_own_tokenizer(texts: list[str]) -> None:
    model, pooling = _pooling()
    ids, mask = pooling.padded(pooling.ids(texts))
    own = model.tokenize(texts)  # wordllama's: ``encode_batch``, padded by the tokenizer
    assert ids.tolist() == [e.ids for e in own]
    assert mask.tolist() == [e.attention_mask for e in own]
    assert ids.dtype == np.int32 and mask.dtype == np.float32


@settings(max_examples=200, deadline=None)
@given(_texts)
def test_the_vectors_are_wordllamas_own_bit_for_bit(texts: list[str]) -> None:
    model, pooling = _pooling()
    assert pooling.embed(texts).tobytes() == model.embed(texts, norm=False).tobytes()


def test_a_batch_of_more_than_wordllamas_64_texts_gives_its_vectors() -> None:
    model, pooling = _pooling()
    texts = [f"message {n}: " + "lorem ipsum " * (n % 7) for n in range(150)]
    texts[70] = "a much longer message in the second batch of 64 " * 5
    assert pooling.embed(texts).tobytes() == model.embed(texts, norm=False).tobytes()


def test_the_pooling_takes_the_normalizer_off_and_puts_it_back_after_a_special_token() -> None:
    """The tokenizer is the model's own, not a copy: padding off, and the normalizer off
    except while a batch that spells out a special token is encoded."""
    model, pooling = _pooling()
    tokenizer = WordLlamaEmbedder()._model.tokenizer
    assert tokenizer.padding is None and tokenizer.normalizer is None
    texts = ["a </s> b", "plain words"]
    own = model.tokenize(texts)  # padded: cut at the mask
    assert pooling.ids(texts) == [e.ids[: sum(e.attention_mask)] for e in own]
    assert tokenizer.normalizer is None
