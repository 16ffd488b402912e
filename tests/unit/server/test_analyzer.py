"""The one text analyzer (issue 34): what both engines index and every ranked query searches."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from wm_server.config import Settings
from wm_server.search.analyzer import analyze, analyzer_id, index_text, query_terms


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
