"""The turn-level reading of a conversation: facts that need more than one message.

Why it exists: a decision is often made across turns ("I suggest we pin pydantic" — "Agreed,
pin it"; "Should we use local disk or object storage?" — "Object storage, since we run
replicas"), and "who agreed" is the next turn's "Good, let's go with that" or a later "Marta
signed off on it"; a short answer to a question about something named ("What queue does ferry
use?" — "NATS") is a fact about it (the readers of a reply to a question are ``replies``);
"I don't prefer tabs any more, I now prefer spaces" is one
new preference that replaces the one about tabs (``_fold_given_up``). This module walks the
turns in order, reads each clause with ``rules`` and adds those agreements and choices. A
clause the rules make nothing of (and do not say states nothing) is read by ``disclosure``,
phrasing-agnostic; an assistant's check the user confirms ("So to confirm, …?", "your team
uses FastAPI, is that right?" — "correct") is read by the clause rules as the user's own
words (``_confirmed_facts``), else by ``disclosure``; what a reply that agrees to a decision
adds goes on from that decision ("yep do that, we can't afford bigger instances"). A
sentence typed in lower case inside another ("quick one. we run k8s") is a clause of its own
(``_clauses``), and the "I" chat leaves out is put back (``speech.with_subject``).

One fact is one memory across turns, too: a reply that accepts or picks is one decision (a
later decision clause in it goes on from it); a short repeat of the other side's decision
("RLS it is.") is an agreement (``_echoes``); a user's decision in reply to two alternatives
names the one set aside (``_over``), and one that is short or refers back ("let's add that
index") carries the assistant's sentence it takes up (``_in_context``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

from wm_core._document.sentences import sentences, stamp_date
from wm_core._memory.appraisal import subject_fact
from wm_core._memory.choices import options_in, other
from wm_core._memory.disclosure import (
    Weights,
    asked,
    confirmed_check,
    disclosed,
    no_memory,
    pieces,
)
from wm_core._memory.model import MemoryType, memory_key
from wm_core._memory.names import NAME, NOT_NAMES, Talk, note_question
from wm_core._memory.replies import (
    DISAGREE,
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
    REASON,
    TENTATIVE,
    clauses,
    clean,
    normalized,
    object_of,
    statement,
    third_person,
    with_subject,
)
from wm_core._memory.subjects import REPLACES
from wm_core._messages import Message, Role, TextPart

_PROPOSAL: Final = re.compile(
    r"^(?:i(?:\s+would|'d)?\s+(?:suggest|recommend|propose)(?:\s+that)?\s+(?:we\s+)?|"
    r"(?:we|you)\s+(?:could|should|might want to)\s+|how about\s+|what about\s+|i'd go with\s+|"
    # "I'd move them to a background job": what the assistant would do, offered
    r"i(?:'d|\s+would)\s+(?:probably\s+|just\s+)?(?=(?!(?:like|love|say|think|guess|rather|be|"
    r"have|need|want|prefer|suggest|recommend|propose|go with)\b)[a-z]+\s)|"
    r"i(?:'ll| will)\s+(?=use|go with|switch|pin|keep)|let's\s+|"
    # a proposal said as a noun: "Proposal: rotate the keys …", "My suggestion is to …"
    r"(?:my\s+)?(?:proposal|suggestion|recommendation)(?:\s+(?:is|would be))?(?:\s+to)?\s*:?\s+)(?P<what>.+)$",
    re.IGNORECASE,
)
# An imperative of change the user then accepts ("Try gradient clipping at 1.0" — "clipping
# fixed it, keeping that"), unless it answers the user's how-to question ("How do I undo a
# commit?" — "Use git reset --soft" — "that worked": a how-to, no decision).
_IMPERATIVE_PROPOSAL: Final = re.compile(
    r"^(?:try|use|switch to|enable|disable|pin|bump|raise|lower|increase|reduce|cap|limit|"
    r"replace|drop|partition|split|add|set)\s+(?P<what>\w.+)$",
    re.IGNORECASE,
)
_HOW_TO: Final = re.compile(r"^(?:how|what|which|where|can|could|is there)\b[^?]*\?\s*$", re.I)
_AGREE: Final = re.compile(
    r"^(?:yes|yeah|yep|sure|ok(?:ay)?|agreed|agree|sounds good|sounds great|good|great|"
    r"perfect|fine|deal|do it|go ahead|go for it|ship it|let's do (?:it|that)|"
    r"let's go with (?:it|that|this)|"
    r"makes sense|exactly|correct|works for me|that works|lgtm|approved|"
    # the proposal tried and kept: "clipping fixed it, keeping that", "that did the trick"
    r"(?:[\w\-]+\s+){0,2}(?:fixed it|worked|did the trick)|keeping (?:it|that|this)|"
    r"(?:i'll|we'll|i will|we will) (?:do|take|keep) (?:it|that|this))\b",
    re.IGNORECASE,
)
# Someone else agrees to the latest decision: "Our CTO, Hana, approved it", "Marta signed off".
_SIGN_OFF: Final = re.compile(
    r"^(?!(?:i|we|you|it|this|that|he|she|they|there|nobody|no one)\b)(?P<who>.{1,60}?)\s+"
    r"(?:has\s+|have\s+|already\s+|also\s+|fully\s+)*"
    r"(?:signed off|approved|okayed|ok'd|green-?lit|gave (?:it|us|the team) the go-ahead|"
    r"(?:is|are) on board|(?:is|are) fine with (?:it|that|this)|(?:is|are) happy with (?:it|that|"
    r"this)|liked (?:it|the idea)|\+1'?d|"
    # who argued for it: "Ines pushed for it because the bot redeployed prod in a loop"
    r"(?:pushed|argued|lobbied|campaigned) for (?:it|that|this)|(?:proposed|suggested) (?:it|that|this)|"
    # "Marco agreed." — agreeing to what was said, not "Hana agreed to move the DB"
    r"agreed(?=\s*(?:$|[.!,]|too\b|as well\b|with (?:it|that|this|us|me|the plan)\b)))",
    re.IGNORECASE,
)
_THANKS: Final = re.compile(r"\b(?:thanks|thank you|thx|got it|noted|i see|will do)\b", re.I)


def _signer(clause: str) -> str | None:
    """Who a clause says agreed to the decision before it, by name when it names one."""
    match = _SIGN_OFF.match(clause)
    if match is None:
        return None
    who = match.group("who")
    names = [n for n in re.findall(NAME, who) if n.split()[0] not in NOT_NAMES]
    return names[-1] if names else clean(who)


def _agreement(text: str) -> bool:
    text = re.sub(r"^[^\w\s]+\s*", "", text.strip())  # "👍 do it"
    if _THANKS.search(text):
        return False  # "ok thanks", "cool, got it": the reply acknowledges, it accepts nothing
    first = LEAD.sub("", text.strip()) if not _AGREE.match(text.strip()) else text.strip()
    return bool(_AGREE.match(text.strip()) or _AGREE.match(first)) and not DISAGREE.search(
        text.split(".")[0]
    )


# A sentence that recommends, wherever the word is: "The simplest fix is to …", "Consider …",
# "It'd be better to …", "One option is to …", "My suggestion would be …".
_PROPOSAL_CUE: Final = re.compile(
    r"\b(?:suggest|suggestion|recommend|recommendation|propose|proposal|consider|better to|"
    r"best to|simplest|cleanest|easiest|safest|option is|approach (?:is|would be)|"
    r"might want to)\b",
    re.IGNORECASE,
)
# What comes before the proposal's content: "The simplest fix is to", "My suggestion would be".
_PROPOSAL_HEAD: Final = re.compile(
    r"^(?:.{0,50}?\b(?:is|would be|'d be|are)\s+(?:to\s+)?(?=\w)|consider\s+)", re.IGNORECASE
)
_MIN_PROPOSAL_WORDS: Final = 4
# What a proposal may open with before its "I'd suggest": "For the search box, I'd suggest …".
_SCOPE: Final = re.compile(
    r"^(?:for|in|on|to|with|given|since|as for|about|here|in that case|then)\b[^,]{0,60},\s+", re.I
)


def _proposal(message: Message, reply: str = "", how_to: bool = False) -> str | None:
    """What an assistant's message proposes ("I suggest we pin pydantic", or an imperative of
    change unless it answers a ``how_to`` question), if anything; with the sentence before it
    when the proposal or the ``reply`` accepting it refers to it ("replace both with ruff
    format")."""
    found = sentences(message.text())
    for index in range(len(found) - 1, -1, -1):
        text = _SCOPE.sub("", LEAD.sub("", found[index]).strip())
        if text.endswith("?"):
            continue
        match = _PROPOSAL.match(text) or (None if how_to else _IMPERATIVE_PROPOSAL.match(text))
        said = match.group("what") if match else ""
        if not match and _PROPOSAL_CUE.search(text) and len(text.split()) > _MIN_PROPOSAL_WORDS:
            # "The simplest fix is to batch the inserts", "Consider switching to orjson": a
            # sentence that recommends, whatever its opening, is the proposal itself
            said = _PROPOSAL_HEAD.sub("", text)
        if said and object_of(said) is not None:
            what = third_person(clean(said), Role.ASSISTANT, sentence=False, team=True)
            refers = re.search(r"\b(?:it|them|this|that|these|those)\b", what, re.I)
            if index and (refers or re.search(r"\b(?:both|them|these|those)\b", reply, re.I)):
                # "I'd move them to a background job": what "them" is, the sentence before says
                what += f" ({clean(found[index - 1])})"
            return what
    return None


def _with_reason(fact: Fact, clause: str, role: Role) -> Fact:
    """A decision with the reason a sign-off gives ("Ines pushed for it because …"), when it
    has none yet."""
    parts = REASON.split(clause, maxsplit=1)
    if len(parts) < 2 or "reason" in fact.fields or not parts[1].strip():
        return fact
    why = third_person(clean(parts[1]), role, sentence=False)
    return replace(fact, text=f"{fact.text}, because {why}", fields={**fact.fields, "reason": why})


def _agreed_by(fact: Fact, who: str, message_id: str) -> Fact:
    """``fact`` with ``who`` among those who agreed (everyone who did is kept: "Priya signed
    off" and then the assistant's "Great")."""
    earlier = [w for w in fact.fields.get("agreed_by", "").split(", ") if w]
    agreed = ", ".join(dict.fromkeys([*earlier, who]))
    ids = tuple(dict.fromkeys((*fact.message_ids, message_id)))
    return replace(fact, message_ids=ids, fields={**fact.fields, "agreed_by": agreed})


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


# The assistant's "X it is" that echoes no decision of the user's takes up a wish or an
# answer ("I'd rather you answer in English" — "Sure, English it is"): no decision of its own.
_TAKES_UP: Final = re.compile(r"\bit is\s*[.!]*$", re.IGNORECASE)


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


def _adds_to_agreed(found: Sequence[Fact], last_decision: int | None, message: Message) -> bool:
    """Whether ``message`` agreed to the latest decision someone else made (it is among its
    messages), so what else it says goes on from that decision (a decision the message made
    itself, a pick or an answer, already quotes it)."""
    if last_decision is None:
        return False
    fact = found[last_decision]
    return message.id in fact.message_ids and fact.fields.get("decided_by") != message.role.value


# A reply this short that states a decision right after the other side's only repeats it.
_ECHO_WORDS: Final = 6


def _so_reason(fact: Fact, sentence: str, clause: str, role: Role) -> str | None:
    """The reason of a decision whose clause follows ", so" in its sentence (what comes
    before it, in the third person), or None; the fact that clause stated, if any, is the
    decision's reason rather than a memory of its own."""
    if fact.type is not MemoryType.DECISION or "reason" in fact.fields:
        return None
    before = re.search(rf"^(?P<why>.+?),\s+so\s+{re.escape(clause)}", sentence, re.IGNORECASE)
    if before is None:
        return None
    why = third_person(clean(LEAD.sub("", before.group("why"))), role, sentence=False)
    return why[:1].lower() + why[1:] if why else None


def _echoes(
    found: Sequence[Fact], last_decision: int | None, previous: Message | None, message: Message
) -> bool:
    """Whether a decision read from ``message`` only echoes the one the other side made in the
    message before ("We chose row-level security" — "RLS it is."): the assistant decides
    nothing for the user by repeating it, and the user's "ok, X it is" after the assistant's
    decision is an agreement, not a second memory."""
    if last_decision is None or previous is None:
        return False
    fact = found[last_decision]
    made_by = fact.fields.get("decided_by")
    if previous.role is message.role or previous.id not in fact.message_ids:
        return False
    if made_by != previous.role.value:
        return False
    said = sentences(message.text())
    return bool(said) and len(said[0].split()) <= _ECHO_WORDS


_REFERS: Final = re.compile(
    r"\b(?:that|it|this|these|those|both|them|the\s+[\w\-]+\s+(?:thing|one|option|idea))\b", re.I
)
_MIN_STEM: Final = 3
# A reply this short says what it decides only with the message it answers.
_SHORT_REPLY_WORDS: Final = 6


def _stems(text: str) -> set[str]:
    return {w[:5] for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) >= _MIN_STEM}


def _in_context(fact: Fact, asked: Message) -> Fact:
    """A user's decision that answers the assistant's message before it and refers to it or is
    short ("ok, let's add that index", "Go with 14 days, yes") carries the sentence of that
    message it takes up (the one sharing most words with it, at least one: "Does it have retries
    configured?" — "We agreed to keep it at three"):
    the reply alone does not
    say what "that index" is, and the same fact is then one memory, not a proposal in one
    and its acceptance in another."""
    said = _stems(fact.text) - _stems("the user team and others will")
    short = len(fact.source.split()) <= _SHORT_REPLY_WORDS
    if not (short or _REFERS.search(fact.fields.get("decision", fact.text))):
        return fact  # "We decided to use PostgreSQL 16 for the ledger …" says it all
    best, shared = "", 0
    for sentence in sentences(asked.text()):
        text = LEAD.sub("", sentence).strip()
        common = len(said & _stems(text))
        if common > shared and len(text.split()) > 2:
            best, shared = text, common
    if not best and _REFERS.search(fact.fields.get("decision", fact.text)):
        # "Does it have retries configured?" — "We agreed to keep it at three": "it" is what
        # the message before was about, its last sentence
        last = [s for s in sentences(asked.text()) if len(s.split()) > 2]
        best = LEAD.sub("", last[-1]).strip() if last else ""
    if not best or clean(best).lower() in fact.text.lower():
        return fact
    taken = third_person(clean(best), Role.ASSISTANT, sentence=False, team=True)
    ids = tuple(dict.fromkeys((asked.id, *fact.message_ids)))
    return replace(fact, text=f"{fact.text} (the assistant had said: {taken})", message_ids=ids)


def _over(fact: Fact, offered: tuple[str, str]) -> Fact:
    """A user's decision in reply to a message that offered two alternatives ("SQS or run NATS
    ourselves" — "SQS it is, nobody wants to babysit a cluster"), with the one it set aside
    when its text names exactly one of them."""
    said = {w[:5] for w in re.findall(r"[a-z0-9]+", fact.text.lower()) if len(w) > 2}
    hits = [bool(said & {w[:5] for w in re.findall(r"[a-z0-9]+", o.lower()) if len(w) > 2})
            for o in offered]  # fmt: skip
    if hits.count(True) != 1:
        return fact
    chosen = offered[hits.index(True)]
    return replace(fact, text=f"{fact.text} (over {other(offered, chosen)})")


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
        read = disclosed(piece, message.role, base, question=question, weights=weights)
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
    return [piece for clause in clauses(said) for piece in pieces(clause) if statement(piece)]


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
        agreed = _agreement(message.text())
        if agreed and last_decision is not None and previous is not None:
            fact = found[last_decision]
            if fact.fields.get("decided_by") != message.role.value:
                found[last_decision] = _agreed_by(fact, message.role.value, message.id)
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
            how_to = len(recent) > 1 and bool(_HOW_TO.match(recent[-2].text().strip()))
            proposal = (
                _proposal(previous, message.text(), how_to)
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
                    text = LEAD.sub("", clause).strip()
                    if message.role is Role.USER:
                        text = with_subject(text)  # "lost my wallet yesterday"
                    if not text or TENTATIVE.match(text):
                        continue
                    text = subject_fact(text) or text  # "Orla from accounting is a legend"
                    before = len(found)
                    signer = _signer(text) if last_decision is not None else None
                    if signer is not None and last_decision is not None:
                        found[last_decision] = _with_reason(
                            _agreed_by(found[last_decision], signer, message.id), text,
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
                        if fact.type is MemoryType.DECISION and _echoes(
                            found, last_decision, previous, message
                        ):
                            # "Monday the 4th it is." after the user's decision: agreement
                            assert last_decision is not None
                            found[last_decision] = _agreed_by(found[last_decision],
                                                              message.role.value, message.id)  # fmt: skip
                            continue
                        if (
                            fact.type is MemoryType.DECISION
                            and message.role is Role.ASSISTANT
                            and _TAKES_UP.search(text)
                        ):
                            continue  # "Sure, English it is": the user's wish taken up
                        if fact.type is MemoryType.DECISION and offered is not None:
                            fact = _over(fact, offered)
                        why = _so_reason(fact, sentence, text, message.role)
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
                        _adds_to_agreed(found, last_decision, message)
                        or (turn_decision == last_decision is not None and not first)
                    ):
                        # "Yes, let's do that, it's the cheapest fix": the why of the decision
                        # the message agrees to, not a fact of its own
                        assert last_decision is not None
                        if not no_memory(text) and not _AGREE.match(text):
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
                    found[index] = _in_context(found[index], previous)
        previous = message
        recent.append(message)
    return _fold_given_up(found)
