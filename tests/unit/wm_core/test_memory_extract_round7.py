"""The offline extraction mechanisms of the seventh round (wm_core): a lower-case sentence
inside a message cut off as a clause, the "I" chat leaves out put back, the team's stack and
the user's work in any verb form, an assistant's check with a tag read as the user's words,
decisions from the occasion, an outcome with its source, a kept imperative and a sign-off
with a reason, one memory per listed decision, an event joined with the date said next, and
times read in the part of the sentence that says them; and what each must still refuse. The
phrasings here are not those of the bench splits: each test reads a mechanism."""

from __future__ import annotations

import pytest

from support.extraction_talk import said as _said
from wm_core import MemoryOp, MemoryType
from wm_core._memory.speech import with_subject
from wm_core._memory.when import resolve_when


def _kinds(ops: list[MemoryOp], kind: MemoryType) -> list[MemoryOp]:
    return [op for op in ops if op.type is kind]


def test_a_lower_case_sentence_after_a_fact_is_a_fact_of_its_own() -> None:
    ops = _said("2026-07-01", "U: I'm Ola Berg, SRE at Trondheim Energi. we're mostly a rust shop")
    profiles = [op.text for op in _kinds(ops, MemoryType.PROFILE)]
    assert "The user's name is Ola Berg." in profiles
    assert any("rust shop" in text and "Trondheim" not in text for text in profiles)
    # an abbreviation or a title is no sentence end
    (entity,) = _kinds(_said("2026-07-01", "U: My tutor is called Mrs. Lund"), MemoryType.ENTITY)
    assert "Mrs. Lund" in entity.text


def test_the_i_chat_leaves_out_is_put_back_but_a_request_keeps_its_verb() -> None:
    assert with_subject("sprained my ankle at football on sunday") == (
        "I sprained my ankle at football on sunday"
    )
    assert with_subject("been learning the cello since spring") == (
        "I've been learning the cello since spring"
    )
    assert with_subject("use black for formatting") == "use black for formatting"
    assert with_subject("need a hand with this") == "need a hand with this"
    (event,) = _said("2026-07-06", "U: sprained my ankle at football on sunday")
    assert event.type is MemoryType.EVENT and event.event_time == "2026-07-05"


def test_the_teams_stack_and_the_users_work_in_other_verb_forms() -> None:
    for clause in (
        "we mostly deploy to hetzner with nomad",
        "everything runs on fly machines",
        "our metrics live in victoria metrics",
        "at my job we use jira for tickets",
        "I do payroll for a dental chain called Brightsmile",
    ):
        ops = _said("2026-07-01", f"U: {clause}")
        assert [op.type for op in ops][:1] == [MemoryType.PROFILE], clause
    # a past or passing verb at a place is no profile
    assert _kinds(_said("2026-07-01", "U: I met Jonas at Spotify"), MemoryType.PROFILE) == []


def test_an_assistant_check_with_a_tag_is_read_as_the_users_words() -> None:
    ops = _said(
        "2026-07-01",
        "A: So your team deploys with Helm on GKE, is that right?",
        "U: yes",
    )
    (fact,) = ops
    assert fact.type is MemoryType.PROFILE and "Helm on GKE" in fact.text
    denied = _said("2026-07-01", "A: You work at Nordea, correct?", "U: no, not any more")
    assert _kinds(denied, MemoryType.PROFILE) == []


def test_a_decision_keeps_its_occasion_and_a_listed_pair_is_two() -> None:
    (decision,) = _kinds(
        _said("2026-07-01", "U: following the pen test the security guild agreed to rotate keys"),
        MemoryType.DECISION,
    )
    assert decision.text.startswith("Following the pen test")
    pair = _kinds(
        _said("2026-07-01", "U: we decided: staging resets nightly, and demo data ships in git"),
        MemoryType.DECISION,
    )
    assert [op.fields["decision"] for op in pair] == [
        "staging resets nightly",
        "demo data ships in git",
    ]
    (outcome,) = _kinds(
        _said("2026-07-01", "U: Final call from the design review: the green palette"),
        MemoryType.DECISION,
    )
    assert "green palette" in outcome.text


def test_a_kept_imperative_is_agreed_but_not_a_how_to_answer() -> None:
    ops = _said(
        "2026-07-01",
        "U: the build cache keeps missing on ci",
        "A: Pin the node version in the workflow file.",
        "U: that did the trick, keeping it",
    )
    (decision,) = _kinds(ops, MemoryType.DECISION)
    assert decision.fields["agreed_by"] == "user" and "node version" in decision.text
    how_to = _said(
        "2026-07-01",
        "U: how do I list docker volumes?",
        "A: Use docker volume ls.",
        "U: that worked",
    )
    assert _kinds(how_to, MemoryType.DECISION) == []


def test_a_sign_off_with_a_reason_gives_the_decision_its_reason() -> None:
    ops = _said(
        "2026-07-01",
        "U: we're switching the docs to MkDocs.",
        "U: Priya pushed for it because Sphinx builds take ten minutes.",
    )
    (decision,) = _kinds(ops, MemoryType.DECISION)
    assert decision.fields["agreed_by"] == "Priya"
    assert decision.fields["reason"] == "Sphinx builds take ten minutes"


def test_an_event_and_the_date_said_next_are_one_memory() -> None:
    ops = _said(
        "2026-07-01", "U: we finally booked the cabin in Lofoten!! we drive up on the 3rd of august"
    )
    (event,) = _kinds(ops, MemoryType.EVENT)
    assert "Lofoten" in event.text and event.event_time == "2026-08-03"


def test_a_household_move_is_an_event_and_a_teams_move_a_decision() -> None:
    home = _said(
        "2026-04-02", "U: we're moving to Aarhus in September because my husband got a job there"
    )
    assert [op.type for op in home][:1] == [MemoryType.EVENT]
    assert home[0].event_time == "2026-09-01"
    team = _said("2026-04-02", "U: we're moving the queue to SQS next sprint")
    assert [op.type for op in team] == [MemoryType.DECISION]


def test_a_time_reads_the_tense_of_the_part_that_says_it() -> None:
    when = resolve_when("I tore a ligament in March, physio starts next week", "2026-05-10")
    assert when is not None and when.iso == "2026-03-01"
    when = resolve_when("my cousin is getting married in April", "2026-05-10")
    assert when is not None and when.iso == "2027-04-01"
    when = resolve_when("she starts at the new school on the 1st of September", "2026-05-10")
    assert when is not None and when.iso == "2026-09-01"
    when = resolve_when("we're flying home at the end of June", "2026-05-10")
    assert when is not None and when.iso == "2026-06-01"


def test_an_assistants_it_is_that_echoes_no_decision_is_none() -> None:
    ops = _said("2026-07-01", "U: I'd rather you reply in French", "A: Sure, French it is.")
    assert _kinds(ops, MemoryType.DECISION) == []
    assert [op.text for op in _kinds(ops, MemoryType.PREFERENCE)] == [
        "The user wants the assistant to reply in French."
    ]


@pytest.mark.slow  # about 100 KB through the extractor dozens of times: 10-30 CPU s
def test_long_inputs_read_in_linear_time() -> None:
    # quadratic backtracking on these would take hours; linear reading is well under a second
    for text in (
        " " * 100_000 + "is that right?",
        "after " + "x " * 50_000 + "we decided to go",
        "we decided: " + "a" * 100_000 + ", and b",
        "been " + "y" * 100_000,
        "I " + "z " * 50_000 + "at Acme",
    ):
        _said("2026-07-01", f"U: {text}")
        _said("2026-07-01", f"A: {text}", "U: yes")


def test_tastes_and_standing_requests_in_other_forms_are_preferences() -> None:
    for line, text in (
        ("U: not a fan of dark patterns in onboarding", "The user is not a fan of dark patterns"),
        ("U: could you always cite the RFC from now on", "The user wants the assistant to always"),
        ("U: I'd love it if you wrote tests first", "The user would love it if the assistant"),
        ("U: keep your answers to one screen", "The user wants the assistant to keep"),
    ):
        (op,) = _said("2026-07-01", line)
        assert op.type is MemoryType.PREFERENCE and op.text.startswith(text), line
    # a one-off question is still no memory, and being called a name names no thing
    assert _said("2026-07-01", "U: could you check this query?") == []
    ops = _said("2026-07-01", "U: I hate being called champ")
    assert [op.type for op in ops] == [MemoryType.PREFERENCE]


def test_someone_from_a_group_a_pet_once_and_me_and_my_partner() -> None:
    ops = _said("2026-07-01", "U: Tobias from legal needs the contract by monday")
    assert "Tobias is from legal." in [op.text for op in _kinds(ops, MemoryType.ENTITY)]
    assert _kinds(ops, MemoryType.EVENT)[0].event_time == "2026-07-06"
    # one memory for "X is my <pet>", and a language of the user's stays a profile fact
    assert [(op.type, op.text) for op in _said("2026-07-01", "U: Biscuit is my hamster")] == [
        (MemoryType.ENTITY, "Biscuit is the user's hamster.")
    ]
    assert [op.type for op in _said("2026-07-01", "U: Basque is my first language")] == [
        MemoryType.PROFILE
    ]
    ops = _said("2026-07-01", "U: me and my wife Ines just bought a campervan")
    assert [op.type for op in ops] == [MemoryType.EVENT, MemoryType.ENTITY]
    assert "campervan" in ops[0].text and "Ines" in ops[0].text
