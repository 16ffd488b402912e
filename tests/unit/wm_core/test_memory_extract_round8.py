"""The offline extraction mechanisms of the eighth round (wm_core): chat and voice spellings
read as one (a short weekday, a day in words, "name's", "@"), a question's premise, a title
without its dot, a run-on sentence said aloud cut at a new subject, a timetable's present
and an obligation read as ahead, corrections and choices taken back, whose relative a
possessive names, a subject said twice, decisions said the chat way, a sign-off in another
speaker's grammar, a pick from a numbered list, a month after "from", a statement before a
lower-case question; and what each must still refuse. The phrasings here are not those of
the bench splits: each test reads a mechanism."""

from __future__ import annotations

import pytest

from support.extraction_talk import said as _said
from wm_core import MemoryOp, MemoryType
from wm_core._memory.choices import numbered_options, numbered_pick
from wm_core._memory.corrections import correction, retraction
from wm_core._memory.speech import clauses, normalized, premise, statement
from wm_core._memory.when import resolve_when


def _kinds(ops: list[MemoryOp], kind: MemoryType) -> list[MemoryOp]:
    return [op for op in ops if op.type is kind]


def test_chat_spellings_of_days_names_and_places_are_read_as_one() -> None:
    assert normalized("demo is next weds") == "demo is next wednesday"
    assert normalized("back on tues, ok") == "back on tuesday, ok"
    # alone, "sat" and "sun" are other words
    assert normalized("the cat sat in the sun") == "the cat sat in the sun"
    assert normalized("arriving from the eleventh") == "arriving from the 11th"
    assert normalized("due the twenty third of march") == "due the 23rd of march"
    assert normalized("on the thirty first") == "on the 31st"
    # an ordinal that dates nothing stays a word
    assert normalized("the second attempt worked") == "the second attempt worked"
    assert normalized("name's Oskar Lindqvist") == "my name is Oskar Lindqvist"
    assert normalized("his name's Bo") == "his name's Bo"
    assert normalized("designer @ Fjord Studio") == "designer at Fjord Studio"
    assert normalized("ping me @ noon") == "ping me @ noon"
    (event,) = _said("2026-03-04", "U: the vet appointment is next fri")
    assert event.type is MemoryType.EVENT and event.event_time == "2026-03-13"
    (dated,) = _said("2026-03-04", "U: my cousin moves in with us from the twentieth")
    assert dated.event_time == "2026-03-20"
    ops = _said("2026-03-04", "U: name's Oskar Lindqvist, designer @ Fjord Studio")
    assert "The user's name is Oskar Lindqvist." in [op.text for op in ops]


def test_a_question_states_its_premise_and_nothing_else() -> None:
    assert premise("since I'm lactose intolerant, can I eat feta?") == "I'm lactose intolerant"
    assert premise("As a night porter, when should I eat?") == "I'm a night porter"
    assert premise("since when is feta cheese?") is None
    assert statement("As a rule, what do you suggest?") is None
    ops = _said("2026-03-04", "U: because I work night shifts at a bakery, when should I train?")
    assert [op.text for op in ops] == ["The user works night shifts at a bakery."]
    assert [op.text for op in _said("2026-03-04", "U: since I'm diabetic, can I drink cider?")] == [
        "The user is diabetic."
    ]
    assert _said("2026-03-04", "U: since you asked, what time is it in Lima?") == []


def test_a_title_without_its_dot_is_part_of_the_name() -> None:
    ops = _said("2026-03-04", "U: my supervisor is Prof Ingrid Solberg")
    assert any("Prof Ingrid Solberg" in op.text for op in ops)


def test_a_run_on_said_aloud_is_cut_at_a_new_subject_after_a_time() -> None:
    spoken = (
        "so we got the keys to the new flat on monday she wants to paint the hall green "
        "and I think we should wait"
    )
    parts = clauses(spoken)
    assert parts[0].endswith("on monday") and parts[1].startswith("she wants")
    named = "we picked up the kitten from the shelter last week her name is Miso she is tiny"
    assert any(part.startswith("her name is Miso") for part in clauses(named))
    # a written sentence (a comma, or short) is left as it is
    assert clauses("on monday she wants the hall green, I think") == [
        "on monday she wants the hall green",
        "I think",
    ]
    assert clauses("we met on monday she said hi") == ["we met on monday she said hi"]


def test_a_timetable_and_an_obligation_are_ahead_and_a_last_day_is_no_past() -> None:
    assert resolve_when("then we fly to Oslo in March", "2026-01-10").iso == "2026-03-01"  # type: ignore[union-attr]
    assert resolve_when("we flew to Oslo in March", "2026-05-10").iso == "2026-03-01"  # type: ignore[union-attr]
    later = resolve_when("then I start at the clinic in February", "2026-11-03")
    assert later is not None and later.iso == "2027-02-01"
    due = resolve_when("need to file the tax return by 31 January, it was delayed", "2026-11-03")
    assert due is not None and due.iso == "2027-01-31"
    last = resolve_when("my last shift is the 3rd of december", "2026-11-03")
    assert last is not None and last.iso == "2026-12-03"
    assert resolve_when("last december was cold", "2026-11-03").iso == "2025-12-01"  # type: ignore[union-attr]
    ahead = resolve_when("prices go up from april", "2026-02-01")
    assert ahead is not None and ahead.iso == "2026-04-01" and ahead.precision == "month"


def test_a_correction_fixes_the_fact_said_before() -> None:
    assert correction("wait actually it's the 9th not the 8th") == ("the 8th", "the 9th")
    assert correction("not Magnus, it's Mattias") == ("Magnus", "Mattias")
    assert correction("I drink tea, not coffee") is None
    ops = _said(
        "2026-03-04",
        "U: my physio session is on the 12th",
        "A: Noted, the 12th.",
        "U: oops it's the 13th not the 12th",
    )
    (event,) = _kinds(ops, MemoryType.EVENT)
    assert event.event_time == "2026-03-13" and "2026-03-13" in event.text
    ops = _said(
        "2026-03-04",
        "U: my landlord Magnus wants the deposit by friday",
        "A: Okay.",
        "U: sorry not Magnus, it's Mattias",
    )
    assert all("Magnus" not in op.text for op in ops)
    assert any(op.type is MemoryType.ENTITY and "Mattias" in op.text for op in ops)
    # a correction of nothing said before changes nothing and states nothing
    assert _said("2026-03-04", "U: actually it's Mattias not Magnus") == []


def test_a_choice_taken_back_names_what_the_next_one_replaces() -> None:
    assert retraction("we said we'd host it on render but scrap that") == (
        "we said we'd host it on render"
    )
    assert retraction("scrap metal prices are up") is None
    ops = _said(
        "2026-03-04",
        "U: we planned to use celery for the jobs but forget that, we're going with dramatiq "
        "because it's simpler",
    )
    (decision,) = _kinds(ops, MemoryType.DECISION)
    assert "dramatiq" in decision.text and "celery" in decision.text


def test_a_possessive_names_the_relative_of_the_one_named_last() -> None:
    ops = _said(
        "2026-03-04",
        "U: my neighbour Grete runs the bakery downstairs. her son Lukas fixed my bike last year",
    )
    assert any("Grete's son Lukas" in op.text for op in ops)
    # with no one named before, "her" stays hers
    ops = _said("2026-03-04", "U: her son Lukas fixed my bike")
    assert all("'s son Lukas" not in op.text for op in ops)


def test_a_subject_said_twice_is_read_once() -> None:
    ops = _said("2026-03-04", "U: My daughter Ines she is studying medicine in Porto")
    assert any("Ines is studying medicine in Porto" in op.text for op in ops)
    assert all(" she is " not in op.text for op in ops)


def test_decisions_said_the_chat_way() -> None:
    (chat,) = _kinds(_said("2026-03-04", "U: ditching jenkins for the builds"), MemoryType.DECISION)
    assert "jenkins" in chat.text
    # an errand is no choice
    assert _kinds(_said("2026-03-04", "U: dropping the kids off at 8"), MemoryType.DECISION) == []
    ops = _said(
        "2026-03-04", "U: we argued for weeks and finally we will use Nomad for the batch jobs"
    )
    assert "Nomad" in _kinds(ops, MemoryType.DECISION)[0].text
    (vote,) = _kinds(_said("2026-03-04", "U: the board voted: the office closes on fridays"),
                     MemoryType.DECISION)  # fmt: skip
    assert "office closes on fridays" in vote.text


def test_a_sign_off_in_another_speakers_grammar_is_an_agreement() -> None:
    ops = _said(
        "2026-03-04",
        "U: We will use Grafana Cloud for the dashboards because it is cheaper.",
        "A: Good choice.",
        "U: My boss Mrs. Haddad is agree with this.",
    )
    (decision,) = _kinds(ops, MemoryType.DECISION)
    assert "Haddad" in decision.text or "Haddad" in str(decision.fields)
    assert _kinds(ops, MemoryType.PROFILE) == []


def test_a_pick_from_a_numbered_list_is_a_decision_over_the_others() -> None:
    offer = "Pick one: 1. Hetzner 2. OVH 3. Scaleway."
    assert numbered_options(offer) == ["Hetzner", "OVH", "Scaleway"]
    assert numbered_pick(offer, "2, the datacenter is closer") == (
        "OVH",
        ["Hetzner", "Scaleway"],
        "the datacenter is closer",
    )
    assert numbered_pick(offer, "the third one") == ("Scaleway", ["Hetzner", "OVH"], "")
    # a number that counts, or a choice that hedges, picks nothing
    assert numbered_pick(offer, "3 people use it here") is None
    assert numbered_pick(offer, "2 or 3") is None
    assert numbered_pick("No list here.", "2") is None
    ops = _said(
        "2026-03-04",
        "A: For the VPS: (1) Hetzner, (2) OVH, (3) Scaleway.",
        "U: 1. best price for the RAM",
    )
    (decision,) = _kinds(ops, MemoryType.DECISION)
    assert "Hetzner" in decision.text and "OVH" in decision.text


def test_a_statement_before_a_lower_case_question_still_states() -> None:
    told = statement("we land in Hanoi on the 4th. any tips for the airport?")
    assert told == "we land in Hanoi on the 4th."
    assert statement("any tips for the airport?") is None
    ops = _said("2026-03-01", "U: we land in Hanoi on the 4th. any tips for the airport?")
    (event,) = _kinds(ops, MemoryType.EVENT)
    assert "Hanoi" in event.text and event.event_time == "2026-03-04"


@pytest.mark.slow  # about 100 KB through the extractor dozens of times: 10-30 CPU s
def test_long_inputs_read_in_linear_time() -> None:
    # quadratic backtracking (or a whole-sentence search per clause) on these would take
    # minutes to hours; linear reading is a few seconds at most
    for text in (
        "we said " + " " * 100_000 + "x",
        "actually it's " + "a " * 50_000 + "not b",
        "sorry not " + "x" * 100_000 + ", it's y",
        "since I'm " + "a" * 100_000 + ", is it ok?",
        "as a " + "(" * 100_000 + ", how?",
        "word " * 20_000 + "today he went",
        "we met. " * 5_000 + "any idea?",
        "1. " + "x" * 100_000,
        "name's " + "A" * 100_000,
        "her husband " + "Piotr " * 20_000,
        "My son " + "Mateus " * 20_000 + "he is here",
        "dropping " + "x " * 50_000,
        "team voted: " + "y " * 50_000,
        "on the twenty " * 20_000,
    ):
        _said("2026-07-01", f"U: {text}")
        _said("2026-07-01", f"A: (1) a, (2) b {text}", f"U: {text}")
