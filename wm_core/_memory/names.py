"""Who and what a conversation names, and what its pronouns and "there" refer to.

Why it exists: the extraction rules (``rules``) keep facts about the people, pets, places and
things in the user's life or work ("my sister Laura", "a wrapper called paygate", "It's called
Crumb & Co."), and a later clause often speaks of them as "she", "it" or "there". This module
reads the names and keeps what the conversation has said so far (:class:`Talk`) so a later
clause can be read in full; ``rules`` decides what each clause is.

The module is pure: it reads text and the conversation so far, nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from wm_core._document.sentences import sentences
from wm_core._memory.speech import clean, third_person

# A name: up to three capitalised words (accented letters too), after an optional title.
_UPPER: Final = "A-ZÀ-ÖØ-Þ"
_LOWER: Final = "a-zß-öø-ÿ"
NAME: Final = (
    rf"(?-i:(?:(?:Mr|Mrs|Ms|Dr|Prof)\.?\s+)?[{_UPPER}][{_LOWER}'\-]+"
    rf"(?:\s+[{_UPPER}][{_LOWER}'\-]+){{0,2}})"
)
_THING: Final = (
    r"(?:The\s+)?[A-Z][\w&.'\-]*(?:\s+(?:&\s+)?[A-Z][\w&.'\-]*){0,3}|[a-z][\w]*[-_.][\w.\-]*\w|"
    r"[a-z][a-z0-9]{2,}"
)
_NOT_NAMES_TEXT: Final = (
    "The This That These Those It There Here What When Where Which Who How Why Yes No Okay "
    "Ok Sure Thanks Thank Hi Hello Hey Mostly Mainly Also And But So Then Now Just Only Our "
    "My Your His Her Their We You They He She I Not Sorry Fine Good Great Happy Done Back "
    "Indoor Outdoor Once Twice Cold Hot Perfect Will Let Please Monday Tuesday Wednesday "
    "Thursday Friday Saturday Sunday January February March April May June July August "
    "September October November December Christmas Easter Sprint Grades Lentil Rarely "
    "Slowly Today Yesterday Tomorrow Last Next Every Each Some Most Many I'd I'm I'll I've "
    # who someone is, not their name: "I'm Dutch", "I'm Catholic"
    "Dutch French Swiss Irish British English Scottish Welsh Spanish Portuguese Italian "
    "German Polish Danish Swedish Finnish Norwegian Greek Turkish Thai Chinese Japanese "
    "Korean Vietnamese Indian Pakistani Brazilian Mexican Canadian American Australian "
    "Russian Ukrainian Czech Austrian Belgian Hungarian Romanian Nigerian Kenyan Egyptian "
    "Israeli Lebanese Iranian Persian Filipino Indonesian Argentinian Chilean Colombian "
    "Peruvian Jewish Muslim Catholic Christian Hindu Buddhist Vegan Vegetarian Bilingual"
)
NOT_NAMES: Final = frozenset(_NOT_NAMES_TEXT.split())

RELATIONS: Final = (
    r"(?:best\s+|older\s+|younger\s+|little\s+|big\s+|new\s+|old\s+|twin\s+|rescue\s+)?"
    r"(?:wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|spouse|son|daughter|kid|child|"
    r"baby|brother|sister|sibling|mother|mom|mum|father|dad|parent|grandmother|grandma|"
    r"granny|grandfather|grandpa|grandson|granddaughter|aunt|uncle|cousin|nephew|niece|"
    r"mother-in-law|father-in-law|friend|neighbou?r|roommate|flatmate|boss|manager|colleague|"
    r"co-?worker|teammate|mentor|teacher|tutor|coach|doctor|therapist|physiotherapist|"
    r"physio|dentist|vet|landlord|client|customer|assistant|lead|cto|ceo|dog|cat|puppy|"
    r"kitten|parrot|bird|rabbit|bunny|hamster|horse|fish|turtle|tortoise|pet|cats|dogs|kids|"
    r"children|sons|daughters|"
    # the people of the user's work, by their role: "our designer Lena", "my PM, Ravi"
    r"designer|engineer|developer|dev|recruiter|intern|architect|analyst|director|founder|"
    r"co-?founder|accountant|lawyer|trainer|consultant|contractor|pm|product manager|"
    r"supervisor|advisor|adviser|tech lead|team lead|report|hire|editor|agent|partner-in-crime)"
)
_REL_NAME: Final = re.compile(
    rf"\b(?P<who>my|our|his|her|their)\s+(?P<rel>{RELATIONS}),?\s+(?P<name>{NAME})\b",
    re.IGNORECASE,
)
_REL_CALLED: Final = re.compile(
    rf"\bmy\s+(?P<rel>{RELATIONS})(?:'s name)?\s+(?:is\s+)?(?:called|named|is)\s+(?P<name>{NAME})\b",
    re.IGNORECASE,
)
_A_REL_NAMED: Final = re.compile(
    rf"\b(?:a|an)\s+(?P<rel>{RELATIONS})\s+(?:called|named)\s+(?P<name>{NAME})\b", re.I
)
_NAME_IS_MY: Final = re.compile(rf"\b(?P<name>{NAME})\s+is\s+my\s+(?P<rel>{RELATIONS})\b")
THEIR_NAME: Final = re.compile(rf"\b(?:his|her|their)\s+name\s+is\s+(?P<name>{NAME})\b", re.I)
_NAMES_LIST: Final = re.compile(
    rf"\b(?P<rel>{RELATIONS}),\s+(?P<a>{NAME})\s+and\s+(?P<b>{NAME})\b", re.IGNORECASE
)
REL_MENTION: Final = re.compile(rf"\bmy\s+(?P<rel>{RELATIONS})\b", re.IGNORECASE)
_APPOSITIVE: Final = re.compile(
    rf"\b(?P<who>(?i:my|our|his|her|their))\s+(?P<what>(?:[\w\-]+\s+){{0,2}}[\w\-]+),\s+"
    rf"(?P<name>{NAME})(?:,|[.!]?$)"
)
# "It's called Crumb & Co.": the name of the thing the clause before spoke of ("a bakery").
IT_CALLED: Final = re.compile(
    r"^(?:it|it's|it is|it was|she|she's|she is|he|he's|he is)\s+(?:(?:is|was)\s+)?"
    r"(?:called|named)\s+[`\"']?"
    r"(?P<name>(?-i:[A-Z0-9])[\w&.'\-]*(?:\s+(?:&\s+)?(?-i:[A-Z0-9])[\w&.'\-]*){0,3})",
    re.IGNORECASE,
)
LAST_THING: Final = re.compile(
    r"\b(?:a|an)\s+(?P<thing>(?:new\s+|small\s+|little\s+)?[a-z][a-z\-]+)(?=\s+(?:in|at|on|near|for|"
    r"with|that|which|where)\b|[.!,]?$)"
)
_CALLED: Final = re.compile(
    r"\b(?:(?P<det>(?i:a|an|the|our|my|their))\s+)?(?P<kind>(?:[\w\-]+\s+){0,2}?[\w\-]+)\s+"
    # "I hate being called buddy": how the user is addressed, no name of a thing
    rf"(?<!being )(?<!get )(?<!gets )(?<!got )(?:is\s+|was\s+)?(?:called|named)\s+[`\"']?(?P<name>{_THING})[`\"']?",
)
_IS_OUR: Final = re.compile(
    r"^[`\"']?(?P<name>[A-Z][\w.\-/]*\w|[\w.\-]+/[\w.\-]+)[`\"']?\s+is\s+(?:our|my)\s+"
    r"(?P<kind>(?:[\w\-]+\s+){0,3}[\w\-]+)"
)
NAME_SUBJECT: Final = re.compile(
    # a number or a preposition opening a bare answer is no name ("Four days", "In services/…")
    r"^(?!(?:One|Two|Three|Four|Five|Six|Seven|Eight|Nine|Ten|In|On|At|For|With|From|By|Of)\s)"
    rf"(?P<name>{NAME})(?:,\s+(?:he|she|it|they)(?:'s|\s+is|\s+was)?\b|"
    # who they are, between the name and the verb: "Tomasz from the data team maintains …"
    r"(?:\s+(?:from|at|in|on|of)\s+(?:the\s+|our\s+|my\s+)?(?-i:[a-z][\w\-]*)(?:\s+(?-i:[a-z]"
    r"[\w\-]*))?)?\s+(?:is|was|has|had|"
    r"lives|lived|works|worked|loves|likes|hates|prefers|turned|turns|opened|runs|uses|can|"
    r"speaks|plays|says|said|wants|needs|got|studies|teaches|moved|grew up|was born|"
    # any other verb in the third person, with what it does: "Tariq repairs motorbikes"
    r"(?-i:[a-z]{3,}(?<![su]s)s)(?=\s+\w))\b)"
)
ABOUT_NAMED: Final = re.compile(
    rf"^(?:my|our)\s+{RELATIONS}(?:,?\s+|\s+(?:is|was)\s+(?:called|named)\s+)(?P<name>{NAME})\b",
    re.IGNORECASE,
)

_MAY_NAME: Final = re.compile(r"(?<=\S)\s+[`\"']?[A-Z]|\b(?:called|named|is our|is my)\b")
_PRONOUN_SUBJECT: Final = re.compile(r"^(?P<pro>he|she|it|they)(?P<rest>'s\b|\s+\w)", re.I)
IS_RELATION: Final = re.compile(rf"^{RELATIONS}$", re.IGNORECASE)
# What a "he"/"she"/"it" clause says about someone is kept when it lasts ("she loves
# dinosaurs", "he's allergic to bees"), not a passing state ("she's fine, just tired", "he's
# upset", "he cried", "he has a cast for six weeks").
LASTING: Final = re.compile(
    r"^\s+(?:is|are)\s+(?!(?:\w+ly\s+|so\s+|very\s+|a bit\s+|just\s+|still\s+)*(?:fine|ok|okay|"
    r"good|great|tired|upset|sad|happy|excited|nervous|better|worse|sick|ill|asleep|doing|"
    r"feeling|going|getting|coming|back|home|here|there|in bed|"
    # what someone is doing now passes ("she's recovering at home"), unless it is a
    # project with its object ("he's restoring a 1972 Honda") or a lasting activity
    r"(?!studying|learning|working|living|training|teaching|running|building|writing|"
    r"maintaining|expecting)[a-z]+ing\b(?!\s+(?:a|an|the|his|her|their|\d)\b))\b)|"
    r"^\s+(?:has|loves|likes|adores|hates|lives|works|studies|speaks|plays|prefers|wants|needs|"
    r"owns|teaches|knows|can|can't|cannot|doesn't|never|always|usually)\b",
    re.IGNORECASE,
)
PASSING: Final = re.compile(
    r"\bfor\s+(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|several)\s+"
    r"(?:days?|weeks?|months?)\b|"
    # a stretch of now, or how someone compares with the user: "she's been practising all week",
    # "he's way better than me"
    r"\ball\s+(?:day|week|morning|evening|night|weekend)\b|"
    r"\b(?:better|worse|faster|slower)\s+than\s+(?:me|us|i am)\b",
    re.IGNORECASE,
)


@dataclass
class Talk:
    """What the conversation has said so far that later turns refer to."""

    last_name: str = ""  # the person or thing a "she" or "it" clause is about
    last_person: bool | None = None  # whether last_name is someone (a "he"/"she"), if known
    last_thing: str = ""  # what "it's called …" names: "a bakery" said just before
    follow_on: bool = False  # the sentence opens with "And" / "Also": it goes on from the last
    instructed: bool = False  # the user's last statement told the assistant how to work
    last_place: str = ""  # where "there" is: "lives in Toronto", "In services/paygate."
    last_relation: str = ""  # "my son": whose name "his name is Leo" gives
    names: set[str] = field(default_factory=set)


_PLACE: Final = re.compile(
    rf"\b(?i:in|to|from|near|at)\s+(?P<place>{NAME}|[\w.\-]+/[\w./\-]*\w)", re.IGNORECASE
)
_THERE: Final = re.compile(
    r"(?<=\s)(?:(?P<motion>(?:go|going|goes|went|move|moving|moved|fly|flying|flew|travel\w*|"
    r"drive|driving|drove|head\w*|come|coming|came|get|getting|got)\s+)there|there)\b",
    re.IGNORECASE,
)


def resolve_there(text: str, talk: Talk) -> str:
    """The clause with its "there" as the last place named ("we're going there" → "going to
    Toronto"), then that place noted for the next clause."""
    if talk.last_place:
        text = _THERE.sub(
            lambda m: (
                f"{m.group('motion')}to {talk.last_place}"
                if m.group("motion")
                else f"in {talk.last_place}"
            ),
            text,
            count=1,
        )
    for match in _PLACE.finditer(text):
        if match.group("place").split()[0] not in NOT_NAMES:
            talk.last_place = match.group("place")
    return text


_ASKED_RELATION: Final = re.compile(rf"\b(?:your|a|an)\s+(?P<rel>{RELATIONS})\b[^.!]*\?", re.I)


def note_question(text: str, talk: Talk) -> None:
    """What an assistant's question tells the next turn: "Do you have a teacher?" makes the
    answer's "her name is Mrs. Okafor" the teacher's name."""
    found = sentences(text)
    asked = _ASKED_RELATION.search(found[-1]) if found else None
    if asked:
        talk.last_relation = asked.group("rel").lower()


def named_facts(text: str, talk: Talk) -> list[tuple[str, str, dict[str, str]]]:
    """Entities a user's clause names: (text, name, fields)."""
    found: list[tuple[str, str, dict[str, str]]] = []

    def add(name: str, body: str, kind: str) -> None:
        if name.split()[0] in NOT_NAMES or any(f[1] == name for f in found):
            return
        found.append((body, name, {"name": name, "kind": kind}))

    if not _MAY_NAME.search(text):
        return found  # no capitalised word past the first, no "called": nothing is named
    for pattern in (_REL_CALLED, _A_REL_NAMED, _REL_NAME, _NAME_IS_MY):
        for match in pattern.finditer(text):
            rel = match.group("rel").lower()
            name = match.group("name")
            who = (match.groupdict().get("who") or "my").lower()
            earlier = [f[1] for f in found] or [talk.last_name]
            owner = "the user's" if who in ("my", "our") else f"{earlier[0] or who}'s"
            add(name, f"{name} is {owner} {rel}", rel)
    for match in _NAMES_LIST.finditer(text):
        rel = match.group("rel").lower().rstrip("s")
        rel = {"kid": "kid", "childre": "child", "childr": "child"}.get(rel, rel)
        for name in (match.group("a"), match.group("b")):
            add(name, f"{name} is the user's {rel}", rel)
    for match in _APPOSITIVE.finditer(text):
        owner = "the user's"
        if match.group("who").lower() in ("his", "her", "their"):
            if talk.last_name and talk.last_person:
                owner = f"{talk.last_name}'s"
            elif talk.last_relation:
                owner = f"the user's {talk.last_relation}'s"
            else:
                continue
        add(match.group("name"), f"{match.group('name')} is {owner} {match.group('what')}", "")
    for match in _CALLED.finditer(text):
        name = match.group("name").strip().rstrip(".")
        kind = match.group("kind").lower()
        det = (match.group("det") or "a").lower()
        if kind in ("is", "was", "be"):
            continue
        owner = "the user's" if det in ("our", "my") else ("the" if det == "the" else det)
        add(name, f"{name} is {owner} {kind}", kind)
    ours = _IS_OUR.match(text)
    if ours:
        add(ours.group("name"), third_person(clean(text)), ours.group("kind").lower())
    return found


def resolve_pronoun(text: str, talk: Talk) -> str | None:
    match = _PRONOUN_SUBJECT.match(text)
    if match is None or not talk.last_name:
        return None
    rest = text[match.end("pro") :]
    if rest.startswith("'s"):  # "she's been doing it for years": has, else is
        rest = (" has" if re.match(r"'s\s+(?:been|got|had)\b", rest) else " is") + rest[2:]
    pro = match.group("pro").lower()
    mismatch = talk.last_person is not None and (pro == "it") is talk.last_person
    if pro == "they" or mismatch:
        return None  # "it" is not the sister just named, "she" not the repo
    if not re.search(r"\w", rest.strip().removeprefix("is").removeprefix("was")):
        return None  # "It is, though …" says nothing about it
    return talk.last_name + rest
