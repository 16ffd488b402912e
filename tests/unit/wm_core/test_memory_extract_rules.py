"""The offline extraction rules of the second round (wm_core): the readings each rule adds, and
what each one must still refuse."""

from __future__ import annotations

from support.extraction_talk import said as _said
from wm_core import MemoryOp, MemoryType


def _facts(ops: list[MemoryOp]) -> list[tuple[str, str]]:
    return [(op.type.value if op.type else "?", op.text) for op in ops]


def test_names_with_a_title_or_accents_are_names() -> None:
    ops = _said(
        "2026-11-24",
        "U: My landlord, Mr. Hughes, is raising the rent.",
        "U: I live with my girlfriend Inês.",
    )
    entities = [op.text for op in ops if op.type is MemoryType.ENTITY]
    assert entities == [
        "The user's landlord, Mr. Hughes, is raising the rent.",
        "Inês is the user's girlfriend.",
    ]
    assert ops[0].fields["name"] == "Mr. Hughes"


def test_a_pronoun_clause_is_kept_when_it_lasts_and_refers_to_the_right_kind() -> None:
    ops = _said(
        "2026-06-03",
        "U: My dog Biscuit is a beagle and he's terrified of thunderstorms.",
        "U: My cat Luna had kittens. She's fine, just tired.",
        "U: My son Noah broke his arm. He has a cast for six weeks.",
        "U: I live with my girlfriend Inês.",
        "U: It is nice, though the rent is brutal.",
    )
    texts = [op.text for op in ops]
    assert "Biscuit is terrified of thunderstorms." in texts
    assert not any(t.startswith(("Luna is fine", "Noah has a cast", "Inês is nice")) for t in texts)


def test_profile_facts_the_first_round_missed() -> None:
    ops = _said(
        "2026-04-28",
        "U: I'm 52 and recently retired from teaching.",
        "U: I'm finally learning to paint.",
        "U: I volunteer at an animal shelter every Sunday.",
        "U: I drink about three cups a day.",
        "U: Our team uses trunk-based development with feature flags.",
        "U: I have coeliac disease.",
    )
    profile = [op.text for op in ops if op.type is MemoryType.PROFILE]
    assert profile == [
        "The user is 52 years old.",
        "The user recently retired from teaching.",
        "The user is finally learning to paint.",
        "The user volunteers at an animal shelter every Sunday.",
        "The user drinks about three cups a day.",
        "The user's team uses trunk-based development with feature flags.",
        "The user has coeliac disease.",
    ]


def test_a_promotion_is_an_event_and_the_users_role() -> None:
    ops = _said("2026-07-06", "U: I got promoted to senior designer last Thursday!")
    assert _facts(ops) == [
        ("event", "The user got promoted to senior designer on 2026-07-02."),
        ("profile", "The user is a senior designer."),
    ]
    assert ops[1].fields["subject"] == "role"  # a later role replaces it


def test_someone_elses_role_is_resolved_to_their_name() -> None:
    ops = _said(
        "2026-08-26",
        "U: My best friend Chloe is getting married on September 19.",
        "U: I'm her maid of honour.",
    )
    assert ("profile", "The user is Chloe's maid of honour.") in _facts(ops)


def test_undated_experiences_are_events_and_our_last_night_is_no_date() -> None:
    ops = _said(
        "2026-04-01",
        "U: We just got back from Iceland.",
        "U: We saw the northern lights on our last night.",
        "U: I also cancelled my cards.",
        "U: I saw that the build is red.",  # work talk is no experience
        "U: I lost an hour on that bug.",
    )
    events = [(op.text, op.event_time) for op in ops if op.type is MemoryType.EVENT]
    assert events == [
        ("The user and others just got back from Iceland.", None),
        ("The user and others saw the northern lights on the user's last night.", None),
        ("The user also cancelled the user's cards.", None),
    ]
    # "last night" alone is the day before the message
    (op,) = _said("2026-02-18", "U: The billing job failed last night.")
    assert op.event_time == "2026-02-17"


def test_a_yes_to_a_question_is_a_decision_or_a_preference_and_a_task_offer_is_neither() -> None:
    ops = _said(
        "2026-09-01",
        "A: Fine. Should the keys expire?",
        "U: Yes, set a TTL of 30 minutes on every session key.",
        "A: Do you want low-carb recipes?",
        "U: Yes, and I don't eat pork.",
        "A: Should I update the cron entry?",
        "U: Yes, in deploy/cron.yaml.",
        "A: Should I summarize decisions by email after calls?",
        "U: Yes please, send a summary after each call.",
        "A: Do you want me to open a pull request?",
        "U: Yes.",
        "A: Should we drop the old table?",
        "U: No, not yet.",
    )
    assert _facts(ops) == [
        (
            "decision",
            'Asked "Should the keys expire?", the user answered: '
            "Yes, set a TTL of 30 minutes on every session key.",
        ),
        ("preference", "The user wants low-carb recipes."),
        ("preference", "The user doesn't eat pork."),
        ("preference", "The user wants the assistant to send a summary after each call."),
    ]
    assert ops[0].source_message_ids == ("m0", "m1")


def test_options_asked_without_to_are_a_choice() -> None:
    ops = _said(
        "2026-11-03",
        "A: Do you want the report as a PDF or as a spreadsheet?",
        "U: A spreadsheet, since I need to filter it.",
    )
    assert [(op.type, op.fields.get("reason")) for op in ops] == [
        (MemoryType.DECISION, "the user needs to filter it")
    ]


def test_a_bare_answer_to_what_kind_is_kept_with_its_question() -> None:
    ops = _said(
        "2026-01-14",
        "U: I'm a freelance illustrator.",
        "A: Nice! What kind of illustration?",
        "U: Mostly children's books.",
        "A: What wood?",
        "U: Oak.",
        "A: What kind of farm did your family have?",  # the past: no fact about the user now
        "U: Corn and soybeans.",
    )
    assert _facts(ops)[1:] == [
        ("profile", "The user's answer to \"What kind of illustration?\": Mostly children's books.")
    ]


def test_an_imperative_going_on_from_an_instruction_is_one_too() -> None:
    ops = _said(
        "2026-08-13",
        "U: Use pytest, not unittest, for all new tests.",
        "U: And keep test files next to the modules they test.",
        "U: Keep the diff small.",
    )
    assert [op.text for op in ops] == [
        "The user wants the assistant to use pytest, not unittest, for all new tests.",
        "The user wants the assistant to keep test files next to the modules they test.",
    ]


def test_names_from_the_assistants_question_appositives_and_it_is_called() -> None:
    ops = _said(
        "2026-10-05",
        "A: Do you have a teacher?",
        "U: Yes, her name is Mrs. Okafor.",
        "U: My best friend Ravi just opened a bakery in Austin.",
        "U: It's called Crumb & Co.",
        "U: My mother turns 70 next Sunday.",
        "U: A dinner at her favourite restaurant, Casa Lina.",
        "U: Production is called osprey.",
    )
    entities = [op.text for op in ops if op.type is MemoryType.ENTITY]
    assert entities == [
        "The user's teacher is named Mrs. Okafor.",
        "The user's best friend Ravi just opened a bakery in Austin.",
        "Crumb & Co is the bakery.",
        "A dinner at her favourite restaurant, Casa Lina.",  # the clause, about its one name
        "Production is called osprey.",  # one entity, not a second one about "Production"
    ]
    assert [op.fields["name"] for op in ops[-2:]] == ["Casa Lina", "osprey"]


def test_there_is_the_last_place_named_and_holidays_are_dates() -> None:
    ops = _said(
        "2026-08-15",
        "U: My sister Laura lives in Toronto.",
        "U: We're going there for Christmas this year.",
    )
    (event,) = [op for op in ops if op.type is MemoryType.EVENT]
    assert (
        event.text
        == "The user and others are going to Toronto for Christmas (2026-12-25) this year."
    )
    assert event.event_time == "2026-12-25"
    # a past Christmas is last year's when said before it
    (past,) = _said("2026-08-15", "U: We visited Rome at Christmas.")
    assert past.event_time == "2025-12-25"


def test_a_coding_session_keeps_its_rules_and_choices_not_its_passing_states() -> None:
    ops = _said(
        "2026-05-05",
        "U: Can you look at the failing test in tests/test_api.py?",
        "A: The test fails because the fixture returns None. I fixed it.",
        "U: My PR is blocked on review.",
        "U: I'm working on the auth refactor this week.",
        "U: I have a meeting at 3, let's continue tomorrow.",
        "U: I'm going to lunch, back in an hour.",
        "U: Don't change the public API of the SDK without asking me.",
        "U: My laptop is a 2019 MacBook Pro.",
    )
    assert _facts(ops) == [
        (
            "preference",
            "The user wants the assistant to never change the public API of the SDK without "
            "asking the user.",
        ),
        ("profile", "The user's laptop is a 2019 MacBook Pro."),
    ]


def test_fragments_and_chit_chat_stay_empty() -> None:
    assert (
        _said(
            "2026-06-01",
            "A: Have you seen them before?",
            "U: Twice, in 2016 and 2018.",
            "A: How was it?",
            "U: Amazing.",
            "U: It's raining again here.",
            "U: I'm so tired today.",
            "U: I like your answer.",
            "U: I went to bed late.",
            "U: I met him once.",
        )
        == []
    )


def test_unnamed_relatives_yearly_dates_and_states_since_a_time() -> None:
    ops = _said(
        "2026-05-05",
        "U: My wife works as a nurse.",
        "U: My birthday is on March 3.",
        "U: I've been working at IBM since 2015.",
        "U: My mother turns 70 next Sunday.",
    )
    assert [(t, op.event_time) for (t, _), op in zip(_facts(ops), ops, strict=True)] == [
        ("entity", None),
        ("profile", None),
        ("profile", None),
        ("event", "2026-05-17"),
    ]
    assert [op.text for op in ops[:3]] == [
        "The user's wife works as a nurse.",
        "The user's birthday is on March 3.",
        "The user has been working at IBM since 2015.",
    ]


def test_decisions_said_in_more_ways() -> None:
    ops = _said(
        "2026-05-05",
        "A: I'd recommend Celery for the job queue since you already run Redis.",
        "U: Makes sense, go with Celery.",
        "U: We've standardised on Black for formatting.",
        "U: The decision is to ship on May 20.",
        "U: After discussing it, the team chose Vue over React because it's simpler.",
        "A: Which region should we deploy to, Frankfurt or Dublin?",
        "U: Frankfurt, most users are in Germany.",
        "U: The decision is final.",
    )
    assert all(op.type is MemoryType.DECISION for op in ops)
    assert [op.fields["decision"] for op in ops] == [
        "Celery for the job queue since the user already runs Redis",
        "Black for formatting",
        "ship on May 20",
        "Vue over React",
        "Frankfurt",
    ]
    assert ops[0].fields["agreed_by"] == "user"
    assert ops[2].event_time == "2026-05-20"
    assert ops[3].fields["reason"] == "it's simpler"
