"""A user's change of a fact stated before ("my name is now …", "I moved to …", "I don't
prefer A any more, I now prefer B", "we switched from A to B"): the offline extractor reads the
new value, and supersession links it to the older memory of the same owner and kind (wm_core)."""

from __future__ import annotations

from wm_core import (
    MemoryOp,
    MemoryOpKind,
    MemoryRecord,
    MemoryType,
    Message,
    Role,
    TextPart,
    archive_text,
    extract_memories,
    guard_memory_ops,
    supersessions,
)

NAME = MemoryRecord(
    "mem_name", MemoryType.PROFILE, "The user's name is Dana Whitfield.",
    {"subject": "name", "name": "Dana Whitfield"},
)  # fmt: skip
HOME = MemoryRecord(
    "mem_home", MemoryType.PROFILE, "The user lives in Berlin.", {"subject": "home"}
)
WORK = MemoryRecord(
    "mem_work", MemoryType.PROFILE, "The user works at Acme.",
    {"subject": "organization", "organization": "Acme"},
)  # fmt: skip
TABS = MemoryRecord(
    "mem_tabs", MemoryType.PREFERENCE, "The user prefers tabs over spaces.",
    {"subject": "tabs over spaces"},
)  # fmt: skip
VIM = MemoryRecord("mem_vim", MemoryType.PREFERENCE, "The user likes vim.", {"subject": "vim"})
CI = MemoryRecord(
    "mem_ci", MemoryType.DECISION, "The team decided to use Jenkins for CI.",
    {"subject": "Jenkins for CI", "decision": "to use Jenkins for CI"},
)  # fmt: skip


def _said(*texts: str) -> list[Message]:
    return [Message(f"m{i}", Role.USER, (TextPart(t),)) for i, t in enumerate(texts, 1)]


def _superseding(
    existing: list[MemoryRecord], *texts: str, dates: dict[str, str] | None = None
) -> dict[str, str]:
    """What a commit of ``texts`` would store as superseding: new text → the id it replaces
    (the extractor's ops, through the guards, then ``supersessions``, as the server runs them)."""
    messages = _said(*texts)
    ops = extract_memories(messages, existing, message_dates=dates)
    plan = guard_memory_ops(ops, existing, archive_text(messages))
    found = supersessions(plan.ops, existing)
    return {plan.ops[i].text: ids[0] for i, ids in found.replacing.items()}


def test_a_new_name_replaces_the_old_one() -> None:
    for said in (
        "My name is now Dana Brooks.",
        "I changed my name to Dana Brooks.",
        "I've legally changed my name to Dana Brooks.",
        "My new name is Dana Brooks.",
        "I'm now called Dana Brooks.",
        "I got married, so my name is now Dana Brooks.",
    ):
        assert _superseding([NAME], said) == {"The user's name is Dana Brooks.": "mem_name"}, said
    ops = extract_memories(_said("My name is now Dana Brooks."), [])
    assert [(op.text, dict(op.fields)) for op in ops] == [
        ("The user's name is Dana Brooks.", {"name": "Dana Brooks", "subject": "name"})
    ]


def test_a_move_replaces_where_the_user_lives() -> None:
    for said, text in (
        ("I've moved to Lisbon.", "The user has moved to Lisbon."),
        ("I relocated to Lisbon.", "The user relocated to Lisbon."),
        ("I now live in Lisbon.", "The user now lives in Lisbon."),
    ):
        assert _superseding([HOME], said) == {text: "mem_home"}, said
    # Dated, the move is an event too; where the user lives now is the profile fact.
    dated = extract_memories(
        _said("I moved to Lisbon last month."), [HOME], message_dates={"m1": "2026-03-16"}
    )
    assert [(op.type, op.text) for op in dated if op.kind is MemoryOpKind.CREATE] == [
        (MemoryType.EVENT, "The user moved to Lisbon in 2026-02."),
        (MemoryType.PROFILE, "The user lives in Lisbon."),
    ]
    assert _superseding([HOME], "I moved to Lisbon last month.", dates={"m1": "2026-03-16"}) == {
        "The user lives in Lisbon.": "mem_home"
    }
    # Moving a meeting is no move of the user.
    assert _superseding([HOME], "I moved the standup to Friday.") == {}


def test_a_new_employer_replaces_the_old_one() -> None:
    assert _superseding([WORK], "I now work at Globex.") == {
        "The user now works at Globex.": "mem_work"
    }
    assert _superseding([WORK], "I've worked at Google before.") == {}  # a past one: no change


def test_a_preference_given_up_for_another_replaces_it() -> None:
    assert _superseding([TABS], "I don't prefer tabs any more, I now prefer 4-space indents.") == {
        "The user now prefers 4-space indents.": "mem_tabs"
    }
    assert _superseding([VIM], "I don't like vim anymore; I prefer Helix now.") == {
        "The user prefers Helix.": "mem_vim"
    }
    # Given up with nothing new: that is the current preference about the thing.
    assert _superseding([VIM], "I no longer like vim.") == {
        "The user no longer likes vim.": "mem_vim"
    }
    # One memory for the change, not one for the giving up as well.
    ops = extract_memories(_said("I don't prefer tabs any more, I now prefer 4-space indents."), [])
    assert [(op.text, op.fields.get("replaces")) for op in ops] == [
        ("The user now prefers 4-space indents.", "tabs")
    ]


def test_a_switch_replaces_the_decision_it_names_for_the_same_purpose() -> None:
    assert _superseding([CI], "We switched from Jenkins to GitHub Actions.") == {
        "The team switched from Jenkins to GitHub Actions.": "mem_ci"
    }
    # "replaced" is a choice verb too (round seven): the change names what it replaces
    assert _superseding([CI], "We replaced Jenkins with Buildkite for CI.") == {
        "The team replaced Jenkins with Buildkite for CI.": "mem_ci"
    }
    assert _superseding([CI], "We decided to replace Jenkins with Buildkite for CI.") == {
        "The team decided to replace Jenkins with Buildkite for CI.": "mem_ci"
    }
    # The same tool left for another purpose is another decision.
    assert _superseding([CI], "We switched from Jenkins to Buildkite for the mobile apps.") == {}
    # Within one conversation the switch is the decision that holds.
    ops = extract_memories(
        _said("We decided to use Jenkins for CI.", "We switched from Jenkins to GitHub Actions."),
        [],
    )
    assert [op.text for op in ops] == ["The team switched from Jenkins to GitHub Actions."]


def test_a_models_fact_naming_what_it_replaces_supersedes_it() -> None:
    create = MemoryOp(
        MemoryOpKind.CREATE, MemoryType.DECISION, "The team moved CI to GitHub Actions.",
        {"subject": "GitHub Actions for CI", "replaces": "Jenkins"},
    )  # fmt: skip
    assert dict(supersessions([create], [CI]).replacing) == {0: ("mem_ci",)}
    other = MemoryOp(
        MemoryOpKind.CREATE, MemoryType.DECISION, "The team uses Buildkite for mobile builds.",
        {"subject": "Buildkite for mobile builds", "replaces": "Jenkins"},
    )  # fmt: skip
    assert dict(supersessions([other], [CI]).replacing) == {}
