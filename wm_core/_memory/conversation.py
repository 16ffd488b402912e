"""The turn-level reading of a conversation: facts that need more than one message.

Why it exists: a decision is often made across turns ("I suggest we pin pydantic" — "Agreed,
pin it"; "Should we use local disk or object storage?" — "Object storage, since we run
replicas"), and "who agreed" is the next turn's "Good, let's go with that" or a later "Marta
signed off on it" (what a message proposes, whether a reply agrees, who signed off: the
readers of ``agreements``); a short answer to a question about something named ("What queue
does ferry use?" — "NATS") is a fact about it (the readers of a reply to a question are
``replies``); "I don't prefer tabs any more, I now prefer spaces" is one new preference that
replaces the one about tabs (``_fold_given_up``). This module walks the turns in order, reads
each clause with ``rules`` and adds those agreements and choices. A clause the rules make
nothing of (and do not say states nothing) is read by ``disclosure``, phrasing-agnostic; an
assistant's check the user confirms ("So to confirm, …?", "your team uses FastAPI, is that
right?" — "correct") is read by the clause rules as the user's own words
(``_confirmed_facts``), else by ``disclosure``; what a reply that agrees to a decision adds
goes on from that decision ("yep do that, we can't afford bigger instances"). A sentence
typed in lower case inside another ("quick one. we run k8s") is a clause of its own
(``_clauses``), and the "I" chat leaves out is put back (``speech.with_subject``).

One fact is one memory across turns, too: a reply that accepts or picks is one decision (a
later decision clause in it goes on from it); a short repeat of the other side's decision
("RLS it is.") is an agreement (``echoes``); a user's decision in reply to two alternatives
names the one set aside (``with_set_aside``), and one that is short or refers back ("let's add
that index") carries the assistant's sentence it takes up (``in_context``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

from wm_core._document.sentences import sentences, stamp_date
from wm_core._memory.agreements import (
    AGREE,
    HOW_TO,
    TAKES_UP,
    adds_to_agreed,
    agrees,
    echoes,
    in_context,
    proposal_in,
    signer_in,
    so_reason,
    with_agreed_by,
    with_reason,
    with_set_aside,
)
from wm_core._memory.appraisal import subject_fact
from wm_core._memory.choices import options_in
from wm_core._memory.corrections import corrected, correction, instead_of, retraction
from wm_core._memory.disclosure import (
    Weights,
    asked,
    confirmed_check,
    disclosed,
    no_memory,
    pieces,
)
from wm_core._memory.model import MemoryType, memory_key
from wm_core._memory.names import Talk, note_question
from wm_core._memory.replies import (
    asked_about_named,
    asked_about_user,
    bare_answer,
    picked_option,
    should_answer,
    yes_to,
)
from wm_core._memory.rules import Fact, classify, states_nothing
from wm_core._memory.speech import (
    LEAD,
    TENTATIVE,
    clauses,
    clean,
    normalized,
    premise,
    statement,
    third_person,
    with_subject,
)
from wm_core._memory.subjects import REPLACES
from wm_core._messages import Message, Role, TextPart


def _fold_given_up(found: Sequence[Fact]) -> list[Fact]:
    """A preference given up ("I don't prefer tabs any more": its ``replaces`` is its own
    subject) and followed in its message by a new one ("I now prefer spaces"): the new one
    replaces the thing given up, and the giving up is no memory of its own."""
    kept: list[Fact] = []
    for fact in found:
        before = kept[-1] if kept else None
        if (
            before is not None
            and before.type is MemoryType.PREFERENCE is fact.type
            and before.fields.get(REPLACES) == before.subject
            and REPLACES not in fact.fields
            and before.message_ids == fact.message_ids
        ):
            kept[-1] = replace(fact, fields={**fact.fields, REPLACES: before.subject})
            continue
        kept.append(fact)
    return kept


# A clause that states nothing alone but goes on from the fact before it in its sentence:
# "I never use ORMs, I write raw SQL", "RabbitMQ won, Kafka is overkill for our volume".
_MAX_CONTINUATION_WORDS: Final = 14


def _goes_on(fact: Fact, clause: str) -> bool:
    """Whether ``clause`` may go on from ``fact`` (see ``_continued``): not from an entity
    (what follows one is its own fact or none: "he used to be an instructor"), nor a clause
    long enough to state a fact of its own."""
    return len(clause.split()) <= _MAX_CONTINUATION_WORDS and fact.type is not MemoryType.ENTITY


def _continued(fact: Fact, clause: str, role: Role) -> Fact:
    """``fact`` with the clause after it in its sentence added to its text, when that clause
    states nothing alone (it says why, how or what instead; see ``_MAX_CONTINUATION_WORDS``).
    Why: one sentence often states one fact over two clauses, and a memory that keeps only
    the first half loses the "instead" or the "because" a reader needs."""
    if len(clause.split()) > _MAX_CONTINUATION_WORDS or fact.type is MemoryType.ENTITY:
        return fact
    more = third_person(clean(clause), role, sentence=False, team=fact.type is MemoryType.DECISION)
    return replace(fact, text=f"{fact.text}; {more}")


def _same_event(dated: Fact, facts: Sequence[Fact]) -> bool:
    """Whether a clause's only fact is an undated event going on from the dated event its
    sentence stated just before (what happened then, told in a second clause)."""
    return (
        dated.type is MemoryType.EVENT
        and dated.when is not None
        and len(facts) == 1
        and facts[0].type is MemoryType.EVENT
        and facts[0].when is None
    )


def _dates_event(undated: Fact, facts: Sequence[Fact]) -> bool:
    """Whether a clause's only fact is a dated event going on from the undated event its
    sentence stated just before (the same event, then when it is)."""
    return (
        undated.type is MemoryType.EVENT
        and undated.when is None
        and len(facts) == 1
        and facts[0].type is MemoryType.EVENT
        and facts[0].when is not None
    )


def _disclosed(
    text: str,
    sentence: str,
    message: Message,
    base: str | None,
    question: str,
    talk: Talk,
    *,
    confirmed: bool = False,
    weights: Weights | None = None,
) -> list[Fact]:
    """The facts a clause no rule recognised states, read by ``disclosure``: the user's, or
    an assistant's check the user ``confirmed`` (a leading "he" or "she" is the person named
    last, "it" the thing)."""
    if message.role is not Role.USER and not confirmed:
        return []  # what the assistant says alone is no fact about the user
    found: list[Fact] = []
    if states_nothing(text, sentence):
        return found
    for piece in pieces(text):
        pronoun = re.match(r"^(?:(?P<person>he|she)|it)(?='s\b|\s)", piece, re.IGNORECASE)
        if pronoun and talk.last_name and (pronoun.group("person") is None) is not talk.last_person:
            piece = talk.last_name + piece[pronoun.end() :]
        read = disclosed(
            piece, message.role, base, question=question, weights=weights, confirmed=confirmed
        )
        question = ""
        if read is None:
            continue
        kind, said, when = read
        fields = {"decided_by": message.role.value} if kind is MemoryType.DECISION else {}
        if when is not None:
            fields["when"] = when.label
        found.append(Fact(kind, said, memory_key(said), sentence, (message.id,), fields, when))
    return found


# The assistant's "you" is the user's "I": "your team uses FastAPI" confirmed is "my team uses
# FastAPI" said by the user.
_SECOND_PERSON: Final = (
    (re.compile(r"\byou're\b", re.I), "I'm"),
    (re.compile(r"\byou've\b", re.I), "I've"),
    (re.compile(r"\byou'll\b", re.I), "I'll"),
    (re.compile(r"\byou'd\b", re.I), "I'd"),
    (re.compile(r"\byou are\b", re.I), "I am"),
    (re.compile(r"\byou were\b", re.I), "I was"),
    (re.compile(r"\byours\b", re.I), "mine"),
    (re.compile(r"\byour\b", re.I), "my"),
    (re.compile(r"\byou\b", re.I), "I"),
)


def _confirmed_facts(check: str, reply: Message, base: str | None, talk: Talk) -> list[Fact]:
    """What an assistant's check the user confirmed states, read by the clause rules as the
    user's own words (``_SECOND_PERSON``; the check's lead-in before "it looks like" dropped)."""
    said = re.sub(r"^.*?\b(?:looks like|seems like|sounds like|understand that|see that)\s+",
                  "", check, flags=re.I)  # fmt: skip
    for pattern, mine in _SECOND_PERSON:
        said = pattern.sub(mine, said)
    found: list[Fact] = []
    for clause in _clauses(said):
        text = LEAD.sub("", clause).strip()
        if text:
            found.extend(classify(text, said, Role.USER, base, talk))
    return [replace(f, message_ids=(reply.id,)) for f in found]


def _clauses(said: str) -> list[str]:
    """The clauses of a statement, a sentence typed in lower case inside it ("quick one. we run
    k8s", which the sentence splitter keeps as one) cut off as a clause of its own; one that
    asks or supposes states nothing (``statement``)."""
    return [
        premise(piece) or piece
        for clause in clauses(said)
        for piece in pieces(clause)
        if statement(piece)
    ]


def conversation_facts(
    messages: Sequence[Message],
    message_dates: Mapping[str, str] | None = None,
    weights: Weights | None = None,
) -> list[Fact]:
    """Every fact the messages state, in order; see the module docstring.

    ``message_dates`` (message id → ISO date of the message) makes relative times absolute;
    a line that starts with a timestamp ("[2026-03-05 09:00] …") uses that date instead.
    ``weights`` are the clause classifier's (``disclosure``; None: the generated ones).
    """
    dates = message_dates or {}
    messages = [
        Message(m.id, m.role, (TextPart(normalized(m.text())),), m.estimated_tokens)
        for m in messages
    ]
    talk = Talk()
    found: list[Fact] = []
    previous: Message | None = None
    recent: list[Message] = []  # the turns before, for the alternatives a reply picks from
    last_decision: int | None = None  # index in found of the latest decision, for agreements
    for message in messages:
        if message.role not in (Role.USER, Role.ASSISTANT) or not message.text().strip():
            continue
        if message.role is Role.ASSISTANT:
            note_question(message.text(), talk)
        agreed = agrees(message.text())
        if agreed and last_decision is not None and previous is not None:
            fact = found[last_decision]
            if fact.fields.get("decided_by") != message.role.value:
                found[last_decision] = with_agreed_by(fact, message.role.value, message.id)
        # the first sentence picked an option or answered "Should we …?": the decision it
        # states is that one, not a second one read from its clauses
        decided_first = False
        start = len(found)
        turn_decision: int | None = None  # the decision the turn-level reading made here
        offered = options_in(previous.text()) if previous is not None else None
        picked = picked_option(recent[-2:], message) if message.role is Role.USER else None
        if picked is not None:
            found.append(picked)
            last_decision = turn_decision = len(found) - 1
            decided_first = True
        elif message.role is Role.USER and previous is not None and previous.role is Role.ASSISTANT:
            # an agreement to the assistant's own decision ("Let's cap the cache at 512 MB." —
            # "fine by me") already marked it agreed: the proposal is that one, not a second
            decided_there = (
                last_decision is not None
                and previous.id in found[last_decision].message_ids
                and found[last_decision].fields.get("decided_by") == previous.role.value
            )
            how_to = len(recent) > 1 and bool(HOW_TO.match(recent[-2].text().strip()))
            proposal = (
                proposal_in(previous, message.text(), how_to)
                if agreed and not decided_there
                else None
            )
            if proposal is not None:
                text = f"The user agreed to the assistant's proposal: {proposal}"
                fields = {"decision": proposal, "decided_by": "assistant", "agreed_by": "user"}
                found.append(Fact(MemoryType.DECISION, text, proposal, proposal,
                                  (previous.id, message.id), fields))  # fmt: skip
                last_decision = turn_decision = len(found) - 1
            question = asked_about_user(previous)
            answer = bare_answer(message, question) if question else None
            about = asked_about_named(previous, talk) if question is None else None
            if about is not None:
                answer = bare_answer(message, *about)
            if answer is not None:
                found.append(answer)
            said_yes = yes_to(previous, message) or should_answer(previous, message)
            if said_yes is not None:
                found.append(said_yes)
                if said_yes.type is MemoryType.DECISION:
                    last_decision = turn_decision = len(found) - 1
                    decided_first = True
        question = ""
        # a fact the turn-level reading took from this reply (an answer, a pick, a "yes")
        # already holds its first sentence: ``disclosure`` starts after it
        answered = bool(found) and message.id in found[-1].message_ids
        if message.role is Role.USER and previous is not None and previous.role is Role.ASSISTANT:
            question = asked(previous)
            check = confirmed_check(previous, message)
            if check is not None and last_decision != len(found) - 1:
                base = dates.get(previous.id)
                confirmed = _confirmed_facts(check, message, base, talk) or _disclosed(
                    check, check, previous, base, "", talk, confirmed=True, weights=weights
                )
                for fact in confirmed:
                    found.append(replace(fact, message_ids=(previous.id, message.id)))
        first_sentence = True
        retracted = ""  # a choice this message took back, for the decision that replaces it
        for line in message.text().split("\n"):
            base = stamp_date(line) or dates.get(message.id)
            for sentence in sentences(line):
                first, decided_first = decided_first, False
                answered = answered and first_sentence
                first_sentence = False
                said = statement(sentence)
                if said is None:
                    continue
                talk.follow_on = re.match(r"^\s*(?:and|also|plus)\b", sentence, re.I) is not None
                stated: int | None = None  # index in found of this sentence's last fact
                told: list[Fact] = []  # the facts ``disclosure`` read from its last clause
                for clause in _clauses(said):
                    fix = correction(clause) if message.role is Role.USER else None
                    fixed = corrected(found, *fix, base) if fix is not None else None
                    if fixed is not None:  # "actually it's the 16th not the 14th"
                        found[:] = fixed
                        continue
                    taken_back = retraction(clause) if message.role is Role.USER else None
                    if taken_back is not None:  # "we said we'd use MySQL but scrap that"
                        retracted = taken_back
                        continue
                    text = LEAD.sub("", clause).strip()
                    if message.role is Role.USER:
                        text = with_subject(text)  # "lost my wallet yesterday"
                    if not text or TENTATIVE.match(text):
                        continue
                    text = subject_fact(text) or text  # "Orla from accounting is a legend"
                    before = len(found)
                    signer = signer_in(text) if last_decision is not None else None
                    if signer is not None and last_decision is not None:
                        found[last_decision] = with_reason(
                            with_agreed_by(found[last_decision], signer, message.id), text,
                            message.role
                        )  # fmt: skip
                    facts = classify(text, sentence, message.role, base, talk)
                    if stated is not None and _same_event(found[stated], facts):
                        # "Two days ago our database failed over and we lost five minutes of
                        # writes": one event, told in two clauses
                        found[stated] = _continued(found[stated], text, message.role)
                        continue
                    if stated is not None and _dates_event(found[stated], facts):
                        # "we booked the trip to Japan!! we fly out on the 2nd of May": the
                        # event, then its date, one memory
                        found[stated] = replace(
                            _continued(found[stated], text, message.role),
                            when=facts[0].when,
                            fields={**found[stated].fields, **facts[0].fields},
                        )
                        continue
                    for fact in facts:
                        if signer is not None and fact.type is not MemoryType.ENTITY:
                            continue  # the sign-off itself is the decision's, not an event
                        if first and fact.type is MemoryType.DECISION:
                            continue  # already read as the pick or the answer
                        if fact.type is MemoryType.DECISION and turn_decision is not None:
                            # "Yes, let's do that, it's the cheapest fix": one decision per
                            # reply that accepted or picked, the rest of it goes on from it
                            found[turn_decision] = _continued(found[turn_decision], text,
                                                              message.role)  # fmt: skip
                            continue
                        if fact.type is MemoryType.DECISION and echoes(
                            found, last_decision, previous, message
                        ):
                            # "Monday the 4th it is." after the user's decision: agreement
                            assert last_decision is not None
                            found[last_decision] = with_agreed_by(found[last_decision],
                                                              message.role.value, message.id)  # fmt: skip
                            continue
                        if (
                            fact.type is MemoryType.DECISION
                            and message.role is Role.ASSISTANT
                            and TAKES_UP.search(text)
                        ):
                            continue  # "Sure, English it is": the user's wish taken up
                        if fact.type is MemoryType.DECISION and offered is not None:
                            fact = with_set_aside(fact, offered)
                        why = so_reason(fact, sentence, text, message.role)
                        if why is not None:
                            # "The API is slow on cold starts, so we're moving it to Cloud
                            # Run": one decision with its reason, not a fact and a decision
                            fact = replace(
                                fact,
                                text=f"{fact.text}, because {why}",
                                fields={**fact.fields, "reason": why},
                            )
                            if stated is not None and found[stated].type is not (
                                MemoryType.DECISION
                            ):
                                found[stated] = replace(fact, message_ids=(message.id,))
                                last_decision = stated
                                continue
                        if fact.type is MemoryType.DECISION and retracted:
                            fact, retracted = instead_of(fact, retracted, message.role), ""
                        found.append(Fact(fact.type, fact.text, fact.subject, fact.source,
                                          (message.id,), fact.fields, fact.when))  # fmt: skip
                        if fact.type is MemoryType.DECISION:
                            last_decision = len(found) - 1
                    if len(found) > before:
                        stated, told = before, []
                    elif (
                        stated is not None
                        and signer is None
                        and not told
                        # a name goes on from nothing: "I'm Tomasz btw, I run the infra team"
                        and found[stated].subject != "name"
                        # nor does a clause long enough to be a fact of its own: ``disclosure``
                        # reads it (below) rather than losing it (see ``_goes_on``)
                        and _goes_on(found[stated], text)
                    ):
                        found[stated] = _continued(found[stated], text, message.role)
                    elif signer is None and (
                        adds_to_agreed(found, last_decision, message)
                        or (turn_decision == last_decision is not None and not first)
                    ):
                        # "Yes, let's do that, it's the cheapest fix": the why of the decision
                        # the message agrees to, not a fact of its own
                        assert last_decision is not None
                        if not no_memory(text) and not AGREE.match(text):
                            found[last_decision] = _continued(found[last_decision], text,
                                                              message.role)  # fmt: skip
                    elif signer is None and not answered:
                        # after a fact read this way, the next clause is read the same way
                        # (a second fact), not as going on from it
                        told = _disclosed(
                            text, sentence, message, base, question, talk, weights=weights
                        )
                        if told:
                            stated = len(found)
                            found.extend(told)
                    question = ""  # only the first clause answers the question
        if previous is not None and previous.role is Role.ASSISTANT is not message.role:
            for index in range(start, len(found)):
                if index != turn_decision and found[index].type is MemoryType.DECISION:
                    found[index] = in_context(found[index], previous)
        previous = message
        recent.append(message)
    return _fold_given_up(found)
