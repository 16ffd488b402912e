"""The turn-level reading of a conversation: facts that need more than one message.

Why it exists: a decision is often made across turns ("I suggest we pin pydantic" — "Agreed,
pin it"; "Should we use local disk or object storage?" — "Object storage, since we run
replicas"), and "who agreed" is the next turn's "Good, let's go with that" or a later "Marta
signed off on it"; a short answer to a question about something named ("What queue does ferry
use?" — "NATS") is a fact about it; "I don't prefer tabs any more, I now prefer spaces" is one
new preference that replaces the one about tabs (``_fold_given_up``). This module walks the
turns in order, reads each clause with ``rules`` and adds those agreements and choices.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

from wm_core._document.sentences import sentences, stamp_date
from wm_core._memory.model import MemoryType
from wm_core._memory.names import NAME, NOT_NAMES, Talk, note_question
from wm_core._memory.rules import Fact, classify
from wm_core._memory.speech import (
    LEAD,
    REASON,
    TENTATIVE,
    clauses,
    clean,
    normalized,
    object_of,
    statement,
    third_person,
)
from wm_core._memory.subjects import REPLACES
from wm_core._messages import Message, Role, TextPart

_PROPOSAL: Final = re.compile(
    r"^(?:i(?:\s+would|'d)?\s+(?:suggest|recommend|propose)(?:\s+that)?\s+(?:we\s+)?|"
    r"we\s+(?:could|should)\s+|how about\s+|what about\s+|i'd go with\s+|"
    # "I'd move them to a background job": what the assistant would do, offered
    r"i(?:'d|\s+would)\s+(?:probably\s+|just\s+)?(?=(?!(?:like|love|say|think|guess|rather|be|"
    r"have|need|want|prefer|suggest|recommend|propose|go with)\b)[a-z]+\s)|"
    r"i(?:'ll| will)\s+(?=use|go with|switch|pin|keep)|let's\s+)(?P<what>.+)$",
    re.IGNORECASE,
)
_AGREE: Final = re.compile(
    r"^(?:yes|yeah|yep|sure|ok(?:ay)?|agreed|agree|sounds good|sounds great|good|great|"
    r"perfect|fine|deal|do it|go ahead|let's do (?:it|that)|let's go with (?:it|that|this)|"
    r"makes sense|exactly|correct|works for me|that works|lgtm|approved)\b",
    re.IGNORECASE,
)
# Someone else agrees to the latest decision: "Our CTO, Hana, approved it", "Marta signed off".
_SIGN_OFF: Final = re.compile(
    r"^(?!(?:i|we|you|it|this|that)\b)(?P<who>.{1,60}?)\s+(?:has\s+|have\s+|already\s+|also\s+)*"
    r"(?:signed off|approved|okayed|ok'd|green-?lit|gave (?:it|us|the team) the go-ahead|"
    r"(?:is|are) on board with)\b",
    re.IGNORECASE,
)
_DISAGREE: Final = re.compile(r"\b(?:no|not|don't|but|instead|rather|wait)\b", re.I)
_OPTIONS: Final = re.compile(
    r"^(?:should (?:we|i)|(?:do|would) you (?:want|like|prefer)(?: me)?(?: to)?|shall (?:we|i)|"
    r"(?:do|would) you prefer|(?:which|what)\b[^?,]*,)\s+(?P<body>.+?)\s+or\s+(?P<other>.+?)\?$",
    re.IGNORECASE,
)


# A yes-or-no question the user answers "yes": "Should the keys expire?" is a decision (with
# what the user adds: "Yes, set a TTL of 30 minutes"), "Do you want low-carb recipes?" a
# preference, and so is "Should I summarize …?" when the answer is a habit ("… after each
# call"). An offer of a one-off task ("Do you want me to …?", "Should I update it?") is none.
_SHOULD: Final = re.compile(
    r"^should\s+(?P<who>we|i|the|it|they|this|that|our|all|every)\b.+\?$", re.I
)
_HABIT: Final = re.compile(r"\b(?:each|every|always|never|from now on|whenever|by default)\b", re.I)
_WANT: Final = re.compile(
    r"^(?:do|would)\s+you\s+(?:want|like|prefer)\s+(?!me\b|to\b|it\b|that\b|this\b|help\b|"
    r"a hand\b|anything\b|something\b|some help\b)(?P<what>[\w\-][^?]*)\?$",
    re.IGNORECASE,
)
_YES: Final = re.compile(r"^(?:yes|yeah|yep|sure|definitely|absolutely|please do)\b[\s,.!]*", re.I)
# An open question about the user ("What stack do you use?"), or about the kind of what the
# user just said ("What kind of illustration?", "What style?", "Any favourite dishes?").
_ASKED: Final = re.compile(
    r"^(?:(?:what|which|where)\b[^?]*\byou(?:r)?\b[^?]*|(?:what|which)\s+(?:kind|sort|type|style)"
    r"\b[^?]*|any\s+favou?rite\b[^?]*)\?$",
    re.IGNORECASE,
)
_TASTE: Final = re.compile(r"\b(?:like|prefer|enjoy|love|favou?rite|fan of|style)\b", re.I)
# A reply that starts like a sentence is read by the clause rules, not as a bare answer.
_CLAUSE_START: Final = re.compile(
    r"^(?:i|i'm|i've|i'll|i'd|my|we|we're|our|it|it's|he|she|they|the|this|that|there|yes|no|"
    r"sure|thanks|sorry|not|nothing|none|let's|please|[\w']+\s+(?:is|are|was|were)\b)",
    re.IGNORECASE,
)


def _signer(clause: str) -> str | None:
    """Who a clause says agreed to the decision before it, by name when it names one."""
    match = _SIGN_OFF.match(clause)
    if match is None:
        return None
    who = match.group("who")
    names = [n for n in re.findall(NAME, who) if n.split()[0] not in NOT_NAMES]
    return names[-1] if names else clean(who)


def _last_question(message: Message) -> str:
    """The last sentence of a message without what leads up to a colon ("Before I refactor:
    should the API keep XML?" asks "should the API keep XML?")."""
    found = sentences(message.text())
    last = LEAD.sub("", found[-1]).strip() if found else ""
    return last.rsplit(": ", 1)[-1] if last.endswith("?") else last


def _agreement(text: str) -> bool:
    first = LEAD.sub("", text.strip()) if not _AGREE.match(text.strip()) else text.strip()
    return bool(_AGREE.match(text.strip()) or _AGREE.match(first)) and not _DISAGREE.search(
        text.split(".")[0]
    )


def _proposal(message: Message) -> str | None:
    """What an assistant's message proposes ("I suggest we pin pydantic"), if anything."""
    found = sentences(message.text())
    for index in range(len(found) - 1, -1, -1):
        text = LEAD.sub("", found[index]).strip()
        if text.endswith("?"):
            continue
        match = _PROPOSAL.match(text)
        if match and object_of(match.group("what")) is not None:
            what = third_person(
                clean(match.group("what")), Role.ASSISTANT, sentence=False, team=True
            )
            if index and re.search(r"\b(?:it|them|this|that|these|those)\b", what, re.I):
                # "I'd move them to a background job": what "them" is, the sentence before says
                what += f" ({clean(found[index - 1])})"
            return what
    return None


def _asked_about_user(message: Message) -> str | None:
    """The open question an assistant's message ends with about the user ("What stack do
    you use?"), if any: a short answer to it is a fact about the user."""
    found = sentences(message.text())
    last = LEAD.sub("", found[-1]).strip() if found else ""
    if _ASKED.match(last) and not re.search(r"\b(?:did|was|were|had)\b", last, re.IGNORECASE):
        return last  # the answer to a question about the past is no fact about the user now
    return None


def _asked_about_named(message: Message, talk: Talk) -> tuple[str, str] | None:
    """(question, name) when an assistant's message ends with an open question about someone
    or something named before ("What storage does ferry use?"): a short answer that names
    something ("MinIO in each region") is a fact about them."""
    last = _last_question(message)
    if not re.match(r"^(?:what|which)\b[^?]*\?$", last, re.I) or re.search(
        r"\b(?:you|your|did|was|were|had)\b", last, re.I
    ):
        return None
    for name in sorted(talk.names | {talk.last_name}):
        if name and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", last, re.IGNORECASE):
            return last, name
    return None


def _answer(reply: Message, question: str, name: str = "") -> Fact | None:
    """A fact from a reply that answers a question about the user with a bare phrase
    ("Mostly Go and gRPC"): the phrase states nothing alone, so the memory quotes the question."""
    found = sentences(reply.text())
    phrase = LEAD.sub("", found[0]).strip() if found else ""
    if (
        not phrase
        or phrase.endswith("?")
        or len(phrase.split()) > 12
        or _CLAUSE_START.match(phrase)
    ):
        return None
    phrase = clauses(phrase)[0]  # "Mostly science fiction, but I can't stand horror"
    if name and not re.search(r"[A-Z]", phrase[1:]):
        return None  # "Four days.": a bare amount, no name of a thing
    if name:
        text = f'Asked "{question}", the user said: {clean(phrase)}'
        fields = {"question": question, "name": name}
        return Fact(MemoryType.ENTITY, text, name, found[0], (reply.id,), fields)
    kind = MemoryType.PREFERENCE if _TASTE.search(question) else MemoryType.PROFILE
    text = f'The user\'s answer to "{question}": {clean(phrase)}'
    return Fact(kind, text, clean(phrase), found[0], (reply.id,), {"question": question})


def _yes_to(previous: Message, reply: Message) -> Fact | None:
    """A decision or a preference from a "yes" to the yes-or-no question an assistant's
    message ends with (see ``_SHOULD`` and ``_WANT``)."""
    question = _last_question(previous)
    yes = _YES.match(reply.text().strip())
    if yes is None or _DISAGREE.search(clauses(reply.text().split(".")[0])[0]):
        return None
    ids = (previous.id, reply.id)
    should = _SHOULD.match(question)
    if should:
        rest = clauses(reply.text().strip()[yes.end() :])
        added = clean(rest[0]) if rest and not _CLAUSE_START.match(rest[0]) else ""
        added = third_person(added, sentence=False)
        if should.group("who").lower() == "i":
            if not added or not _HABIT.search(added):
                return None
            text = f"The user wants the assistant to {added}"
            return Fact(MemoryType.PREFERENCE, text, added, reply.text(), ids)
        text = f'Asked "{question}", the user said yes' + (f": {added}" if added else "")
        fields = {"decision": added or question, "decided_by": "user"}
        return Fact(MemoryType.DECISION, text, fields["decision"], reply.text(), ids, fields)
    want = _WANT.match(question)
    if want and object_of(want.group("what")) is not None:
        what = third_person(clean(want.group("what")), Role.ASSISTANT, sentence=False)
        return Fact(MemoryType.PREFERENCE, f"The user wants {what}", what, reply.text(), ids)
    return None


def _options(message: Message) -> tuple[str, str] | None:
    for sentence in reversed(sentences(message.text())):
        match = _OPTIONS.match(LEAD.sub("", sentence).strip())
        if match:
            return match.group("body"), match.group("other")
    return None


def _words(text: str) -> set[str]:
    return {w[:5] for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


def _pick(reply: str, options: tuple[str, str]) -> tuple[str, str] | None:
    """(chosen option, reason) when a reply picks one of two options."""
    head = reply.partition(",")[0]
    said = _words(head)
    scores = [len(said & _words(option)) for option in options]
    if max(scores) == 0 or scores[0] == scores[1] or len(head.split()) > 6:
        return None
    chosen = clean(head)
    why = REASON.split(reply, maxsplit=1)
    return chosen, (clean(why[1]) if len(why) > 1 else "")


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


def _continued(fact: Fact, clause: str, role: Role) -> Fact:
    """``fact`` with the clause after it in its sentence added to its text, when that clause
    states nothing alone (it says why, how or what instead; see ``_MAX_CONTINUATION_WORDS``).
    Why: one sentence often states one fact over two clauses, and a memory that keeps only
    the first half loses the "instead" or the "because" a reader needs."""
    if len(clause.split()) > _MAX_CONTINUATION_WORDS or fact.type is MemoryType.ENTITY:
        return fact
    more = third_person(clean(clause), role, sentence=False, team=fact.type is MemoryType.DECISION)
    return replace(fact, text=f"{fact.text}; {more}")


def conversation_facts(
    messages: Sequence[Message], message_dates: Mapping[str, str] | None = None
) -> list[Fact]:
    """Every fact the messages state, in order; see the module docstring.

    ``message_dates`` (message id → ISO date of the message) makes relative times absolute;
    a line that starts with a timestamp ("[2026-03-05 09:00] …") uses that date instead.
    """
    dates = message_dates or {}
    messages = [
        Message(m.id, m.role, (TextPart(normalized(m.text())),), m.estimated_tokens)
        for m in messages
    ]
    talk = Talk()
    found: list[Fact] = []
    previous: Message | None = None
    last_decision: int | None = None  # index in found of the latest decision, for agreements
    for message in messages:
        if message.role not in (Role.USER, Role.ASSISTANT) or not message.text().strip():
            continue
        if message.role is Role.ASSISTANT:
            note_question(message.text(), talk)
        agreed = _agreement(message.text())
        if agreed and last_decision is not None and previous is not None:
            fact = found[last_decision]
            if fact.fields.get("decided_by") != message.role.value:
                fields = {**fact.fields, "agreed_by": message.role.value}
                ids = (*fact.message_ids, message.id)
                found[last_decision] = Fact(fact.type, fact.text, fact.subject, fact.source,
                                            ids, fields, fact.when)  # fmt: skip
        if message.role is Role.USER and previous is not None and previous.role is Role.ASSISTANT:
            proposal = _proposal(previous) if agreed else None
            if proposal is not None:
                text = f"The user agreed to the assistant's proposal: {proposal}"
                fields = {"decision": proposal, "decided_by": "assistant", "agreed_by": "user"}
                found.append(Fact(MemoryType.DECISION, text, proposal, proposal,
                                  (previous.id, message.id), fields))  # fmt: skip
                last_decision = len(found) - 1
            question = _asked_about_user(previous)
            answer = _answer(message, question) if question else None
            about = _asked_about_named(previous, talk) if question is None else None
            if about is not None:
                answer = _answer(message, *about)
            if answer is not None:
                found.append(answer)
            said_yes = _yes_to(previous, message)
            if said_yes is not None:
                found.append(said_yes)
                if said_yes.type is MemoryType.DECISION:
                    last_decision = len(found) - 1
            options = _options(previous)
            picked = _pick(message.text(), options) if options else None
            if picked is not None and options is not None:
                chosen, why = picked
                text = f"The user chose {chosen} ({' or '.join(options)})"
                if why:
                    text += f" because {third_person(why, sentence=False)}"
                fields = {"decision": chosen, "decided_by": "user"}
                if why:
                    fields["reason"] = third_person(why, sentence=False)
                found.append(Fact(MemoryType.DECISION, text, chosen, message.text(),
                                  (previous.id, message.id), fields))  # fmt: skip
                last_decision = len(found) - 1
                previous = message
                continue
        for line in message.text().split("\n"):
            base = stamp_date(line) or dates.get(message.id)
            for sentence in sentences(line):
                said = statement(sentence)
                if said is None:
                    continue
                talk.follow_on = re.match(r"^\s*(?:and|also|plus)\b", sentence, re.I) is not None
                stated: int | None = None  # index in found of this sentence's last fact
                for clause in clauses(said):
                    text = LEAD.sub("", clause).strip()
                    if not text or TENTATIVE.match(text):
                        continue
                    before = len(found)
                    signer = _signer(text) if last_decision is not None else None
                    if signer is not None and last_decision is not None:
                        fact = found[last_decision]
                        found[last_decision] = Fact(fact.type, fact.text, fact.subject,
                            fact.source, (*fact.message_ids, message.id),
                            {**fact.fields, "agreed_by": signer}, fact.when)  # fmt: skip
                    for fact in classify(text, sentence, message.role, base, talk):
                        if signer is not None and fact.type is not MemoryType.ENTITY:
                            continue  # the sign-off itself is the decision's, not an event
                        found.append(Fact(fact.type, fact.text, fact.subject, fact.source,
                                          (message.id,), fact.fields, fact.when))  # fmt: skip
                        if fact.type is MemoryType.DECISION:
                            last_decision = len(found) - 1
                    if len(found) > before:
                        stated = before
                    elif stated is not None and signer is None:
                        found[stated] = _continued(found[stated], text, message.role)
        previous = message
    return _fold_given_up(found)
