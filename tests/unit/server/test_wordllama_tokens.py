"""The embedded embedder tokenizes as wordllama itself does, only faster (hypothesis).

``WordLlamaEmbedder`` has its model tokenize with ``encode_batch_fast``, which leaves out the
character offsets; the vectors are made of the ids and the attention mask, so these must be
wordllama's own, for any batch of texts.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wm_server.embedding.embedded import WordLlamaEmbedder

_texts = st.lists(
    st.one_of(
        st.text(max_size=300),
        st.text(alphabet="abc xyz-_./`#\n\t\u00e9\u4e2d\U0001f600", max_size=200),
        st.just(""),
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
