"""The embedded embedder tokenizes as wordllama itself does, only faster (hypothesis).

``WordLlamaEmbedder`` has its model tokenize with ``encode_batch_fast``, which leaves out the
character offsets, and normalizes the texts itself for a copy of the tokenizer without its
normalizer (unless a special token is spelled out in them); the vectors are made of the ids
and the attention mask, so these must be wordllama's own, for any batch of texts.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wm_server.embedding.embedded import WordLlamaEmbedder, _without_normalizer

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


@settings(max_examples=200, deadline=None)
@given(_texts)
def test_the_same_ids_and_masks_as_wordllamas_own_tokenizer(texts: list[str]) -> None:
    model = WordLlamaEmbedder()._model
    fast = model.tokenize(texts)
    own = type(model).tokenize(model, texts)  # wordllama's method: ``encode_batch``
    assert [e.ids for e in fast] == [e.ids for e in own]
    assert [e.attention_mask for e in fast] == [e.attention_mask for e in own]


def test_the_vectors_are_wordllamas_own() -> None:
    embedder = WordLlamaEmbedder()
    model = embedder._model
    assert "tokenize" in vars(model)  # the fast one is in use
    texts = ["message 1: lorem ipsum dolor", "`src/a.py` owned by Dana Ito", "", "中文 😀"]
    with np.errstate(invalid="ignore"):  # the empty text's 0/0, which the embedder skips
        fast = model.embed(texts, norm=True)
        tokenize = model.tokenize
        del model.tokenize  # wordllama's own method again, for this one call
        try:
            own = model.embed(texts, norm=True)
        finally:
            model.tokenize = tokenize  # the model is shared by the whole process
    assert np.array_equal(fast, own, equal_nan=True)  # an empty text: 0/0 either way


def test_the_texts_are_normalized_here_for_a_tokenizer_without_its_normalizer() -> None:
    tokenizer = WordLlamaEmbedder()._model.tokenizer
    plain = _without_normalizer(tokenizer)
    assert plain is not None and plain.normalizer is None  # the faster path is taken
    assert tokenizer.normalizer is not None  # the shared model's own is left alone
