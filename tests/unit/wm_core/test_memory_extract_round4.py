"""The offline extraction mechanisms of the fourth round (wm_core): informal spellings, clause
segmentation, choices across turns, answers to "Should we …?", verb families of taste, profile
lists, roles of named people, one event over two clauses; and what each must still refuse.
The phrasings here are not those of the bench splits: each test reads a mechanism, not a
sentence it was fitted on."""

from __future__ import annotations

from support.extraction_talk import said as _said
from wm_core import MemoryOp, MemoryType


def _of(ops: list[MemoryOp], kind: MemoryType) -> list[str]:
    return [op.text for op in ops if op.type is kind]


def test_informal_spellings_are_read_as_the_words_they_stand_for() -> None:
    ops = _said(
        "2026-03-02", "U: fyi we're gonna go w/ Caddy for the edge proxy bc nginx configs rot"
    )
    (decision,) = [op for op in ops if op.type is MemoryType.DECISION]
    assert decision.text == (
        "The team is going to go with Caddy for the edge proxy because nginx configs rot."
    )
    assert decision.fields["reason"] == "nginx configs rot"


def test_a_decision_after_a_lead_in_or_a_time_is_still_a_decision() -> None:
    ops = _said(
        "2026-03-11",
        "U: after two weeks of benchmarks we're going with ClickHouse for the metrics store",
        "U: Last Monday we decided to retire the cron box.",
    )
    decisions = [op for op in ops if op.type is MemoryType.DECISION]
    assert [op.fields["decision"] for op in decisions] == [
        "going with ClickHouse for the metrics store",
        "to retire the cron box",
    ]
    assert decisions[1].event_time == "2026-03-09"
    assert _of(ops, MemoryType.EVENT) == []


def test_a_reply_that_picks_one_of_the_named_alternatives_is_a_decision() -> None:
    # the assistant names them in a statement, the question comes after
    ops = _said(
        "2026-04-02",
        "A: You could keep the queue in Postgres, or move it to SQS. Which one?",
        "U: sqs is fine, we already pay for it.",
    )
    assert _of(ops, MemoryType.DECISION) == [
        "The user chose move it to SQS over keep the queue in Postgres: sqs is fine, "
        "the team already pay for it."
    ]
    # the user names them, a turn later says which one won and who agreed
    ops = _said(
        "2026-04-02",
        "U: We argued about the linter all week, ESLint vs Biome.",
        "A: Where did you land?",
        "U: Biome won, it's much faster. Kenji agreed.",
    )
    (decision,) = [op for op in ops if op.type is MemoryType.DECISION]
    assert decision.text.startswith("The user chose Biome over ESLint")
    assert decision.fields["agreed_by"] == "Kenji"
    # "Do you know if it's X or Y?" asks for a fact, not a choice
    ops = _said(
        "2026-04-02",
        "A: Do you know if the bug is in the parser or in the lexer?",
        "U: The parser, I think.",
    )
    assert _of(ops, MemoryType.DECISION) == []


def test_any_statement_answering_should_we_is_a_decision_but_putting_it_off_is_not() -> None:
    ops = _said(
        "2026-05-06",
        "A: Should we keep the feature flag after the rollout?",
        "U: Only for two weeks, then delete it.",
        "A: Should we migrate the old invoices too?",
        "U: Not yet.",
    )
    assert _of(ops, MemoryType.DECISION) == [
        'Asked "Should we keep the feature flag after the rollout?", the user answered: '
        "Only for two weeks, then delete it."
    ]


def test_a_proposal_after_its_scope_accepted_with_a_typo_is_a_decision() -> None:
    ops = _said(
        "2026-05-20",
        "A: For the login page, I'd suggest rate limiting by IP at 5 attempts a minute.",
        "U: yeah lets do that",
    )
    (decision,) = _of(ops, MemoryType.DECISION)
    assert "rate limiting by IP at 5 attempts a minute" in decision


def test_taste_by_verb_family_and_favourites_either_way_round() -> None:
    ops = _said(
        "2026-06-01",
        "U: I never use tabs in YAML.",
        "U: I always go with Fastify for new services.",
        "U: Helix is my go-to editor these days.",
        "U: Microservices are overrated.",
        "U: I usually go swimming on Sundays.",  # a habit, not a taste
    )
    assert _of(ops, MemoryType.PREFERENCE) == [
        "The user never uses tabs in YAML.",
        "The user always goes with Fastify for new services.",
        "Helix is the user's go-to editor.",
        "Microservices are overrated.",
    ]
    assert _of(ops, MemoryType.PROFILE) == ["The user usually goes swimming on Sundays."]


def test_profile_lists_pronouns_ages_and_the_team_are_profile_facts() -> None:
    ops = _said(
        "2026-06-15",
        "U: I'm 29, single, no kids, and we live in a small flat near Ghent.",
        "U: btw my pronouns are she/her",
        "U: We're a small agency, our main language is Elixir.",
    )
    assert _of(ops, MemoryType.PROFILE) == [
        "The user is 29 years old.",
        "The user is single.",
        "The user has no kids.",
        "The user and others live in a small flat near Ghent.",
        "The user's pronouns are she/her.",
        "The user is part of a small agency.",
        "The user's main language is Elixir.",
    ]


def test_thinking_and_denials_state_nothing() -> None:
    ops = _said(
        "2026-06-20",
        "U: I always assumed the limit was 100.",
        "U: Nothing new on my side today.",
        "U: No plans for the weekend yet.",
    )
    assert ops == []


def test_a_clause_with_its_subject_left_out_after_and_is_the_speakers() -> None:
    ops = _said("2026-07-01", "U: I was born in Lagos and studied law in Leeds.")
    assert _of(ops, MemoryType.PROFILE) == [
        "The user was born in Lagos.",
        "The user studied law in Leeds.",
    ]


def test_named_people_by_their_role_and_with_who_they_are_before_the_verb() -> None:
    ops = _said(
        "2026-07-07",
        "U: Our recruiter Dalia found us two candidates.",
        "U: Ines from the security team reviews every IAM change.",
        "U: My neighbour Bo is repainting his fence.",
        "U: He's sleeping now.",  # what someone is doing right now passes
    )
    entities = _of(ops, MemoryType.ENTITY)
    assert entities == [
        "The user's recruiter Dalia found the user and others two candidates.",
        "Ines from the security team reviews every IAM change.",
        # a project with its object lasts; "he's sleeping now" passes
        "The user's neighbour Bo is repainting his fence.",
    ]
    dalia = next(op for op in ops if op.type is MemoryType.ENTITY)
    assert dalia.fields["subject"] == "Dalia"


def test_a_dated_event_told_over_two_clauses_is_one_event() -> None:
    ops = _said(
        "2026-08-05",
        "U: Yesterday the office flooded and we lost two servers.",
    )
    assert [(op.text, op.event_time) for op in ops if op.type is MemoryType.EVENT] == [
        ("On 2026-08-04 the office flooded; the user and others lost two servers.", "2026-08-04")
    ]
