"""How the offline extractor reads conversation text: statements, clauses, the third person.

Why it exists: the extraction rules (``rules``) and the turn-level reading (``conversation``)
need one way to tell a statement from a question or a hypothetical, to cut a sentence into
clauses that state one fact each, and to turn "I live in Porto" into "The user lives in
Porto" (and an assistant's "I" into "the assistant").
"""

from __future__ import annotations

import re
from typing import Final

from wm_core._messages import Role

# -- what is not a statement -------------------------------------------------------------------

_QUESTION_START: Final = re.compile(
    r"^(?:what|how|why|when|where|which|who|whom|whose|should|could|would|can|does|did|is|"
    r"are|was|were|will|shall|may|might|have|has|am|any|"
    # "do you …" asks; "do that, we can't afford more" tells
    r"do(?=\s+(?:you|we|i|they|he|she|u|people|y'all)\b))\b",
    re.IGNORECASE,
)
_THANKS: Final = re.compile(
    r"^\s*(?:thanks|thank you|thx|ty|cheers|many thanks)(?:\s+(?:so much|a lot|again))?\s+for\b",
    re.IGNORECASE,
)
_HYPOTHETICAL: Final = re.compile(
    # ("unless" is no hypothesis: "no bullet points unless I ask" is a standing rule)
    # ("I'd love it if you …" is a polite request, no hypothesis either)
    r"\b(?:(?<!love it )(?<!like it )(?<!appreciate it )if|suppose|supposing|imagine|"
    r"hypothetically|assuming|let's say|in case|whether)\b",
    re.IGNORECASE,
)
# The past-tense verbs of a choice made ("we decided", "Sarah went with"): one list for the
# rules (``decisions._CHOSE`` adds the group verbs "agreed" and "voted" and the participles) and
# the clause classifier (``disclosure._THEIR_CHOICE``).
CHOSE: Final = ("decided", "chose", "picked", "opted", "settled", "went with")
TENTATIVE: Final = re.compile(
    r"^(?:maybe|perhaps|probably|(?:i|we) might|(?:i|we) could|(?:i|we) may|i wonder|i'm not sure|not sure|"
    r"i guess|i think i|i'll think|hmm)\b",
    re.IGNORECASE,
)
LEAD: Final = re.compile(
    r"^\s*(?:(?:ok(?:ay)?|great|nice|thanks|thank you|perfect|cool|also|and|so|now|btw|"
    r"by the way|fyi|fwiw|tbh|ftr|heads up|quick context|small update|side note|"
    r"actually|just so you know|for the record|oh|well|yes|yeah|yep|right|"
    r"hey|hi|hello|ha|haha|sure|sorry|no|nope|anyway|honestly|good|fine|ugh|argh|meh|omg|"
    r"lol|wow|phew|man|hmm+(?=,|\s+(?:no|nope|ok|okay|yes|yeah|yep|actually|so|well)\b))\b(?:\s+there)?"
    r"[,.!]?\s*)+",
    re.IGNORECASE,
)
_TRAILER: Final = re.compile(
    r"(?:,?\s+(?:by the way|btw|though|too|lately|at the moment|right now|for now|anymore|"
    r"these days|now|instead|from now on|please))+\s*[.!]*$",
    re.IGNORECASE,
)
_SUBJECT_AHEAD = (
    r"(?=(?:now\s+|also\s+|then\s+|(?:last|next|this|in|on)\s+[\w\-]+,?\s+|"
    r"(?:yesterday|today|tomorrow),?\s+)?(?:i|i'm|i've|i'll|i'd|my|we|we're|we've|we'll|our|please|"
    r"he|she|he's|she's|"
    r"they|they're|(?-i:[A-Z][a-z]+)\s+(?:is|was|has|had)\s)\b)"
)
# A comma or a colon before a new subject starts a new clause: "we're a team of six, we
# deploy to AWS, our main language is TypeScript" states three facts. A comma before "I"
# always does; before "we", "our", "my" it does when no "and" joins a list of names instead.
_COMMA_SUBJECT = (
    r"(?=(?:i|i'm|i've|i'll|i'd|we|we're|we've|we'll|we'd|our|my|he|she|he's|she's|they|"
    r"they're|let's)\s)"
)
_CLAUSE_SPLIT: Final = re.compile(
    r";\s+|\s+—\s+|,\s+so\s+|"
    rf"(?:,|:)\s+{_COMMA_SUBJECT}|"
    rf",?\s+(?:and|but|although|though|while|whereas)\s+{_SUBJECT_AHEAD}",
    re.IGNORECASE,
)
_LONE_NAME: Final = re.compile(
    r"(?:^|,\s+)(?:(?-i:[A-Z][\w\-']+)(?:\s+(?-i:[A-Z][\w\-']+))?|(?i:my|our)\s+[a-z\-]+|"
    r"(?i:me))$"
)
# "I grew up in Nairobi and moved to Toronto": the second clause's subject is the first's.
# A life verb after "and" with no subject of its own starts a clause of the same speaker.
_ELIDED: Final = re.compile(
    r",?\s+and\s+(?=(?:then\s+|later\s+|now\s+|also\s+)?(?:moved|relocated|grew up|"
    r"started|joined|left|quit|studied|graduated|married|got|became|live|work|teach|study|"
    r"speak|have|had|went|came|bought|sold|adopted|switched|ran|finished|lost)\b)",
    re.IGNORECASE,
)


# Informal spellings read as the words they stand for ("gonna go w/ postgres bc …"). Each one
# is a whole run of word characters, slashes and apostrophes, so one pass of one alternation
# replaces them all: a replacement is made of other runs (or none), so it never makes or
# unmakes a match of another spelling, and the pass gives what one substitution per spelling
# in turn gave (tests/unit/wm_core/test_memory_speech_spellings.py holds it to that). Measured
# (2026-12-07): a 170-character chat message 287 → 69 µs, 100 KB of words 124-165 → 32-53 ms;
# the 30 passes were a quarter of the offline extractor's time.
def _written_out(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Each spelling of each pair ("a|b", full) → its full form, in the pairs' order."""
    return {spelling: full for spellings, full in pairs for spelling in spellings.split("|")}


_INFORMAL_WORDS: Final = _written_out(
    (
        ("gonna", "going to"),
        ("wanna", "want to"),
        ("gotta", "have to"),
        ("w/", "with"),
        ("w/o", "without"),
        ("bc|b/c|cuz|coz|'cause", "because"),
        ("lets", "let's"),
        ("im", "I'm"),
        ("ive", "I've"),
        ("dont", "don't"),
        ("cant", "can't"),
        ("doesnt", "doesn't"),
        ("didnt", "didn't"),
        ("wont", "won't"),
        ("isnt", "isn't"),
        ("pls|plz", "please"),
        ("thx|thnx|ty", "thanks"),
        ("ur", "your"),
        ("u", "you"),
        ("i", "I"),
        ("idk", "I don't know"),
        ("tbh|honestly|ngl", ""),
        ("hes", "he's"),
        ("shes", "she's"),
        ("whats", "what's"),
        ("thats", "that's"),
        ("tmrw|tmr|tomoz", "tomorrow"),
    )
)
_INFORMAL: Final = re.compile(
    rf"(?<![\w/'])(?:{'|'.join(map(re.escape, _INFORMAL_WORDS))})(?![\w/'])", re.IGNORECASE
)
# Then two spellings that depend on their neighbours: "name's Priya", "name is Priya" with the
# "my" chat leaves out; "backend @ Kestrel Labs", where "@" before a name is "at" (not an
# address or a handle).
_INFORMAL_IN_CONTEXT: Final = (
    (re.compile(r"(?<![\w/'])(?<!\w\s)name(?:'s|\s+is)(?=\s+(?-i:[A-Z]))(?![\w/'])",
                re.IGNORECASE), "my name is"),
    (re.compile(r"(?<![\w/'])(?<=\s)@(?=\s+(?-i:[A-Z]))(?![\w/'])", re.IGNORECASE), "at"),
)  # fmt: skip
# A weekday written short after the word that dates it ("next thu", "on fri", "by weds"); alone
# "sat" and "sun" are other words.
_SHORT_DAYS: Final = _written_out(
    (
        ("mon", "monday"),
        ("tue|tues", "tuesday"),
        ("wed|weds", "wednesday"),
        ("thu|thur|thurs", "thursday"),
        ("fri", "friday"),
        ("sat", "saturday"),
        ("sun", "sunday"),
    )
)
_SHORT_DAY: Final = re.compile(
    r"\b(?P<when>next|last|this|on|by|until|till|coming|from)\s+"
    rf"(?P<day>{'|'.join(_SHORT_DAYS)})\b",
    re.IGNORECASE,
)
# A day of the month said in words ("from the fifteenth", "the thirtieth of September", "on
# the twenty first"): written in digits, so the time rules read one spelling.
_ORDINALS: Final = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13,
    "fourteenth": 14, "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18,
    "nineteenth": 19, "twentieth": 20, "thirtieth": 30,
}  # fmt: skip
_ORDINAL_WORD = "|".join(sorted(_ORDINALS, key=len, reverse=True))
_ORDINAL_DAY: Final = re.compile(
    rf"\bthe\s+(?:(?P<tens>twenty|thirty)[\s-]+)?(?P<unit>{_ORDINAL_WORD})\b"
    # a date only where a date is meant: after "on", "from", "by" …, or before "of <month>"
    r"(?=\s+of\s+(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))|"
    rf"\b(?P<prep>on|by|from|until|till|before|after|since)\s+the\s+(?:(?P<tens2>twenty|thirty)"
    rf"[\s-]+)?(?P<unit2>{_ORDINAL_WORD})\b(?!\s+(?:time|one|round|place|half|week|day)\b)",
    re.IGNORECASE,
)


def _ordinal_day(match: re.Match[str]) -> str:
    tens = (match.group("tens") or match.group("tens2") or "").lower()
    unit = _ORDINALS[(match.group("unit") or match.group("unit2")).lower()]
    day = unit + {"": 0, "twenty": 20, "thirty": 30}[tens]
    if day > 31 or (tens and unit > 9):
        return match.group()
    suffix = "th" if 10 < day % 100 < 14 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    prep = f"{match.group('prep')} " if match.group("prep") else ""
    return f"{prep}the {day}{suffix}"


def _spelled_out(table: dict[str, str], said: str) -> str:
    """What ``table`` writes for ``said``, a match of its keys' alternation: the first key that
    matches it as a whole, ignoring case as the pattern did ("ı" and "ſ" match "i" and "s"
    there, though ``str.lower`` keeps them)."""
    full = table.get(said.lower())
    if full is None:
        full = next(v for k, v in table.items() if re.fullmatch(re.escape(k), said, re.I))
    return full


def normalized(text: str) -> str:
    """``text`` with its informal spellings written out ("gonna" → "going to", "w/" →
    "with", "bc" → "because", a lone "i" → "I", "next thu" → "next thursday", "from the
    fifteenth" → "from the 15th"), so every rule reads one spelling."""
    text = _INFORMAL.sub(lambda m: _spelled_out(_INFORMAL_WORDS, m.group()), text)
    for pattern, full in _INFORMAL_IN_CONTEXT:
        text = pattern.sub(full, text)
    text = _SHORT_DAY.sub(
        lambda m: f"{m.group('when')} {_spelled_out(_SHORT_DAYS, m.group('day'))}", text
    )
    text = _ORDINAL_DAY.sub(_ordinal_day, text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


# -- the third person --------------------------------------------------------------------------

_USER_WORDS: Final = {
    "i": "the user",
    "i'm": "the user is",
    "i've": "the user has",
    "i'll": "the user will",
    "i'd": "the user would",
    "me": "the user",
    "my": "the user's",
    "mine": "the user's",
    "myself": "the user",
    "we": "the user and others",
    "we're": "the user and others are",
    "we've": "the user and others have",
    "we'll": "the user and others will",
    "we'd": "the user and others would",
    "us": "the user and others",
    "our": "the user's",
    "ours": "the user's",
    "let's": "the user and others will",
    "you": "the assistant",
    "your": "the assistant's",
}
_TEAM_WORDS: Final = {
    "we": "the team",
    "we're": "the team is",
    "we've": "the team has",
    "we'll": "the team will",
    "we'd": "the team would",
    "us": "the team",
    "our": "the team's",
    "let's": "the team will",
}
_ASSISTANT_WORDS: Final = {
    "i": "the assistant",
    "i'm": "the assistant is",
    "i've": "the assistant has",
    "i'll": "the assistant will",
    "i'd": "the assistant would",
    "me": "the assistant",
    "my": "the assistant's",
    "you": "the user",
    "you're": "the user is",
    "you've": "the user has",
    "your": "the user's",
    "we": "they",
    "we're": "they are",
    "we'll": "they will",
    "our": "the user's",
    "let's": "they will",
}
_WORD_RE: Final = re.compile(
    r"\b(?:" + "|".join(map(re.escape, _ASSISTANT_WORDS | _USER_WORDS)) + r")\b", re.I
)
_NOT_VERBS_TEXT: Final = (
    "will would can could should shall may might must had was did just also really usually "
    "always never often still now then only mostly mainly currently recently generally "
    "normally typically actually sometimes rarely already finally even to the a an not "
    "definitely strongly much"
)
_NOT_VERBS: Final = frozenset(_NOT_VERBS_TEXT.split())
_ADVERB_SKIP_TEXT: Final = (
    "just also really usually always never often still now then only mostly mainly "
    "currently recently generally normally typically actually sometimes rarely already "
    "finally even definitely strongly much"
)
_ADVERB_SKIP: Final = frozenset(_ADVERB_SKIP_TEXT.split())
_LY_VERBS: Final = frozenset(
    ["apply", "reply", "rely", "supply", "multiply", "imply", "comply", "bully", "rally", "tally"]
)
_PAST_FORMS_TEXT: Final = (
    "went had got broke lost quit left took made met saw came began ran won bought sold "
    "gave fell wrote spent found became grew flew drove ate told said chose rode spoke woke "
    "wore swam sang sat stood understood forgot thought brought bought caught taught kept "
    "slept felt sent built paid held heard"
)
_PAST_FORMS: Final = frozenset(_PAST_FORMS_TEXT.split())
# Present verbs that end like a past ("I need" is "the user needs").
_ED_PRESENT_TEXT: Final = "need feed bleed breed speed proceed succeed exceed heed embed shed wed"
_ED_PRESENT: Final = frozenset(_ED_PRESENT_TEXT.split())
_IRREGULAR: Final = {"am": "is", "have": "has", "do": "does", "go": "goes", "are": "is",
                     "don't": "doesn't", "haven't": "hasn't", "was": "was", "were": "was"}  # fmt: skip


# Words after which the assistant's "you" is a subject, not an object.
_SUBJECT_BEFORE: Final = frozenset(
    {"", "since", "because", "as", "that", "when", "and", "if", "so"}
)


def _third_singular(verb: str) -> str:
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(lower) > 2 and lower.endswith("y") and lower[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def third_person(
    text: str, role: Role = Role.USER, *, sentence: bool = True, team: bool = False
) -> str:
    """``text`` as a later reader needs it: the speaker's pronouns replaced ("I" is "the
    user" in a user's message, "the assistant" in an assistant's; "we" is "the user and
    others", or "the team" for a ``team`` statement such as a decision), the verb after "I" agreed ("I live"
    → "the user lives"); capitalised when it is a ``sentence``."""
    table = _ASSISTANT_WORDS if role is Role.ASSISTANT else _USER_WORDS
    if team:
        table = {**table, **_TEAM_WORDS}
    words = text.split(" ")
    out: list[str] = []
    conjugate = False
    for word in words:
        core = word.strip(",.;:!?\"'()")
        lower = core.lower()
        if conjugate and core and core.isalpha() and core.islower():
            if lower in _ADVERB_SKIP or (
                lower.endswith("ly") and len(lower) > 4 and lower not in _LY_VERBS
            ):  # any adverb in -ly: "I personally prefer" → "the user personally prefers"
                out.append(word)
                continue
            conjugate = False
            past = lower.endswith("ed") and lower not in _ED_PRESENT
            if lower not in _NOT_VERBS and not past and lower not in _PAST_FORMS:
                word = word.replace(core, _third_singular(core), 1)
            out.append(word)
            continue
        conjugate = False
        if lower in table:
            replaced = table[lower]
            out.append(word.replace(core, replaced, 1))
            # the verb after "I", and after the assistant's "you" as a subject ("since you
            # already run Redis" → "since the user already runs Redis")
            before = out[-2].lower().strip(",") if len(out) > 1 else ""
            conjugate = lower == "i" or (
                role is Role.ASSISTANT and lower == "you" and before in _SUBJECT_BEFORE
            )
            continue
        if lower in ("don't",) and out and out[-1].lower().endswith(("user", "assistant")):
            word = word.replace(core, "doesn't", 1)
        out.append(word)
    result = " ".join(out)
    return result[:1].upper() + result[1:] if sentence else result


def clean(text: str) -> str:
    text = " ".join(text.split()).strip(" \"'`")
    text = _TRAILER.sub("", text)
    return text.rstrip(".!;:, ")


VAGUE: Final = frozenset({"it", "that", "this", "them", "those", "so", "you", "one"})


# A condition before a comma, not a question: "when you write Python for me, use type hints".
_CONDITION: Final = re.compile(r"^(?:when|whenever)\s+(?:you|i|we)\s+[^,?]{3,60},\s+\w", re.I)


# A request for every later answer asked as a question is an instruction, not a question.
_STANDING_ASK: Final = re.compile(
    r"^(?:can|could|would|will)\s+you\s+(?:please\s+)?"
    r"(?P<rest>(?=.*\b(?:always|never|from now on|going forward|in future|by default)\b)[^?]+)"
    r"\?*$",
    re.IGNORECASE,
)


# A question that states its premise first: "since I'm allergic to penicillin, is amoxicillin
# a problem?" tells the allergy, "As a nurse on night shifts, how do I sleep by day?" the job.
_PREMISE: Final = re.compile(
    r"^(?:(?:since|as|because|given that|seeing as)\s+(?P<fact>(?:i|i'm|i've|my|we|we're|we've|"
    r"our)\s[^,?]{3,120})|as\s+(?P<role>an?\s+"
    # "as a rule", "as a result": set phrases, no one's role
    r"(?!(?:rule|result|matter|reminder|test|whole|bonus|joke|favou?r|courtesy|side|quick|"
    r"first|start|last|example|precaution|group|team|company|family)\b)[^,?]{2,80}?)"
    r"(?:\s+\([^)]*\))?),\s+"
    r"(?=(?:what|how|why|when|where|which|who|should|could|would|can|does|do|is|are|will|any)\b)"
    r"[^?]*\?$",
    re.IGNORECASE,
)


# A question typed in lower case after a statement, which the sentence splitter keeps as one
# sentence ("… flying home on the 29th. any day trips you'd recommend?"): the statement holds.
_ASKED_AFTER: Final = re.compile(r"^(?P<head>.+?[.!])\s+(?=[a-z])[^.!?]+\?\s*$")


def premise(question: str) -> str | None:
    """What a question states as its premise (``_PREMISE``), as a statement, or None."""
    found = _PREMISE.match(LEAD.sub("", question).strip())
    if found is None:
        return None
    return found.group("fact") or f"I'm {found.group('role')}"


def statement(sentence: str) -> str | None:
    """The sentence without its lead-in, or None when it states nothing (a question states
    only its premise: ``_PREMISE``)."""
    if _THANKS.match(sentence):
        return None  # "thanks for the help today!" thanks, it tells nothing
    text = LEAD.sub("", sentence).strip()
    standing = _STANDING_ASK.match(text)  # "can you always answer in bullets from now on?"
    if standing is not None:
        return standing.group("rest")
    told = premise(text)
    if told is not None:
        return told
    asked_after = _ASKED_AFTER.match(text)
    if asked_after is not None:  # "… home on the 29th. any day trips you'd recommend?"
        return statement(asked_after.group("head"))
    condition = _CONDITION.match(text)  # "when you write Python, type hints everywhere"
    if not text or text.endswith("?") or (_QUESTION_START.match(text) and not condition):
        return None
    # a hypothesis in the first clause makes the sentence one ("If we moved to Go, …", "I'd use
    # Redis if we had more memory"); after a comma it is a purpose or a condition of what the
    # sentence states ("moving it to Monday, so someone's around if it breaks")
    if _HYPOTHETICAL.search(text.split(",", 1)[0]) or TENTATIVE.match(text):
        return None
    return text


# A sentence said aloud and transcribed has no punctuation: "he's coming from the 15th he just
# finished his degree", "my last day is the 30th of september i start in october". In such a
# run-on (``_RUN_ON_WORDS`` words or more, no comma) a new subject after a time or after a
# name's mention ("the dog her name is Biscuit") starts a new clause.
_RUN_ON_WORDS: Final = 16
_RUN_ON_BREAK: Final = re.compile(
    r"(?<=\S\s)(?P<after>\S+\s+(?:today|tonight|tomorrow|yesterday|now|week|month|year|weekend|"
    r"morning|evening|\d{1,2}(?:st|nd|rd|th)|\d{4}|(?:mon|tues|wednes|thurs|fri|satur|sun)day|"
    r"january|february|march|april|may|june|july|august|september|october|november|december))"
    r"\s+(?=(?:i|i'm|i've|i'll|he|she|he's|she's|we|we're|we've|my|our|they|they're)\s)|"
    r"(?<=\S)\s+(?=(?:his|her|their)\s+name\s+is\b)",
    re.IGNORECASE,
)


def _run_on(sentence: str) -> str:
    """``sentence`` with a semicolon where a run-on starts a new clause (``_RUN_ON_BREAK``)."""
    if "," in sentence or len(sentence.split()) < _RUN_ON_WORDS:
        return sentence
    return _RUN_ON_BREAK.sub(lambda m: f"{m.group('after') or ''}; ", sentence)


def clauses(sentence: str) -> list[str]:
    """The clauses of a sentence that can each state one fact: cut at a semicolon, a dash,
    ", so", a comma or colon before a new subject, "and"/"but" before one, a new subject in a
    run-on (``_run_on``); a clause whose subject is left out after "and" ("… and moved to
    Toronto") gets the first clause's "I"."""
    parts = [p.strip(" ,") for p in _CLAUSE_SPLIT.split(_run_on(sentence))]
    for index in range(len(parts) - 2, -1, -1):
        # "Priya and I settled on GraphQL": one subject of two people, not two clauses
        pair = f"{parts[index]} and {parts[index + 1]}"
        if _LONE_NAME.search(parts[index]) and pair in sentence:
            parts[index : index + 2] = [pair]
    found: list[str] = []
    for part in parts:
        if not part:
            continue
        pieces = _ELIDED.split(part)
        found.append(pieces[0])
        if re.match(r"^i\b", pieces[0], re.IGNORECASE):
            found.extend(f"I {piece}" for piece in pieces[1:] if piece)
        elif len(pieces) > 1:
            found[-1] = part
    return found


def object_of(text: str) -> str | None:
    what = clean(text)
    first = what.lower().split(" ", 1)[0] if what else ""
    if not what or (first in VAGUE and len(what.split()) <= 2):
        return None
    if what.lower().startswith(("you to", "it when you", "you ", "to know", "your ")):
        return None
    return what


_CONTRACTIONS: Final = (
    (re.compile(r"^i'm\b", re.I), "i am"),
    (re.compile(r"^i've\b", re.I), "i have"),
    (re.compile(r"^i'd\b", re.I), "i would"),
    (re.compile(r"^i'll\b", re.I), "i will"),
)


def expanded(text: str) -> str:
    """The clause with "I'm" as "I am" (and the like), for the rules to read one spelling."""
    for pattern, full in _CONTRACTIONS:
        text = pattern.sub(full, text)
    return text


REASON: Final = re.compile(
    # "as" only before a subject: "as we need replay", not "as a service"
    r",?\s+(?:because|since|given that|due to|so that|as(?=\s+(?:we|i|it|they|the|our|there)\b))\s+",
    re.I,
)


# Chat drops the "I": "been getting into bouldering lately", "lost my wallet on the tram
# yesterday", "haven't been sleeping well". A clause that opens with a verb in the past or
# perfect (never a bare verb: "use pytest" asks the assistant) is the speaker's.
_DROPPED_I: Final = re.compile(
    r"^(?:(?:just|finally|also|recently|actually|already|still|totally|kinda|literally)\s+)?"
    r"(?:been|haven't|hasn't|have been|had|got|went|lost|found|bought|took|made|sent|met|saw|"
    r"spent|left|quit|sold|won|broke|ran|flew|drove|ate|began|fell|felt|thought|told|heard|"
    r"kept|paid|hurt|caught|[a-z]{2,}ed(?<!\bneed)(?<!\bfeed)(?<!\bseed)(?<!\bspeed)(?<!\bshed)"
    r"(?<!\bembed))\s+(?!(?:you|it|that|this|them)\b)\w",
    re.IGNORECASE,
)


# ... and the "I'm" before a taste or a state: "not a fan of emojis", "big fan of jazz".
_DROPPED_IM: Final = re.compile(
    r"^(?:not\s+)?(?:(?:a\s+)?(?:big\s+|huge\s+)?fan of|(?:really\s+)?into|big on|keen on|"
    r"sick of|tired of|obsessed with|allergic to|more of an?)\s+\w",
    re.IGNORECASE,
)


def with_subject(clause: str) -> str:
    """A user's clause with the "I" it left out put back (``_DROPPED_I``, ``_DROPPED_IM``),
    else as it is."""
    if _DROPPED_IM.match(clause):
        article = (
            ""
            if re.match(
                r"^(?:not\s+)?(?:a\s|an\s|(?:really\s+)?into|big on|keen|sick|"
                r"tired|obsessed|allergic|more)",
                clause,
                re.I,
            )
            else "a "
        )
        said = clause[:1].lower() + clause[1:]
        if article and said.lower().startswith("not "):
            return f"I'm not a {said[4:]}"
        return f"I'm {article}{said}"
    if not _DROPPED_I.match(clause):
        return clause
    said = clause if clause[:2].isupper() else clause[:1].lower() + clause[1:]
    return f"I've {said}" if said.startswith("been ") else f"I {said}"
