"""The one text analyzer (issue 34): what both engines index and every ranked query searches."""

from __future__ import annotations

import re
import unicodedata

import pytest
import Stemmer
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from wm_server.config import Settings
from wm_server.search.analyzer import (
    MAX_QUERY_TERMS,
    STOP_WORDS,
    analyze,
    analyzer_id,
    index_text,
    query_terms,
)


def test_words_are_folded_and_stemmed_so_inflections_meet() -> None:
    assert analyze("Deploys DEPLOYED deploying") == ["deploy", "deploy", "deploy"]
    assert analyze("ledgers") == analyze("Ledger") == ["ledger"]


def test_compatibility_forms_fold_before_splitting() -> None:
    assert analyze("\ufb01le") == analyze("FILE") == ["file"]  # the "fi" ligature
    assert analyze("ＦＵＬＬ") == ["full"]  # full-width letters
    assert analyze("snake_case-word.v2") == ["snake", "case", "word", "v2"]


def test_stop_words_go_and_pronouns_stay() -> None:
    assert analyze("What did the dog and the cat eat?") == ["did", "dog", "cat", "eat"]
    assert "i" in analyze("When did I start") and "my" in analyze("my dad")
    assert analyze("the and of what") == ["of"]


def test_a_query_has_distinct_terms_in_order_and_an_index_keeps_repeats() -> None:
    assert query_terms("ledger Ledgers LEDGER postgres") == ["ledger", "postgr"]
    assert index_text("ledger ledgers") == "ledger ledger"
    assert len(query_terms(" ".join(f"w{n}" for n in range(50)))) == 32


def test_another_language_stems_its_own_way_and_keeps_every_word() -> None:
    assert analyze("Die Häuser", "german") == ["die", "haus"]
    assert analyze("Die Häuser") == ["die", "häuser"]  # English: no German stem
    assert analyze("the what", "german") == ["the", "what"]  # no English stop words
    assert analyzer_id("german") != analyzer_id("english")


def test_the_language_setting_names_a_snowball_stemmer() -> None:
    assert Settings(text_language="french").text_language == "french"
    with pytest.raises(ValidationError, match="not a stemmer language"):
        Settings(text_language="klingon")


# The words as the analyzer first found them, for every text: NFKC, case folding, then the
# regex. ``analyze`` takes a faster path for ASCII text, and ``query_terms`` stems a long
# query a batch at a time until it has its terms; both must give what these give.
def _regex_words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text).casefold())


def _all_terms(text: str, language: str = "english") -> list[str]:
    stop = STOP_WORDS.get(language, frozenset())
    stems: list[str] = Stemmer.Stemmer(language).stemWords(
        [w for w in _regex_words(text) if w not in stop]
    )
    return stems


_ascii = st.text(alphabet=st.characters(max_codepoint=127), max_size=400)
_mixed = st.text(alphabet="aZ09_- .,\t\n\x1c\x1fÉé\u00dfİ\ufb01Ｆ中😀", max_size=200)
_many_words = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789", min_size=1, max_size=7),
    max_size=400,
).map(lambda words: " ".join(words))
_texts = st.one_of(_ascii, _mixed, st.text(max_size=300), _many_words)


@settings(max_examples=400, deadline=None)
@given(_texts, st.sampled_from(["english", "german"]))
def test_the_terms_are_the_regexs_words_stemmed_for_any_text(text: str, language: str) -> None:
    assert analyze(text, language) == _all_terms(text, language)
    assert index_text(text, language) == " ".join(_all_terms(text, language))


@settings(max_examples=400, deadline=None)
@given(_texts)
def test_a_querys_terms_are_the_first_distinct_ones_of_all_its_terms(text: str) -> None:
    assert query_terms(text) == list(dict.fromkeys(_all_terms(text)))[:MAX_QUERY_TERMS]


def test_ascii_separators_and_case_split_words_as_the_regex_does() -> None:
    text = "A_b-C.d\te\x1cf\x7fG1 2H`i'j"
    assert analyze(text) == _all_terms(text) == ["b", "c", "d", "e", "f", "g1", "2h", "i", "j"]


def test_terms_stay_right_past_the_bound_of_remembered_words() -> None:
    texts = [" ".join(f"word{n}s" for n in range(start, start + 5_000)) for start in (0, 5_000)]
    for round_ in range(7):  # 70,000 distinct words: the table starts again on the way
        for text in texts:
            shifted = text.replace("word", f"w{round_}x")
            assert analyze(shifted) == _all_terms(shifted)
    assert analyze(texts[0]) == _all_terms(texts[0])  # remembered or not, the same terms
