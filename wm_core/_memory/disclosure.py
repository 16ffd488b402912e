"""The phrasing-agnostic reading of a clause the rules left without a fact.

Why it exists: four rounds of rules (``rules``, ``names``, ``profile``, …) each recognise
phrasings, and a phrasing they were not written for ("we run everything on k8s in eks", "he
used to be an instructor", "backend dev at a travel startup, Voyagio") states a fact all the
same and was lost: across the sets most misses were clauses no rule recognised at all. This
module reads such a clause as a whole instead of by its wording:

1. a no-memory filter (:func:`no_memory`): questions, requests to the assistant, greetings,
   thanks and acknowledgements, how the user feels this minute, clauses too short to say
   anything;
2. a small linear classifier over bag-of-words features (:func:`features`: the clause's words,
   its first words, who says it, whether it speaks of the speaker, names, numbers, a date, and
   the words of the question it answers) that scores ``none`` against each memory type; its
   weights are generated data (``disclosure_weights``, written by
   ``scripts/train_disclosure_weights.py`` from the bench's sets only, reproducibly);
3. a memory whose text is the clause itself in the third person (``third_person``), so every
   content word the speaker used survives, one clause per memory, with its time resolved
   against the message date when it is an event.

It is only asked about clauses the rules made nothing of: what they recognise keeps their
shapes (fields such as a decision's reason and who agreed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

from wm_core._document.sentences import sentences
from wm_core._memory import disclosure_weights
from wm_core._memory.model import MemoryType, fold_text
from wm_core._memory.speech import (
    CHOSE,
    LEAD,
    clauses,
    clean,
    normalized,
    statement,
    third_person,
    with_subject,
)
from wm_core._memory.when import When, resolve_when
from wm_core._messages import Message, Role

NONE: Final = "none"
# label → feature → weight (``disclosure_weights.WEIGHTS`` is one)
Weights = Mapping[str, Mapping[str, float]]
_WORD: Final = re.compile(r"[a-z][a-z'\-]*|\d[\d:.,]*")
_FIRST_PERSON: Final = frozenset(
    {"i", "i'm", "i've", "i'd", "i'll", "im", "ive", "my", "me", "mine", "myself"}
    | {"we", "we're", "we've", "we'll", "our", "ours", "us"}
)
_RELATIVES: Final = re.compile(
    r"\b(?:wife|husband|partner|girlfriend|boyfriend|son|daughter|kids?|children|mom|mum|"
    r"mother|dad|father|parents|brother|sister|grandmother|grandfather|grandma|grandpa|aunt|"
    r"uncle|cousin|friend|boss|manager|colleague|coworker|dog|cat|puppy|kitten)\b",
    re.IGNORECASE,
)
_NAME: Final = re.compile(r"(?<=\w )(?:[A-Z][\w\-&]*)")
# A technical token ("v2.1", "src/app.py", "auth_token", "db-01:5432"): a word character, then
# hyphens, then a digit or one of ``._/:``. Only whether the clause holds one is read, so the
# shortest form is searched: the longer "\w[\w-]*[\d._/:]…" backtracks over every long word
# (quadratic: a 64 KB word took 90 s), this one reads each character once.
_TECH: Final = re.compile(r"\w-*[\d._/:]")

# No memory, whatever the words: a request or question to the assistant, a greeting, thanks,
# an acknowledgement, leaving, or a clause too short to state anything alone.
_REQUEST: Final = re.compile(
    r"^(?:(?:ok(?:ay)?|so|and|also|hey|hi|yes|yeah|yep|no|hmm|well|now|then)[,\s]+)*"
    r"(?:can|could|would|will|do|does|did|is|are|should|shall|may|might)\s+(?:you|i|we|it|"
    r"there|this|that)\b|^(?:please|pls|plz|kindly)\b|^(?:tell|show|explain|give|write|"
    r"make|help|fix|run|look|check|find|list|convert|translate|recommend|suggest|review|"
    r"draft|add|remove|rename|generate|create|start|try|let me|remind)\b|"
    r"^(?:how|what|what's|whats|why|when|where|which|who)\b",
    re.IGNORECASE,
)
# A request that holds for every later answer is a preference, not a request: "please use
# pnpm in all the examples", "don't ever auto-format files I didn't touch".
_STANDING: Final = re.compile(
    r"\b(?:always|never|ever|from now on|in (?:all|every|each|any)|every time|whenever|"
    r"unless|by default|no more|stop|anymore|any more|don't|do not|dont)\b",
    re.IGNORECASE,
)
_SMALL_TALK: Final = re.compile(
    r"^(?:hi|hey|hello|yo|thanks?|thx|ty|thank you|cheers|cool|nice|great|ok(?:ay)?|sure|"
    r"lol|haha|wow|good (?:morning|night|evening)|bye|see you|no worries|got it|makes sense|"
    r"sounds good|all good|wild|interesting|obrigad[oa]|merci|danke|gracias)\b[\s!.,]*"
    r"(?:\w+[\s!.,]*){0,3}$|\b(?:enough for today|that's all|talk (?:to you )?later|"
    r"signing off|good night)\b|^(?:thanks|thank you|thx|ty)\s+(?:again\s+)?for\b",
    re.IGNORECASE,
)
# Cues that say what kind of fact a clause states, whatever its other words.
_CUES: Final = (
    ("starts_first", re.compile(r"^(?:i|i'm|i've|i'd|i'll|im|my|we|we're|we've|our)\b", re.I)),
    ("starts_team", re.compile(r"^(?:we|we're|we've|we'll|our|the team)\b", re.I)),
    ("starts_named", re.compile(r"^(?:the\s+)?(?:[A-Z][\w\-]*|\w+[\d._/\-]\w*)\b(?! I\b)")),
    (
        "starts_the",
        re.compile(
            r"^(?:the|our|their|its)\s+\w+(?:\s+\w+)?\s+(?:is|are|was|"
            r"were|runs?|uses?|has|have|lives?|writes?)\b",
            re.I,
        ),
    ),
    (
        "past",
        re.compile(
            r"\b(?:\w{3,}ed|went|got|had|was|were|did|ran|broke|took|came|"
            r"saw|met|left|lost|won|made|began|quit)\b",
            re.I,
        ),
    ),
    (
        "future",
        re.compile(
            r"\b(?:will|'ll|going to|gonna|planning|plan to|next|tomorrow|"
            r"soon|upcoming|in the spring|this (?:saturday|sunday|weekend))\b",
            re.I,
        ),
    ),
    (
        "taste",
        re.compile(
            r"\b(?:like|likes|love|loves|prefer|prefers|hate|hates|enjoy|"
            r"favou?rite|can't stand|rather|fan of|into)\b",
            re.I,
        ),
    ),
    (
        "instruction",
        re.compile(
            r"\b(?:always|never|don't|do not|dont|from now on|please|"
            r"unless|every time|no more)\b",
            re.I,
        ),
    ),
    (
        "choice",
        re.compile(
            r"\b(?:decided|decide|chose|choose|going with|go with|switch|"
            r"switched|settled|agreed|instead|rather than|drop|dropping|adopt|"
            r"migrate|move to|moving to|upgrade|upgraded)\b",
            re.I,
        ),
    ),
    (
        "state",
        re.compile(
            r"\b(?:am|i'm|is|are|work|works|live|lives|have been|has been|"
            r"used to|since)\b",
            re.I,
        ),
    ),
    ("negation", re.compile(r"\b(?:not|no|never|n't)\b", re.I)),
)
# What a type needs one of, whatever the weights say: a decision states a choice, a
# preference a taste or a standing instruction, an event a time or a tense.
_LICENCE: Final = {
    "decision": frozenset({"cue:choice"}),
    "preference": frozenset({"cue:taste", "cue:instruction"}),
    "event": frozenset({"dated", "cue:past", "cue:future"}),
}
# What passes or is about the assistant is no memory: a state of this moment ("my PR is
# blocked on review", "I'm working on the auth refactor this week"), praise of an answer ("I
# like your answer"), a shrug ("whatever works", "not sure yet").
_PASSING: Final = re.compile(
    r"^(?:i'm|i am|we're|we are)\s+(?:\w+ly\s+)?\w+ing\b.*\b(?:today|tonight|this (?:morning|"
    r"afternoon|evening|week)|right now|at the moment|atm)\b|"
    r"^(?:my|our|the)\s+[\w\-]+\s+(?:is|are)\s+(?:still\s+)?(?:blocked|broken|failing|down|"
    r"stuck|waiting|pending|red|flaky)\b|"
    r"\b(?:like|love|liked|loved|appreciate|enjoyed|hate)\s+(?:you|your)\b|"
    r"\b(?:whatever works|not sure|never mind|doesn't matter|no idea)\b",
    re.IGNORECASE,
)
# Someone named alone choosing makes a fact of their life, not the user's or the team's
# decision (the rules' own reading, ``decisions._DECIDED``, says the same).
_THEIR_CHOICE: Final = re.compile(
    rf"^(?-i:[A-Z][a-z]+)(?:\s+(?:just|finally|also|has|have))*\s+(?:{'|'.join(CHOSE)})\b"
)
_STEM: Final = 5
_MIN_WORDS: Final = 3
_MAX_WORDS: Final = 40
# How much the best type must beat "none" by (in the weights' units): the trade of recall for
# precision, chosen by leave-one-split-out runs of the training script.
MARGIN: Final = 6.0


def _words(text: str) -> list[str]:
    return _WORD.findall(fold_text(text))


def small_talk(clause: str) -> bool:
    """Whether a clause is a greeting, thanks, an acknowledgement or a goodbye ("ok thats
    enough for today", "thanks for yesterday's help"), whatever time it names."""
    return bool(_SMALL_TALK.search(clause.strip()))


def no_memory(clause: str) -> bool:
    """Whether the clause holds no memory whatever its words say (see ``_REQUEST``)."""
    text = clause.strip()
    words = _words(text)
    return (
        len(words) < (_MIN_WORDS - 1 if re.match(r"^i(?:'m|m| am)\b", text, re.I) else _MIN_WORDS)
        or len(words) > _MAX_WORDS
        or text.endswith("?")
        or (bool(_REQUEST.match(text)) and not _STANDING.search(text))
        or small_talk(text)
        or bool(_PASSING.search(text))
    )


def features(clause: str, role: Role, question: str = "", base: str | None = None) -> list[str]:
    """The features the classifier weighs: words and first words of the clause, who says it,
    first person, relatives, names, technical tokens, numbers, a time resolved against the
    ``base`` date, cues (``_CUES``), and the words of the question the clause answers
    (prefixed ``q:``)."""
    words = _words(clause)
    dated = resolve_when(clause, base) is not None
    # a word by its first five letters: "married" and "marriage", "deploys" and "deployed"
    found = [f"w:{w}" for w in dict.fromkeys(w[:_STEM] for w in words)]
    if words:
        found.append(f"f:{words[0]}")
    if len(words) > 1:
        found.append(f"f2:{words[0]}_{words[1]}")
    found.append(f"role:{role.value}")
    if _FIRST_PERSON.intersection(words):
        found.append("first_person")
    if _RELATIVES.search(clause):
        found.append("relative")
    if _NAME.search(clause):
        found.append("name")
    if _TECH.search(clause):
        found.append("tech")
    if any(w[0].isdigit() for w in words):
        found.append("number")
    if dated:
        found.append("dated")
    found.extend(f"cue:{name}" for name, cue in _CUES if cue.search(clause))
    found.append("len:" + ("short" if len(words) < 6 else "mid" if len(words) < 14 else "long"))
    found.extend(f"q:{w}" for w in dict.fromkeys(_words(question)))
    found.append("bias")
    return found


def scores(found: Sequence[str], weights: Weights | None = None) -> dict[str, float]:
    """Each label's score for the features (``none`` and every memory type)."""
    table = disclosure_weights.WEIGHTS if weights is None else weights
    return {label: sum(row.get(f, 0.0) for f in found) for label, row in table.items()}


def classify_clause(
    clause: str,
    role: Role,
    question: str = "",
    base: str | None = None,
    weights: Weights | None = None,
    *,
    confirmed: bool = False,
) -> MemoryType | None:
    """The memory type a clause states, or None when it states none (the filter, then the
    classifier with its ``MARGIN``; a clause the user ``confirmed`` states a fact, and the
    classifier only says which type)."""
    if no_memory(clause):
        return None
    found = features(clause, role, question, base)
    got = scores(found, weights)
    none = got.pop(NONE, 0.0)
    allowed = [k for k in sorted(got) if not _LICENCE.get(k) or _LICENCE[k] & set(found)]
    if _THEIR_CHOICE.match(clause.strip()):
        allowed = [k for k in allowed if k != "decision"]  # "Sarah decided to quit her job"
    if not allowed:
        return None
    label = max(allowed, key=lambda k: got[k])
    if got[label] <= none + MARGIN and not confirmed:
        return None
    return MemoryType(label)


def disclosed(
    clause: str,
    role: Role,
    base: str | None,
    *,
    question: str = "",
    weights: Weights | None = None,
    confirmed: bool = False,
) -> tuple[MemoryType, str, When | None] | None:
    """(type, third-person text, time) of the memory a clause the rules made nothing of
    states, or None. A user's bare answer ("backend dev at a travel startup") is kept with
    the question it answers; one the user ``confirmed``, see ``classify_clause``."""
    kind = classify_clause(clause, role, question, base, weights, confirmed=confirmed)
    if kind is None:
        return None
    when = resolve_when(clause, base) if kind is MemoryType.EVENT else None
    text = clean(clause)
    said = third_person(text, role, team=kind is MemoryType.DECISION)
    if question and not _FIRST_PERSON.intersection(_words(text)) and role is Role.USER:
        said = f'Asked "{clean(question)}?", the user said: {text}'
    return kind, said, when


# "So to confirm, the rotation is weekly?" — "correct": the assistant's check, confirmed.
_CHECK_LEAD: Final = re.compile(
    r"^(?:so|ok(?:ay)?|just)?[,\s]*(?:to confirm|to be clear|to double-check|just checking|"
    r"if i understand(?: correctly)?|in other words)[,:\s]+",
    re.IGNORECASE,
)
_CONFIRM: Final = re.compile(
    r"^(?:yes|yeah|yep|yup|correct|right|exactly|that's right|that's correct|indeed|"
    r"affirmative|confirmed)\b(?![^.!,]*\b(?:but|except|not)\b)",
    re.IGNORECASE,
)


def asked(message: Message) -> str:
    """The question an assistant's message ends with ("" when it ends with none)."""
    found = sentences(normalized(message.text()))
    last = LEAD.sub("", found[-1]).strip() if found else ""
    return last[:-1].strip() if last.endswith("?") else ""


# A statement with a tag that asks to confirm it: "your team uses FastAPI, is that right?".
_CHECK_TAG: Final = re.compile(
    r"[,;]?\s+(?:(?:is|was)\s+(?:that|this|it)\s+(?:still\s+)?(?:right|correct|true|accurate|"
    r"the case)|(?:does|do)\s+(?:that|this|it)\s+still\s+(?:hold|apply|stand)|am i right|"
    r"right|correct)$",
    re.IGNORECASE,
)


_TAG_CHARS: Final = 60


def confirmed_check(previous: Message, reply: Message) -> str | None:
    """The statement an assistant's yes-or-no check makes when the user's reply confirms it
    ("So to confirm, handovers are on Monday?", "Your team deploys on Fly.io, is that
    right?" — "correct"), else None."""
    question = asked(previous)
    check = _CHECK_LEAD.match(question)
    tail = max(0, len(question) - _TAG_CHARS)  # the tag ends the question: read its end only
    tag = _CHECK_TAG.search(question, tail) if check is None else None
    if (check is None and tag is None) or not _CONFIRM.match(reply.text().strip()):
        return None
    said = question[check.end() :] if check is not None else question[: tag.start()] if tag else ""
    # "to confirm before I draft anything: your API …": what leads up to the colon is no check
    said = said.split(": ", 1)[-1]
    if re.match(r"^(?:what|which|who|where|when|why|how)\b", said, re.IGNORECASE):
        return None  # an open question: a "yes" confirms nothing
    return said


_PIECE: Final = re.compile(
    r"(?<=[a-z0-9)][.!?]|[.!?][.!?])(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bvs\.)(?<!\betc\.)\s+(?=[a-z])"
)


def pieces(clause: str) -> list[str]:
    """A clause cut where a sentence ends before a lower-case word ("quick one. we run …"),
    which the sentence splitter, reading the capital that starts a sentence, keeps as one."""
    return [p for p in (part.strip() for part in _PIECE.split(clause)) if p]


def units(messages: Sequence[Message]) -> list[tuple[Message, str, str]]:
    """(message, clause, question it answers) for every clause of the user's messages and
    every assistant check the user confirmed, segmented as ``conversation_facts`` segments
    them; the training script reads the sets with it."""
    found: list[tuple[Message, str, str]] = []
    previous: Message | None = None
    for message in messages:
        if message.role not in (Role.USER, Role.ASSISTANT):
            continue
        question = ""
        if message.role is Role.USER and previous is not None and previous.role is Role.ASSISTANT:
            question = asked(previous)
            check = confirmed_check(previous, message)
            if check is not None:
                found.append((previous, check, ""))
        first = True
        for sentence in sentences(normalized(message.text())):
            said = statement(sentence)
            if said is None:
                continue
            for clause in clauses(said):
                for text in pieces(LEAD.sub("", clause).strip()):
                    if statement(text) is None:
                        continue  # a piece that asks states nothing (``conversation``)
                    if message.role is Role.USER:
                        text = with_subject(text)
                        found.append((message, text, question if first else ""))
                    first = False
        previous = message
    return found
