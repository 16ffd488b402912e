"""Facts from a user's reply to what the assistant asked, read across the two turns.

Why it exists: a reply often states nothing alone ("Mostly Go and gRPC", "yes", "pulumi, the
team knows TypeScript") and means what it means only with the question before it: an open
question about the user or about something named takes a bare answer (``bare_answer``), a
yes-or-no question a "yes" (``yes_to``, ``should_answer``), a question between alternatives a
pick (``picked_option``, read by ``choices``). ``conversation`` walks the turns and asks these
readers about each user reply to an assistant; they were split from it to keep one job per
module.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from wm_core._document.sentences import sentences
from wm_core._memory.choices import answer_to_should, numbered_pick, options_in, other, pick
from wm_core._memory.disclosure import pieces
from wm_core._memory.model import MemoryType
from wm_core._memory.names import Talk
from wm_core._memory.rules import Fact
from wm_core._memory.speech import LEAD, REASON, clauses, clean, object_of, third_person
from wm_core._memory.when import is_past
from wm_core._messages import Message, Role

# A reply that disagrees: "no", "not that", "but …", "instead", "wait".
DISAGREE: Final = re.compile(r"\b(?:no|not|don't|but|instead|rather|wait)\b", re.I)

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


def _last_question(message: Message) -> str:
    """The last sentence of a message without what leads up to a colon ("Before I refactor:
    should the API keep XML?" asks "should the API keep XML?")."""
    found = sentences(message.text())
    last = LEAD.sub("", found[-1]).strip() if found else ""
    return last.rsplit(": ", 1)[-1] if last.endswith("?") else last


def asked_about_user(message: Message) -> str | None:
    """The open question an assistant's message ends with about the user ("What stack do
    you use?"), if any: a short answer to it is a fact about the user."""
    found = sentences(message.text())
    last = LEAD.sub("", found[-1]).strip() if found else ""
    if _ASKED.match(last) and not is_past(last):
        return last  # the answer to a question about the past is no fact about the user now
    return None


def asked_about_named(message: Message, talk: Talk) -> tuple[str, str] | None:
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


# An answer the user takes back: "all of them lol, never mind".
_TAKEN_BACK: Final = re.compile(
    r"\b(?:never ?mind|nvm|forget it|doesn't matter|scratch that)\b", re.I
)


def bare_answer(reply: Message, question: str, name: str = "") -> Fact | None:
    """A fact from a reply that answers a question about the user with a bare phrase
    ("Mostly Go and gRPC"): the phrase states nothing alone, so the memory quotes the question."""
    found = sentences(reply.text())
    phrase = LEAD.sub("", found[0]).strip() if found else ""
    if (
        not phrase
        or phrase.endswith("?")
        or len(phrase.split()) > 12
        or _CLAUSE_START.match(phrase)
        or _TAKEN_BACK.search(reply.text())
    ):
        return None
    phrase = pieces(clauses(phrase)[0])[0]  # "Mostly sci-fi, but I can't stand horror"
    if name and not re.search(r"[A-Z]", phrase[1:]):
        return None  # "Four days.": a bare amount, no name of a thing
    if name:
        text = f'Asked "{question}", the user said: {clean(phrase)}'
        fields = {"question": question, "name": name}
        return Fact(MemoryType.ENTITY, text, name, found[0], (reply.id,), fields)
    kind = MemoryType.PREFERENCE if _TASTE.search(question) else MemoryType.PROFILE
    text = f'The user\'s answer to "{question}": {clean(phrase)}'
    return Fact(kind, text, clean(phrase), found[0], (reply.id,), {"question": question})


def yes_to(previous: Message, reply: Message) -> Fact | None:
    """A decision or a preference from a "yes" to the yes-or-no question an assistant's
    message ends with (see ``_SHOULD`` and ``_WANT``)."""
    question = _last_question(previous)
    yes = _YES.match(reply.text().strip())
    if yes is None or DISAGREE.search(clauses(reply.text().split(".")[0])[0]):
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
        return None  # "Should we …?": any answer that states something (``should_answer``)
    want = _WANT.match(question)
    if want and object_of(want.group("what")) is not None:
        what = third_person(clean(want.group("what")), Role.ASSISTANT, sentence=False)
        return Fact(MemoryType.PREFERENCE, f"The user wants {what}", what, reply.text(), ids)
    return None


def should_answer(previous: Message, reply: Message) -> Fact | None:
    """A decision from the user's answer to an assistant's "Should we …?" (``choices``)."""
    question = _last_question(previous)
    answer = answer_to_should(question, reply.text())
    if answer is None:
        return None
    said = third_person(answer, sentence=False, team=True)
    text = f'Asked "{question}", the user answered: {said}'
    fields = {"decision": said, "decided_by": "user"}
    return Fact(MemoryType.DECISION, text, question, reply.text(), (previous.id, reply.id), fields)


def picked_option(recent: Sequence[Message], reply: Message) -> Fact | None:
    """A decision from a user's reply that picks one of the alternatives the turns before it
    named (the assistant's, or the user's own question the assistant answered): see
    ``choices``."""
    for earlier in reversed(recent):
        numbered = numbered_pick(earlier.text(), reply.text())
        if numbered is not None:  # "(1) Loki, (2) Elasticsearch …" — "1. cheapest to run"
            chosen, others, said = numbered
            said = third_person(said, sentence=False, team=True) if said else ""
            text = f"The user chose {chosen} over {', '.join(others)}" + (
                f": {said}" if said else ""
            )
            fields = {"decision": chosen, "decided_by": "user"}
            if said:
                fields["reason"] = said
            return Fact(MemoryType.DECISION, text, chosen, reply.text(), (earlier.id, reply.id),
                        fields)  # fmt: skip
        options = options_in(earlier.text())
        if options is None:
            continue
        found = pick(reply.text(), options)
        if found is None:
            return None
        chosen, head, said = found
        said = third_person(said, sentence=False, team=True)
        text = f"The user chose {chosen} over {other(options, chosen)}: {said}"
        fields = {"decision": third_person(head, sentence=False, team=True), "decided_by": "user"}
        why = REASON.split(said, maxsplit=1)
        if len(why) > 1:
            fields["reason"] = clean(why[1])
        ids = (earlier.id, reply.id)
        return Fact(MemoryType.DECISION, text, fields["decision"], reply.text(), ids, fields)
    return None
