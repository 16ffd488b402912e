"""The offline extraction mechanisms of the sixth round (wm_core): clauses that only appraise,
decisions by one choice-verb lexicon and said as their outcome, one decision per reply that
accepts or picks, an echo as an agreement, the alternative set aside, the assistant's sentence
a short reply takes up; and what each must still refuse. The phrasings here are not those of
the bench splits: each test reads a mechanism, not a sentence it was fitted on."""

from __future__ import annotations

from support.extraction_talk import said as _said
from wm_core import MemoryOp, MemoryType
from wm_core._memory.appraisal import only_appraises, subject_fact


def _decisions(ops: list[MemoryOp]) -> list[MemoryOp]:
    return [op for op in ops if op.type is MemoryType.DECISION]


def test_a_clause_that_only_appraises_states_nothing() -> None:
    for clause in (
        "I'm absolutely knackered tonight",
        "ugh my manager is such a star",
        "The onboarding docs are a total mess honestly",
        "the new office is lovely but it's loud",  # "loud" is no appraisal word: kept
        "I'm allergic",
    ):
        assert only_appraises(clause) is (clause != "the new office is lovely but it's loud")
    # what the predicate says beyond the appraisal keeps the clause
    for clause in ("I'm nervous about the visa interview", "I'm allergic to shellfish",
                   "I'm vegan", "My brother is a pilot"):  # fmt: skip
        assert not only_appraises(clause)
    assert _said("2026-05-02", "U: honestly the standup today was a disaster lol") == []


def test_the_subject_of_an_appraisal_that_names_someone_is_kept() -> None:
    assert subject_fact("Dmitri from legal is a hero") == "Dmitri is from legal"
    assert subject_fact("my aunt Rosa is the best") == "My aunt is named Rosa"
    assert subject_fact("Dmitri is a hero") is None
    ops = _said("2026-05-02", "U: Dmitri from legal is an absolute hero, he sorted the NDA.")
    assert any("Dmitri" in op.text and "legal" in op.text for op in ops)
    assert not any("hero" in op.text for op in ops)


def test_one_lexicon_of_choice_verbs_reads_decisions_in_any_form() -> None:
    ops = _said(
        "2026-05-04",
        "U: we'll be standardising on uv for every python repo",
        "U: The platform team is no longer supporting CentOS 7 because nobody patches it.",
        "U: We met on Tuesday and the board agreed to freeze hiring until Q3.",
    )
    assert [op.fields["decision"] for op in _decisions(ops)] == [
        "standardising on uv for every python repo",
        "no longer supporting CentOS 7",
        "to freeze hiring until Q3",
    ]
    assert "the board agreed" in _decisions(ops)[2].text


def test_a_choice_said_as_its_outcome_is_a_decision_with_its_reason() -> None:
    ops = _said(
        "2026-05-05",
        "U: Caddy it is, the certificates renew themselves",
        "U: Final decision on the mascot: the otter.",
    )
    first, second = _decisions(ops)
    assert first.fields["decision"] == "Caddy"
    assert first.fields["reason"] == "the certificates renew themselves"
    assert second.fields["decision"] == "the mascot: the otter"
    # "that's it" and "it is what it is" choose nothing
    assert _decisions(_said("2026-05-05", "U: That it is.", "U: Well it is what it is.")) == []


def test_putting_a_choice_off_decides_nothing() -> None:
    assert _decisions(_said("2026-05-05", "U: let's not migrate anything yet")) == []
    (kept,) = _decisions(_said("2026-05-05", "U: let's not deploy on a Friday"))
    assert kept.fields["decision"] == "not deploy on a Friday"


def test_a_reply_that_accepts_a_proposal_is_one_decision_with_its_why() -> None:
    ops = _said(
        "2026-05-06",
        "A: My recommendation: move the thumbnails to a CDN and drop the resize endpoint.",
        "U: yep, let's do that. the app server can't keep up anyway.",
    )
    (decision,) = _decisions(ops)
    assert "thumbnails to a CDN" in decision.text and "keep up" in decision.text
    assert decision.fields["agreed_by"] == "user"
    assert decision.source_message_ids == ("m0", "m1")


def test_an_echo_of_the_other_sides_decision_is_an_agreement() -> None:
    ops = _said(
        "2026-05-07",
        "U: we're moving the cron jobs to Nomad since the VM is going away",
        "A: Nomad it is.",
    )
    (decision,) = _decisions(ops)
    assert decision.fields["decided_by"] == "user" and decision.fields["agreed_by"] == "assistant"
    # the user deciding after the assistant's own decision is not an echo
    ops = _said(
        "2026-05-07",
        "A: We'll use Nomad for the cron jobs.",
        "U: We're keeping the billing jobs on the VM though.",
    )
    assert len(_decisions(ops)) == 2


def test_a_decision_in_reply_to_two_alternatives_names_the_one_set_aside() -> None:
    ops = _said(
        "2026-05-08",
        "A: For the docs site we could go with Docusaurus or MkDocs.",
        "U: MkDocs it is, the team writes Python anyway",
    )
    (decision,) = _decisions(ops)
    assert "MkDocs" in decision.text and "Docusaurus" in decision.text


def test_a_short_reply_carries_the_sentence_it_takes_up() -> None:
    ops = _said(
        "2026-05-09",
        "A: The worker restarts every night. You could raise its memory limit to 2 GB.",
        "U: ok, let's raise that limit.",
    )
    (decision,) = _decisions(ops)
    assert "2 GB" in decision.text and decision.source_message_ids == ("m0", "m1")
    # a reply that says it all alone is left as it is, and a question is never the context
    ops = _said(
        "2026-05-09",
        "A: Which broker should the invoices go through?",
        "U: We decided to route invoices through RabbitMQ because it is already deployed.",
    )
    (decision,) = _decisions(ops)
    assert "broker" not in decision.text


def test_thanks_and_habits_are_no_dated_events() -> None:
    assert _said("2026-05-10", "U: thanks so much for the help with the slides!") == []
    ops = _said("2026-05-10", "U: I've joined a choir, rehearsals on monday evenings")
    assert all(op.event_time is None for op in ops)


def test_a_name_and_i_is_one_subject_not_two_clauses() -> None:
    ops = _said("2026-05-11", "U: In the end, Keiko and I opted for Tauri over Electron.")
    (decision,) = _decisions(ops)
    assert "Keiko" in decision.text and "Tauri" in decision.text
    (event,) = _said("2026-05-11", "U: Yesterday, Marco and I hiked up Vesuvius.")
    assert "Marco" in event.text and event.event_time == "2026-05-10"


def test_a_refusal_said_with_going_to_and_a_rule_set_in_place_are_decisions() -> None:
    ops = _said(
        "2026-05-12",
        "U: We're not going to ship the Windows build this quarter, nobody has signed the cert.",
        "U: We've introduced a two-reviewer rule for the payments repo.",
    )
    refused, rule = _decisions(ops)
    assert refused.fields["decision"].startswith("not ship the Windows build this quarter")
    assert rule.fields["decision"] == "a two-reviewer rule for the payments repo"
    # the same verbs as a request, or about the user alone, decide nothing
    assert (
        _decisions(_said("2026-05-12", "U: Set up the repo: Go 1.22, make, golangci-lint.")) == []
    )
    assert _decisions(_said("2026-05-12", "U: I introduced my parents to sushi.")) == []


def test_a_choice_not_made_states_nothing() -> None:
    ops = _said("2026-05-13", "U: Hmm, we still haven't settled on a name for the bot yet.")
    assert ops == []
    (decision,) = _decisions(_said("2026-05-13", "U: hmm no, let's rename the bot to Pip instead"))
    assert decision.fields["decision"] == "rename the bot to Pip"


def test_a_topic_before_the_decision_stays_in_it() -> None:
    (decision,) = _decisions(
        _said("2026-05-14", "U: for the status page we went with Upptime since it's free")
    )
    assert "status page" in decision.text and decision.fields["reason"] == "it's free"
    # "picked up" is fetched, not chosen
    assert _decisions(_said("2026-05-14", "U: We picked up the new sofa from IKEA.")) == []


def test_a_bare_question_of_two_alternatives_offers_a_choice_but_a_habit_picks_none() -> None:
    ops = _said("2026-05-15", "A: Tabs or spaces for it?", "U: spaces")
    (decision,) = _decisions(ops)
    assert "spaces" in decision.text and "Tabs" in decision.text
    ops = _said("2026-05-15", "A: Trains or planes?", "U: trains usually, I hate airports")
    assert _decisions(ops) == []


def test_a_reference_with_no_shared_word_takes_the_last_sentence_before_it() -> None:
    ops = _said(
        "2026-05-16",
        "A: Is the cache warmed on deploy?",
        "U: We decided to warm it on deploy because cold starts hurt the p99.",
    )
    (decision,) = _decisions(ops)
    assert decision.text.endswith("(the assistant had said: Is the cache warmed on deploy?).")


def test_an_answer_taken_back_is_no_memory() -> None:
    ops = _said("2026-05-16", "A: What kind of music do you play?", "U: jazz mostly, never mind")
    assert ops == []


def test_an_accepted_proposal_keeps_the_sentence_the_reply_refers_to() -> None:
    ops = _said(
        "2026-05-17",
        "A: You have both Jest and Vitest installed, and they clash. I suggest keeping Vitest.",
        "U: agreed, drop both and keep vitest only",
    )
    (decision,) = _decisions(ops)
    assert "Jest" in decision.text and "Vitest" in decision.text


def test_what_is_booked_is_coming_not_past() -> None:
    ops = _said("2026-05-18", "U: I've signed up for the Berlin half marathon in April!")
    assert [op.event_time for op in ops if op.type is MemoryType.EVENT] == ["2027-04-01"]


def test_a_demonym_is_no_name_and_a_name_may_trail_a_filler() -> None:
    ops = _said("2026-05-19", "U: I'm Greek, and I work as a sound engineer.")
    assert not any(op.fields.get("name") == "Greek" for op in ops)
    ops = _said("2026-05-19", "U: I'm Tomasz btw, I run the infra team at Pollen.")
    assert "The user's name is Tomasz." in [op.text for op in ops]


def test_more_forms_of_a_choice_are_decisions() -> None:
    ops = _said(
        "2026-05-20",
        "U: We've gone with Fly.io for the preview environments.",
        "U: I'll switch to Neovim for this project, VS Code is too slow on the laptop.",
        "U: Our new policy is one on-call week per person per quarter.",
    )
    assert [op.fields["decision"] for op in _decisions(ops)] == [
        "Fly.io for the preview environments",
        "switch to Neovim for this project, VS Code is too slow on the laptop",
        "one on-call week per person per quarter",
    ]
    # what the assistant says it will do is no choice of the user's
    assert _decisions(_said("2026-05-20", "A: I'll use the existing retry helper.")) == []


def test_agreeing_to_the_assistants_own_decision_is_no_second_decision() -> None:
    ops = _said("2026-05-21", "A: Let's pin the base image to a digest.", "U: fine by me")
    (decision,) = _decisions(ops)
    assert decision.fields["decided_by"] == "assistant" and decision.fields["agreed_by"] == "user"


def test_a_sentence_that_recommends_is_a_proposal_whatever_its_opening() -> None:
    for proposal, content in (
        ("A: The easiest fix is to cache the token for an hour.", "cache the token for an hour"),
        ("A: Consider moving the images to a bucket.", "moving the images to a bucket"),
        ("A: My suggestion would be to split the job in two.", "split the job in two"),
    ):
        (decision,) = _decisions(_said("2026-05-22", proposal, "U: 👍 sounds good"))
        assert decision.fields["decision"] == content
    # an acknowledgement accepts nothing
    ops = _said("2026-05-22", "A: The easiest fix is to cache the token.", "U: ok thanks")
    assert _decisions(ops) == []


def test_more_subjects_reasons_and_heads_of_a_decision() -> None:
    ops = _said(
        "2026-05-23",
        "U: We're standardising on Bazel as the monorepo outgrew Make.",
        "U: Leadership decided the office closes on Fridays.",
        "U: My husband and I chose Kyoto for the anniversary trip.",
        "U: Settled: the retro moves to Thursdays.",
    )
    bazel, office, kyoto, retro = _decisions(ops)
    assert bazel.fields["reason"] == "the monorepo outgrew Make"
    assert office.text.startswith("Leadership decided")
    assert kyoto.text == "The user's husband and the user chose Kyoto for the anniversary trip."
    assert retro.fields["decision"] == "the retro moves to Thursdays"
    # "as" before no subject is no reason, and a name alone deciding is a fact of their life
    (saas,) = _decisions(_said("2026-05-23", "U: We're adopting Grafana as a service."))
    assert "reason" not in saas.fields
    assert _decisions(_said("2026-05-23", "U: Sarah decided to quit her job.")) == []


def test_a_decision_after_so_takes_the_clause_before_as_its_reason() -> None:
    ops = _said(
        "2026-05-24", "U: The nightly build takes two hours, so we're switching to Buildkite."
    )
    (decision,) = ops
    assert decision.type is MemoryType.DECISION
    assert decision.fields["reason"] == "the nightly build takes two hours"
