"""Decisions across turns: proposals, agreements, sign-offs, picks repeated.

Why it exists: a decision is often made across turns ("I suggest we pin pydantic" — "Agreed,
pin it"), and "who agreed" is the next turn's "Good, let's go with that" or a later "Marta
signed off on it" (``signer_in``, with the reason a sign-off gives: ``with_reason``). These
readers say what an assistant's message proposes (``proposal_in``), whether a reply agrees
(``agrees``), whether a short reply only echoes the other side's decision ("RLS it is.":
``echoes``), the alternative a reply set aside (``with_set_aside``), the assistant's sentence
a short or referring decision takes up (``in_context``), and the reason before a ", so"
(``so_reason``). ``conversation`` walks the turns and applies them.

The module is pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from wm_core._document.sentences import sentences
from wm_core._memory.choices import other
from wm_core._memory.model import MemoryType
from wm_core._memory.names import NAME, NOT_NAMES
from wm_core._memory.replies import DISAGREE
from wm_core._memory.rules import Fact
from wm_core._memory.speech import LEAD, REASON, clean, object_of, third_person
from wm_core._messages import Message, Role

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
HOW_TO: Final = re.compile(r"^(?:how|what|which|where|can|could|is there)\b[^?]*\?\s*$", re.I)
AGREE: Final = re.compile(
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
    r"agreed(?=\s*(?:$|[.!,]|too\b|as well\b|with (?:it|that|this|us|me|the plan)\b))|"
    # the verb as a speaker of another language may say it: "Mr. Okafor is agree with this"
    r"(?:is\s+|are\s+)?agrees?(?=\s+with (?:it|that|this|us|me|the plan)\b))",
    re.IGNORECASE,
)
_THANKS: Final = re.compile(r"\b(?:thanks|thank you|thx|got it|noted|i see|will do)\b", re.I)


def signer_in(clause: str) -> str | None:
    """Who a clause says agreed to the decision before it, by name when it names one."""
    match = _SIGN_OFF.match(clause)
    if match is None:
        return None
    who = match.group("who")
    names = [n for n in re.findall(NAME, who) if n.split()[0] not in NOT_NAMES]
    return names[-1] if names else clean(who)


def agrees(text: str) -> bool:
    text = re.sub(r"^[^\w\s]+\s*", "", text.strip())  # "👍 do it"
    if _THANKS.search(text):
        return False  # "ok thanks", "cool, got it": the reply acknowledges, it accepts nothing
    first = LEAD.sub("", text.strip()) if not AGREE.match(text.strip()) else text.strip()
    return bool(AGREE.match(text.strip()) or AGREE.match(first)) and not DISAGREE.search(
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


def proposal_in(message: Message, reply: str = "", how_to: bool = False) -> str | None:
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


def with_reason(fact: Fact, clause: str, role: Role) -> Fact:
    """A decision with the reason a sign-off gives ("Ines pushed for it because …"), when it
    has none yet."""
    parts = REASON.split(clause, maxsplit=1)
    if len(parts) < 2 or "reason" in fact.fields or not parts[1].strip():
        return fact
    why = third_person(clean(parts[1]), role, sentence=False)
    return replace(fact, text=f"{fact.text}, because {why}", fields={**fact.fields, "reason": why})


def with_agreed_by(fact: Fact, who: str, message_id: str) -> Fact:
    """``fact`` with ``who`` among those who agreed (everyone who did is kept: "Priya signed
    off" and then the assistant's "Great")."""
    earlier = [w for w in fact.fields.get("agreed_by", "").split(", ") if w]
    agreed = ", ".join(dict.fromkeys([*earlier, who]))
    ids = tuple(dict.fromkeys((*fact.message_ids, message_id)))
    return replace(fact, message_ids=ids, fields={**fact.fields, "agreed_by": agreed})


# The assistant's "X it is" that echoes no decision of the user's takes up a wish or an
# answer ("I'd rather you answer in English" — "Sure, English it is"): no decision of its own.
TAKES_UP: Final = re.compile(r"\bit is\s*[.!]*$", re.IGNORECASE)


def adds_to_agreed(found: Sequence[Fact], last_decision: int | None, message: Message) -> bool:
    """Whether ``message`` agreed to the latest decision someone else made (it is among its
    messages), so what else it says goes on from that decision (a decision the message made
    itself, a pick or an answer, already quotes it)."""
    if last_decision is None:
        return False
    fact = found[last_decision]
    return message.id in fact.message_ids and fact.fields.get("decided_by") != message.role.value


# A reply this short that states a decision right after the other side's only repeats it.
_ECHO_WORDS: Final = 6


def so_reason(fact: Fact, sentence: str, clause: str, role: Role) -> str | None:
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


def echoes(
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


def in_context(fact: Fact, asked: Message) -> Fact:
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


def with_set_aside(fact: Fact, offered: tuple[str, str]) -> Fact:
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
