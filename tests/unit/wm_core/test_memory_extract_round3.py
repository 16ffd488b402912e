"""The offline extraction rules of the third round (wm_core): the readings each rule adds, and
what each one must still refuse."""

from __future__ import annotations

from support.extraction_talk import said as _said
from wm_core import MemoryOp, MemoryType


def _of(ops: list[MemoryOp], kind: MemoryType) -> list[MemoryOp]:
    return [op for op in ops if op.type is kind]


def test_an_introduction_without_i_am_gives_the_name_the_role_and_the_home() -> None:
    ops = _said(
        "2026-02-19", "U: Hey, quick intro: Ada Brandt, data engineer at Lumio, based in Graz."
    )
    profile = {op.fields["subject"]: op.text for op in _of(ops, MemoryType.PROFILE)}
    assert profile == {
        "name": "The user's name is Ada Brandt.",
        "role": "The user is data engineer at Lumio.",
        "home": "The user is based in Graz.",
    }


def test_what_bothers_the_user_and_how_they_find_things_are_preferences() -> None:
    ops = _said(
        "2026-03-27",
        "U: Trailing whitespace drives me crazy.",
        "U: I find light themes harder on my eyes.",
        "U: Please stop adding docstrings to private helpers.",
        "U: It drives me crazy.",
    )
    assert [op.text for op in _of(ops, MemoryType.PREFERENCE)] == [
        "The user dislikes trailing whitespace.",
        "The user finds light themes harder on the user's eyes.",
        "The user wants the assistant to stop adding docstrings to private helpers.",
    ]


def test_a_rule_from_now_on_is_a_decision_and_a_plain_will_is_not() -> None:
    ops = _said(
        "2026-06-10",
        "U: From now on I'll review every migration by hand.",
        "U: I'll look at it later.",
    )
    decisions = _of(ops, MemoryType.DECISION)
    assert [op.fields["decision"] for op in decisions] == ["review every migration by hand"]


def test_someone_named_who_signs_off_is_who_agreed_not_an_event() -> None:
    ops = _said(
        "2026-04-09",
        "U: We picked Loki over Elasticsearch for logs, since it is cheaper to run.",
        "A: Makes sense.",
        "U: Our head of infra, Priya Raman, signed off on it yesterday.",
    )
    decisions = _of(ops, MemoryType.DECISION)
    assert len(decisions) == 1
    # everyone who agreed is kept: the assistant's "Makes sense", then Priya's sign-off
    assert decisions[0].fields["agreed_by"] == "assistant, Priya Raman"
    assert decisions[0].source_message_ids == ("m0", "m1", "m2")
    assert _of(ops, MemoryType.EVENT) == []


def test_a_sign_off_without_a_decision_before_it_is_read_as_usual() -> None:
    ops = _said("2026-04-09", "U: My manager Lea approved my leave yesterday.")
    assert [op.type for op in ops if op.type is MemoryType.DECISION] == []
    assert _of(ops, MemoryType.EVENT)


def test_what_the_assistant_would_do_is_a_proposal_and_names_what_it_refers_to() -> None:
    ops = _said(
        "2026-03-12",
        "U: Why is the import so slow?",
        "A: Rows are inserted one by one. I'd batch them in chunks of 1,000.",
        "U: Fine by me.",
    )
    decision = _of(ops, MemoryType.DECISION)[0]
    assert decision.fields["decided_by"] == "assistant"
    assert decision.fields["agreed_by"] == "user"
    assert "batch them in chunks of 1,000" in decision.text
    assert "Rows are inserted one by one" in decision.text


def test_i_would_like_is_no_proposal() -> None:
    ops = _said("2026-03-12", "A: I'd like to see the logs first.", "U: Sure.")
    assert _of(ops, MemoryType.DECISION) == []


def test_a_yes_to_a_question_after_a_colon_is_a_decision() -> None:
    ops = _said(
        "2026-11-16",
        "A: Before I refactor: should the export keep its CSV format for the auditors?",
        "U: Yes, until they switch tools.",
    )
    decision = _of(ops, MemoryType.DECISION)[0]
    assert "should the export keep its CSV format for the auditors?" in decision.text


def test_a_short_answer_naming_something_about_a_named_thing_is_an_entity() -> None:
    ops = _said(
        "2026-09-29",
        "U: The service is called ferry and it syncs files between regions.",
        "A: What queue does ferry use?",
        "U: NATS, with one stream per region.",
        "A: What's the retention on ferry?",
        "U: Seven days.",
    )
    answers = [op.text for op in _of(ops, MemoryType.ENTITY) if op.text.startswith("Asked")]
    assert answers == [
        'Asked "What queue does ferry use?", the user said: NATS, with one stream per region.'
    ]


def test_a_clause_that_opens_with_its_time_after_but_is_its_own_fact() -> None:
    ops = _said(
        "2026-05-06",
        "U: I've been a teacher for ten years, but last March I switched to sales.",
    )
    assert [op.type for op in ops] == [MemoryType.PROFILE, MemoryType.EVENT]
    assert ops[1].event_time == "2026-03-01"


def test_a_named_person_doing_something_is_an_entity_and_a_bare_amount_is_not() -> None:
    ops = _said(
        "2026-07-15",
        "U: My neighbour Tariq repairs vintage motorbikes.",
        "U: Tariq restores old Hondas in his garage.",
        "A: How long will it take?",
        "U: Four weeks.",
    )
    texts = [op.text for op in _of(ops, MemoryType.ENTITY)]
    assert "Tariq restores old Hondas in his garage." in texts
    assert not any(t.startswith("Four") for t in texts)
