"""The informal spellings' one pass (``speech.normalized``) against the rule it replaced: one
substitution per spelling, in the table's order. The single alternation is only faster if it
writes out exactly what the substitutions in turn wrote out, on any text."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from wm_core._memory import speech
from wm_core._memory.speech import normalized

# Spellings, their neighbours in chat, and letters that re's IGNORECASE folds but str.lower
# keeps apart ("ı" matches "i", "ſ" matches "s", the Kelvin sign matches "k").
_WORDS = (
    *speech._INFORMAL_WORDS,
    *speech._SHORT_DAYS,
    "name's", "name", "is", "Priya", "@", "Kestrel", "next", "on", "by", "from", "coming",
    "the", "twenty", "first", "of", "September", "ı", "İ", "ſun", "letſ", "\u212a", "I'm", "x",
)  # fmt: skip
_SEPARATORS = (" ", "  ", ", ", ".", "-", "/", "'", "(", "\t", "\n", "", "!", ": ")


def _one_substitution_per_spelling(text: str) -> str:
    """The rule as it was written before the single pass: each spelling its own ``re.sub``,
    then the short weekdays one by one (the ordinal days and the spaces as ``normalized``)."""
    for spelling, full in speech._INFORMAL_WORDS.items():
        pattern = rf"(?<![\w/'])(?:{re.escape(spelling)})(?![\w/'])"
        text = re.sub(pattern, full.replace("\\", r"\\"), text, flags=re.IGNORECASE)
    for pattern, full in speech._INFORMAL_IN_CONTEXT:
        text = pattern.sub(full, text)
    for short, full in speech._SHORT_DAYS.items():
        when = r"\b(?P<when>next|last|this|on|by|until|till|coming|from)\s+"
        text = re.sub(rf"{when}(?:{short})\b", rf"\g<when> {full}", text, flags=re.IGNORECASE)
    text = speech._ORDINAL_DAY.sub(speech._ordinal_day, text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


_PIECE = st.tuples(
    st.sampled_from(_WORDS).flatmap(lambda w: st.sampled_from((w, w.upper(), w.title()))),
    st.sampled_from(_SEPARATORS),
).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECE, min_size=1, max_size=10).map("".join))
def test_one_pass_writes_what_one_substitution_per_spelling_wrote(text: str) -> None:
    assert normalized(text) == _one_substitution_per_spelling(text)


def test_spellings_are_written_out_in_one_pass() -> None:
    assert normalized("gonna go w/ postgres bc idk, u know") == (
        "going to go with postgres because I don't know, you know"
    )
    assert normalized("w/o it tbh we're done") == "without it we're done"
    assert normalized("IM here, THX") == "I'm here, thanks"
    assert normalized("lets meet on thurs") == "let's meet on thursday"
    # a spelling inside a longer word, a path or a contraction is not one
    assert normalized("ubuntu src/u/ur isn't it") == "ubuntu src/u/ur isn't it"


def test_a_letter_re_folds_but_lower_keeps_is_read_as_the_spelling_it_matches() -> None:
    assert normalized("ı dont know") == "I don't know"
    assert normalized("letſ go next ſun") == "let's go next sunday"
