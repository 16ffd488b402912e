"""The deterministic memory extractor on realistic conversations (wm_core)."""

from __future__ import annotations

from wm_core import (
    KEY_FACTS,
    MemoryOp,
    MemoryOpKind,
    MemoryRecord,
    MemoryType,
    MemoryVerdict,
    Message,
    PendingItem,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    archive_text,
    extract_memories,
    guard_memory_ops,
)


def _user(mid: str, text: str) -> Message:
    return Message(mid, Role.USER, (TextPart(text),))


def _assistant(mid: str, text: str) -> Message:
    return Message(mid, Role.ASSISTANT, (TextPart(text),))


CONVERSATION = [
    _user("u1", "Hi! My name is Dana Whitfield. I'm the platform lead at Northwind Traders."),
    _assistant("a1", "Nice to meet you, Dana. I prefer to start with the failing tests."),
    _user("u2", "Sure. I prefer tabs over spaces, and please always run the linter first."),
    Message("a2", Role.ASSISTANT, (ToolUsePart("t1", "bash", '{"cmd": "ruff check ."}'),)),
    Message("t1r", Role.USER, (ToolResultPart("t1", "I prefer nothing: 3 errors"),)),
    _user(
        "u3",
        "We decided to move the ledger to Postgres because SQLite locks under load. "
        "The ledger lives in a service called ledgerd.",
    ),
    _user("u4", "The cut-over is scheduled for 2026-12-15. I don't like verbose logs."),
    _user("u5", "Let's go with Redis for the cache since it is already deployed."),
]


def _by_type(ops: list[MemoryOp]) -> dict[MemoryType, list[str]]:
    found: dict[MemoryType, list[str]] = {}
    for op in ops:
        assert op.type is not None
        found.setdefault(op.type, []).append(op.text)
    return found


def test_a_working_session_yields_its_durable_statements_with_their_sources() -> None:
    ops = extract_memories(CONVERSATION, [])
    assert all(op.kind is MemoryOpKind.CREATE for op in ops)
    found = _by_type(ops)
    assert found[MemoryType.PROFILE] == [
        "The user's name is Dana Whitfield.",
        "The user is the platform lead at Northwind Traders.",
    ]
    assert found[MemoryType.PREFERENCE] == [  # one fact per memory
        "The user prefers tabs over spaces.",
        "The user wants the assistant to always run the linter first.",
        "The user doesn't like verbose logs.",
    ]
    assert found[MemoryType.DECISION] == [
        "The team decided to move the ledger to Postgres because SQLite locks under load.",
        "The team will go with Redis for the cache since it is already deployed.",
    ]
    assert found[MemoryType.ENTITY] == ["The ledger lives in a service called ledgerd."]
    assert found[MemoryType.EVENT] == ["The cut-over is scheduled for 2026-12-15."]
    sources = {op.text: op.source_message_ids for op in ops}
    assert sources["The user's name is Dana Whitfield."] == ("u1",)
    assert sources["The user doesn't like verbose logs."] == ("u4",)
    decision = next(op for op in ops if op.type is MemoryType.DECISION)
    assert decision.fields["reason"] == "SQLite locks under load"
    event = next(op for op in ops if op.type is MemoryType.EVENT)
    assert event.event_time == "2026-12-15"
    entity = next(op for op in ops if op.type is MemoryType.ENTITY)
    assert entity.fields["name"] == "ledgerd"
    # the assistant's "I prefer" and a tool output are not the user's preferences
    assert not any("failing tests" in op.text or "nothing" in op.text for op in ops)


def test_questions_hypotheticals_requests_and_negations_are_not_memories() -> None:
    messages = [
        _user("q1", "Do I prefer tabs? What is my name again?"),
        _user("q2", "If I preferred Go, would we rewrite the ledger?"),
        _user("q3", "Maybe I prefer spaces, not sure yet."),
        _user("q4", "I don't prefer long functions, but whatever works."),
        _user("q5", "I'd like you to fix the flaky test. I would like a summary."),
        _user("q9", "Okay, never mind. Thanks, that's all for now."),
        _user("q6", "Should we decide to use Kafka because it scales?"),
        _user("q7", "Suppose we decided to drop Redis because of cost."),
        _user("q8", "The deploy happened yesterday."),  # relative, no timestamp: left
    ]
    assert extract_memories(messages, []) == []


def test_relative_dates_become_absolute_only_with_a_message_timestamp() -> None:
    stamped = [_user("s1", "[2026-11-30 09:12] We shipped v2 of the API yesterday.")]
    ops = extract_memories(stamped, [])
    assert [(op.type, op.text, op.event_time) for op in ops] == [
        (
            MemoryType.EVENT,
            "The user and others shipped v2 of the API on 2026-11-29.",
            "2026-11-29",
        )
    ]
    by_mapping = extract_memories(
        [_user("s2", "The outage happened 2 days ago.")], [], message_dates={"s2": "2026-12-01"}
    )
    assert [op.event_time for op in by_mapping] == ["2026-11-29"]
    spelled = extract_memories([_user("s3", "We launched on March 5, 2026.")], [])
    assert [op.event_time for op in spelled] == ["2026-03-05"]


def test_a_statement_about_a_remembered_subject_updates_it() -> None:
    existing = [
        MemoryRecord(
            "mem_pref",
            MemoryType.PREFERENCE,
            "The user prefers tabs over spaces.",
            {"subject": "tabs over spaces"},
        ),
        MemoryRecord(
            "mem_cache", MemoryType.DECISION, "The team will use Memcached for the cache."
        ),
    ]
    later = [_user("v1", "Actually, I prefer spaces over tabs now.")]
    ops = extract_memories(later, existing)
    assert [(op.kind, op.target_ids, op.text) for op in ops] == [
        (MemoryOpKind.UPDATE, ("mem_pref",), "The user prefers spaces over tabs.")
    ]
    plan = guard_memory_ops(ops, existing, later[0].text())
    assert [d.verdict for d in plan.decisions] == [MemoryVerdict.ACCEPTED]
    # saying it again changes nothing
    again = [_user("v2", "I prefer tabs over spaces.")]
    assert extract_memories(again, existing[:1]) == []


def test_a_changed_name_retires_the_old_memory_with_the_statement_as_reason() -> None:
    existing = [
        MemoryRecord(
            "mem_cache",
            MemoryType.DECISION,
            "The team will go with Memcached for the cache since it is cheap.",
            {"subject": "Memcached for the cache"},
        )
    ]
    later = [
        _user("w1", "Memcached kept evicting keys from the cache."),
        _user("w2", "Let's go with Redis for the cache since it is already deployed."),
    ]
    ops = extract_memories(later, existing)
    assert [op.kind for op in ops] == [MemoryOpKind.RETIRE, MemoryOpKind.CREATE]
    assert ops[0].target_ids == ("mem_cache",)
    assert "Redis for the cache" in ops[0].reason
    plan = guard_memory_ops(ops, existing, archive_text(later))
    assert [d.verdict for d in plan.decisions] == [MemoryVerdict.ACCEPTED] * 2
    # an archive that never mentions the old choice does not retire it: both are kept
    unrelated = [later[1]]
    assert [op.kind for op in extract_memories(unrelated, existing)] == [MemoryOpKind.CREATE]


def test_within_one_archive_the_last_statement_about_a_subject_wins() -> None:
    messages = [
        _user("x1", "I prefer dark mode in the editor."),
        _user("x2", "Hmm. I prefer light mode in the editor."),
    ]
    ops = extract_memories(messages, [])
    assert [(op.text, op.source_message_ids) for op in ops] == [
        ("The user prefers light mode in the editor.", ("x1", "x2"))
    ]


def test_pending_items_are_offered_with_the_rules_that_need_no_speaker() -> None:
    pending = [
        PendingItem(KEY_FACTS, "Decided to shard the ledger by tenant because of hot rows.", "k"),
        PendingItem(KEY_FACTS, "I prefer nothing here (not a user statement).", "k"),
    ]
    ops = extract_memories([], [], pending)
    assert [(op.type, op.source_message_ids) for op in ops] == [(MemoryType.DECISION, ())]
    assert ops[0].fields["reason"] == "of hot rows"


def test_the_issue_conversation_keeps_identity_preference_and_decision_apart() -> None:
    """The seven turns of issue 35: one fact per memory, in the third person, the decision
    with its reason and who agreed."""
    turns = [
        _user("d1", "I prefer tabs over spaces, and my name is Dana Whitfield."),
        _assistant("d2", "Nice to meet you, Dana. What are we building?"),
        _user("d3", "A ledger for the shop's double-entry books."),
        _assistant("d4", "Which database should the ledger use?"),
        _user(
            "d5", "We decided to use PostgreSQL 16 for the ledger because of logical replication."
        ),
        _assistant("d6", "Good, let's go with that."),
        _user("d7", "Thanks."),
    ]
    ops = extract_memories(turns, [])
    assert [(op.type, op.text) for op in ops] == [
        (MemoryType.PREFERENCE, "The user prefers tabs over spaces."),
        (MemoryType.PROFILE, "The user's name is Dana Whitfield."),
        (
            MemoryType.DECISION,
            "The team decided to use PostgreSQL 16 for the ledger because of logical replication.",
        ),
    ]
    decision = ops[2]
    assert decision.fields["reason"] == "of logical replication"
    assert decision.fields["decided_by"] == "user" and decision.fields["agreed_by"] == "assistant"
    assert decision.source_message_ids == ("d5", "d6")


def test_an_assistant_proposal_the_user_accepts_is_a_decision_a_refused_one_is_not() -> None:
    accepted = [
        _assistant("p1", "The validators changed. I suggest we pin pydantic to 2.6 for now."),
        _user("p2", "Agreed, pin it."),
    ]
    ops = extract_memories(accepted, [])
    assert [(op.type, op.source_message_ids) for op in ops] == [(MemoryType.DECISION, ("p1", "p2"))]
    assert "pin pydantic to 2.6" in ops[0].text and ops[0].fields["agreed_by"] == "user"
    refused = [accepted[0], _user("p3", "No, let's not pin anything yet.")]
    assert extract_memories(refused, []) == []
    picked = [
        _assistant("o1", "Should we store the uploads on local disk or in object storage?"),
        _user("o2", "Object storage, since we'll run several replicas."),
    ]
    (choice,) = extract_memories(picked, [])
    assert choice.type is MemoryType.DECISION and choice.fields["decision"] == "Object storage"
    assert choice.fields["reason"] == "the team will run several replicas"


def test_times_are_resolved_against_the_message_date_with_their_precision() -> None:
    dated = {
        "e1": "My grandmother passed away on Saturday.",  # past: the Saturday before
        "e2": "The funeral is next Tuesday in Galway.",  # the Tuesday of next week
        "e3": "I started learning the cello in July.",  # past month: this year's
        "e4": "We're expecting our first baby in March.",  # coming month: next year's
        "e5": "I went hiking in the Dolomites last summer.",
        "e6": "We adopted a rescue dog two weeks ago.",
    }
    messages = [_user(mid, text) for mid, text in dated.items()]
    ops = extract_memories(messages, [], message_dates=dict.fromkeys(dated, "2026-08-04"))
    events = {
        op.source_message_ids[0]: (op.event_time, op.fields["when"])
        for op in ops
        if op.type is MemoryType.EVENT
    }
    assert events == {
        "e1": ("2026-08-01", "2026-08-01"),
        "e2": ("2026-08-11", "2026-08-11"),
        "e3": ("2026-07-01", "2026-07"),
        "e4": ("2027-03-01", "2027-03"),
        "e5": ("2025-06-01", "2025"),
        "e6": ("2026-07-21", "2026-07-21"),
    }
    grandmother = next(op for op in ops if op.source_message_ids == ("e1",))
    assert grandmother.text == "The user's grandmother passed away on 2026-08-01."
    # without a date for its message a relative time makes no event
    assert extract_memories([_user("e7", "The deploy happened yesterday.")], []) == []


def test_named_people_pets_and_things_are_entities_and_later_pronouns_refer_to_them() -> None:
    messages = [
        _user("n1", "My sister Laura lives in Toronto with her husband Mark."),
        _user("n2", "We have two cats, Miso and Tofu."),
        _user("n3", "The payments service talks to Stripe through a wrapper called paygate."),
        _user("n4", "My dog Biscuit is a beagle. He is terrified of thunderstorms."),
    ]
    texts = [op.text for op in extract_memories(messages, []) if op.type is MemoryType.ENTITY]
    assert texts == [
        "The user's sister Laura lives in Toronto with her husband Mark.",
        "Mark is Laura's husband.",
        "Miso is the user's cat.",
        "Tofu is the user's cat.",
        "The payments service talks to Stripe through a wrapper called paygate.",
        "The user's dog Biscuit is a beagle.",
        "Biscuit is terrified of thunderstorms.",
    ]


def test_a_day_without_a_year_is_the_nearest_one_in_the_sentences_direction() -> None:
    said = {
        "y1": ("I'll be back on January 6.", "2026-12-21", "2027-01-06"),  # coming: next year
        "y2": ("We met on December 28 at the party.", "2026-01-03", "2025-12-28"),  # past
        "y3": ("I've got a job interview on Thursday.", "2026-12-08", "2026-12-10"),  # present
    }
    for mid, (text, date, expected) in said.items():
        (op,) = extract_memories([_user(mid, text)], [], message_dates={mid: date})
        assert op.event_time == expected, text
        assert " on on " not in op.text and expected in op.text
