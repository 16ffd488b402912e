"""The phrasing-agnostic reading of clauses no rule recognised (``wm_core._memory.disclosure``)
and how the extractor uses it: the no-memory filter, the features, the classifier with its
licences and margin (on weights given here, so the arithmetic is checked, and on the generated
weights through ``extract_memories``), assistant checks the user confirms, and the text kept in
the third person with its words."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from wm_core import MemoryType, Message, Role, TextPart, extract_memories
from wm_core._memory import disclosure
from wm_core._memory.disclosure import (
    classify_clause,
    confirmed_check,
    features,
    no_memory,
    pieces,
    small_talk,
)


def _message(mid: str, role: Role, text: str) -> Message:
    return Message(mid, role, (TextPart(text),))


def _talk(*lines: str, date: str = "2026-03-10") -> list[tuple[str, str, str | None]]:
    """(type, text, event time) of what ``extract_memories`` keeps from ``U:``/``A:`` lines."""
    messages = [
        _message(f"m{i}", Role.USER if line[0] == "U" else Role.ASSISTANT, line[3:])
        for i, line in enumerate(lines, 1)
    ]
    ops = extract_memories(messages, [], message_dates={m.id: date for m in messages})
    return [(op.type.value if op.type else "", op.text, op.event_time) for op in ops]


def test_requests_questions_greetings_and_passing_states_hold_no_memory() -> None:
    for clause in (
        "can you look at the nginx annotations",
        "please fix the failing test",
        "explain what a bloom filter is",
        "what's the difference between a mutex and a semaphore",
        "is this thread safe?",
        "thanks, that's all",
        "hi there!",
        "ok thats enough for today",
        "my PR is blocked on review",
        "I'm working on the auth refactor this week",
        "I like your answer",
        "ok",
    ):
        assert no_memory(clause), clause


def test_standing_instructions_and_plain_statements_pass_the_filter() -> None:
    for clause in (
        "please use pnpm in all the examples",
        "don't ever auto-format files I didn't touch",
        "please never schedule calls before 10 am",
        "we run everything on k8s in eks",
        "I'm Dutch",
        "my brother teaches chemistry in Graz",
    ):
        assert not no_memory(clause), clause


def test_features_name_the_cues_whatever_the_words() -> None:
    said = "My sister Ana moved to Seville in 2024"
    found = features(said, Role.USER, "Where does she live", "2026-03-10")
    assert {"first_person", "relative", "name", "number", "dated", "cue:starts_first"} <= set(found)
    assert {"w:siste", "f:my", "role:user", "q:where", "bias"} <= set(found)
    # the same clause gives the same features, in the same order
    assert found == features(said, Role.USER, "Where does she live", "2026-03-10")
    assert "dated" not in features("My sister Ana lives in Seville", Role.USER, "", "2026-03-10")
    assert "first_person" not in features("the gateway is kong", Role.USER)


def test_the_classifier_picks_the_best_licensed_type_above_none_by_the_margin() -> None:
    weights = {
        "none": {"bias": 1.0},
        "decision": {"w:kong": 10 * (2.0 + disclosure.MARGIN)},
        "entity": {"w:kong": 2.0 + disclosure.MARGIN},
        "profile": {},
    }
    # a decision needs a choice cue: "the gateway is kong" states none, so the entity wins
    assert classify_clause("the gateway is kong", Role.USER, weights=weights) is (MemoryType.ENTITY)
    # with the cue, the decision's weight wins
    assert classify_clause("we switched the gateway to kong", Role.USER, weights=weights) is (
        MemoryType.DECISION
    )
    # a type that does not beat "none" by the margin is no memory
    weak = {"none": {"bias": 1.0}, "entity": {"w:kong": 1.0 + disclosure.MARGIN}}
    assert classify_clause("the gateway is kong", Role.USER, weights=weak) is None
    # the filter comes first, whatever the weights
    assert classify_clause("can you restart kong", Role.USER, weights=weights) is None


def test_a_clause_is_cut_where_a_lower_case_sentence_starts() -> None:
    assert pieces("quick one. we run everything on k8s") == [
        "quick one.",
        "we run everything on k8s",
    ]
    assert pieces("version 3.12 is pinned") == ["version 3.12 is pinned"]


def test_an_assistant_check_is_a_statement_only_when_the_user_confirms_it() -> None:
    check = _message("a1", Role.ASSISTANT, "So to confirm, handovers happen on Monday at 10?")
    assert confirmed_check(check, _message("u1", Role.USER, "correct")) == (
        "handovers happen on Monday at 10"
    )
    assert confirmed_check(check, _message("u2", Role.USER, "yes but on Tuesday")) is None
    assert confirmed_check(check, _message("u3", Role.USER, "no, Tuesday")) is None
    asked = _message("a2", Role.ASSISTANT, "To be clear, what time are handovers?")
    assert confirmed_check(asked, _message("u4", Role.USER, "yes")) is None


def test_a_phrasing_no_rule_knows_is_kept_with_its_words_in_the_third_person() -> None:
    assert _talk("U: our staging cluster is three hetzner boxes in falkenstein") == [
        ("entity", "The user's staging cluster is three hetzner boxes in falkenstein.", None)
    ]
    assert _talk("U: my brother teaches chemistry in a high school in Graz") == [
        ("entity", "The user's brother teaches chemistry in a high school in Graz.", None)
    ]


def test_a_confirmed_check_is_kept_and_a_denied_one_is_not() -> None:
    # its type is the generated classifier's (a fact about the team or a thing): what is
    # asserted is that it is kept, with its words
    kept = _talk("A: So to confirm, the weekly report goes out on Fridays at 9?", "U: correct")
    assert [(text, when) for _, text, when in kept] == [
        ("The weekly report goes out on Fridays at 9.", None)
    ]
    assert _talk("A: So to confirm, the weekly report goes out on Fridays at 9?", "U: no") == []


def test_what_the_assistant_says_alone_and_chit_chat_are_not_kept() -> None:
    assert (
        _talk(
            "U: what's new in postgres 16?",
            "A: Postgres 16 added logical replication from standbys.",
            "U: cool, thanks",
            "U: can you fix the failing test?",
            "U: thanks, that's all",
        )
        == []
    )


def test_an_agreeing_reply_adds_its_reason_to_the_decision_it_agrees_to() -> None:
    found = _talk(
        "A: The cache is a plain dict and grows without bound. I'd put an LRU of 10k entries "
        "in front of it.",
        "U: yep do that, we can't afford more RAM on those nodes",
    )
    assert len(found) == 1
    kind, text, _ = found[0]
    assert kind == "decision"
    assert "LRU of 10k entries" in text
    assert text.endswith("the team can't afford more RAM on those nodes.")


def test_a_time_after_a_pronoun_is_written_where_it_is() -> None:
    found = _talk("U: My dog Rex had his vaccine on Monday.", "U: he turns five in june")
    assert ("event", "Rex turns five in 2026-06.", "2026-06-01") in found


def test_small_talk_with_a_time_is_no_event() -> None:
    assert _talk("U: ok thats enough for today, thanks for the help", date="2026-11-18") == []
    assert small_talk("thanks for the help with the migration script")
    assert not small_talk("I moved to Porto in November")


# The technical-token cue as first written: it backtracked over every long word (a 64 KB word
# took 90 s in a commit's extraction). The shorter form must find a token in exactly the same
# clauses.
_TECH_AS_WRITTEN = re.compile(r"\w[\w\-]*[\d._/:][\w\-./:]*|\b\w+_\w+\b")


@given(st.text(alphabet="aZ1._/:- é", max_size=24))
def test_the_technical_token_cue_reads_what_the_longer_pattern_read(clause: str) -> None:
    assert ("tech" in features(clause, Role.USER)) == bool(_TECH_AS_WRITTEN.search(clause))


def test_a_long_word_reads_as_one_word() -> None:
    word = "y" * 200_000  # linear now: well under a second; quadratic, hours
    assert "tech" not in features(word, Role.USER)
    assert "tech" in features(word + "_2", Role.USER)
