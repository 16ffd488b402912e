"""The offline extraction rules: what a conversation states that is worth remembering.

Why it exists: with no model the service must still keep what a conversation plainly says,
about the user and about the people, places and things in their life or work, one fact per
memory, in the third person, with the message that states it. The rules read both roles and
the order of turns:

- a statement is cut into clauses ("I prefer tabs over spaces, and my name is Dana" is a
  preference and a profile fact); a question, a hypothetical or a tentative opening states
  nothing, nor does a clause that only appraises (``appraisal``: "Orla is a legend", "I'm
  gutted", "I'm allergic" with its object lost);
- ``profile``: who the user is (name, age, home, work, health, diet, languages, habits);
- ``preference`` (read by ``preferences``): what the user likes, dislikes, prefers, and what
  they want the assistant to always or never do;
- ``decision`` (either role, read by ``decisions``): what was chosen, over what and why;
  who agreed across turns is read by ``agreements``;
- ``event``: a clause with a time, resolved against its message's date (``when``); plans and
  commitments ("I'm planning to …", "I promised …") are events too, dated when they say when;
- ``entity``: named people, pets, places and things: "my sister Laura …", "a wrapper called
  paygate", "Amara is 8", and what a later "she"/"it" clause says about the last one named.

Names, and what a later "she", "it" or "there" refers to, are read by ``names``; a change of
a fact stated before ("my name is now …", "I moved to …", "I don't prefer A any more", "we
switched from A to B") by ``changes``.

The module is pure: the message time is an argument, never a clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

from wm_core._document.sentences import sentences, stamp_date
from wm_core._memory.appraisal import only_appraises
from wm_core._memory.changes import (
    MOVED,
    given_up,
    home_of,
)
from wm_core._memory.decisions import (
    DECIDED_LIST,
    UNDECIDED,
    change_done,
    decision_in,
    puts_off,
)
from wm_core._memory.disclosure import small_talk
from wm_core._memory.model import MemoryType, memory_key
from wm_core._memory.names import (
    ABOUT_NAMED,
    IS_RELATION,
    IT_CALLED,
    LAST_THING,
    LASTING,
    NAME,
    NAME_SUBJECT,
    NOT_NAMES,
    PASSING,
    REL_MENTION,
    RELATIONS,
    THEIR_NAME,
    Talk,
    named_facts,
    resolve_pronoun,
    resolve_there,
)
from wm_core._memory.preferences import read_preference
from wm_core._memory.profile import YEARLY, profile_facts
from wm_core._memory.speech import (
    clean,
    expanded,
    statement,
    third_person,
)
from wm_core._memory.subjects import REPLACES
from wm_core._memory.when import When, resolve_when
from wm_core._messages import Role

# -- the facts ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fact:
    """One memory a conversation states."""

    type: MemoryType
    text: str  # third person, one sentence, without the final period
    subject: str  # what it is about: a profile attribute, a preference's object, a name, …
    source: str  # the sentence it came from
    message_ids: tuple[str, ...] = ()
    fields: Mapping[str, str] = field(default_factory=dict)
    when: When | None = None


# Someone in the user's life not named: "My wife works as a nurse", "My partner is vegetarian".
_ABOUT_RELATIVE: Final = re.compile(
    rf"^(?:my|our)\s+(?P<rel>{RELATIONS})\s+(?!(?:is|was)\s+(?:called|named)\b)(?:is|was|works|"
    r"worked|lives|lived|has|loves|likes|hates|speaks|plays|studies|teaches|runs|owns|can't|"
    r"cannot|doesn't|never|always)\b",
    re.IGNORECASE,
)
# Someone named last, by a possessive before a relation and a name: "her husband Piotr".
_THEIR_RELATION: Final = re.compile(
    rf"\b(?:his|her)(?=\s+(?:{RELATIONS})\s+(?P<name>{NAME}))", re.I
)
# A subject said twice, as some speakers of other languages do: "My son Mateus he is …".
_RESUMPTIVE: Final = re.compile(
    rf"^(?P<who>(?:my|our)\s+(?:{RELATIONS})\s+{NAME}),?\s+(?:he|she)\s+(?=\w)", re.I
)
# "I've been working at IBM since 2015": a lasting state since then, not an event then.
_SINCE_STATE: Final = re.compile(
    r"\b(?:'ve|have|has)\s+(?:been|lived|worked|known|had|owned|played|taught)\b", re.I
)

# Thinking is no fact: "I always thought it was Sydney", "I guess so", "I remember that one".
_MENTAL: Final = re.compile(
    r"^i\s+(?:(?:always|never|just|really|honestly|also|still)\s+)*(?:thought|think|believe|"
    r"assumed|assume|guess|suppose|wonder|wondered|remember|forgot|figured|knew|know|feel like|"
    r"mean|meant|see|saw that|understand|get it|agree|disagree)\b",
    re.I,
)
# A clause that denies: "Nothing special today", "No plans yet", "None of that matters".
_NOTHING: Final = re.compile(r"^(?:nothing|no|none|not|nobody|neither)\b", re.I)
_PROMOTED: Final = re.compile(
    r"^i\s+(?:just\s+|finally\s+)?(?:got|was|have been|'ve been)\s+promoted\s+to\s+"
    r"(?:a\s+|an\s+|the\s+)?(?P<role>[\w\- ]+?)(?=\s+(?:last|this|on|in|yesterday|today|at|"
    r"after)\b|[.!,]|$)",
    re.IGNORECASE,
)

# How something is done: "to deploy, run make release", "first X, then Y".
_PROCEDURE: Final = re.compile(
    r"^(?:to|before|after|whenever)\s+[\w\s\-]{2,40}?,\s+(?:(?:we|you|i)\s+)?(?:always\s+|first\s+|"
    r"just\s+)?(?:run|use|call|open|check|restart|deploy|build|push|tag|merge|need to|have to|"
    r"must|should)\b|\bfirst\b[^.]*,\s+then\b|\bthe steps are\b",
    re.IGNORECASE,
)
# Plans and commitments (events, dated or not).
_PLAN: Final = re.compile(
    r"^(?:i|we)(?:'m|\s+am|'re|\s+are)\s+(?:planning|going|hoping|about)\s+to\b|"
    r"^(?:i|we)\s+(?:plan|intend|promised|promise|hope|want|aim)\s+to\b|"
    r"^(?:i|we)\s+(?:promised|told)\s+\w+|^i(?:'ve| have) (?:booked|signed up|registered)|"
    # a goal or a plan said as a noun: "my next goal is a full marathon", "the plan is to …"
    r"^(?:my|our|the)\s+(?:(?:next|main|big|new|only)\s+)?(?:goal|plan|dream|resolution|aim|"
    r"target|hope)\s+(?:for\s+[\w\s]{1,20}?\s+)?(?:is|are)\b|"
    # a booking said without its subject: "Booked flights to Reykjavik for June 20"
    r"^(?:just\s+)?(?:booked|registered for|signed up for)\s+\w",
    re.IGNORECASE,
)
# Something that happened to the user, said without a time ("We just got back from Iceland",
# "I also cancelled my cards"): an event all the same, undated.
_EXPERIENCE: Final = re.compile(
    r"^(?:i|we|(?:my|our)\s+[\w\-]+(?:\s+(?-i:[A-Z])[\w\-]+)?\s+and\s+i|"
    r"me\s+and\s+(?:my|our)\s+[\w\-]+(?:\s+(?-i:[A-Z])[\w\-]+)?)\s+"
    r"(?:(?:just|finally|also|recently|already|even|both)\s+)*(?:got back from|booked|"
    r"came back from|returned from|went to|visited|travell?ed to|flew to|saw|met|lost|broke|"
    r"cancell?ed|finished|passed|won|adopted|bought|sold|graduated|got married|got engaged|"
    r"climbed|hiked|completed|launched|shipped|released)\s+"
    # work talk is no experience: "I saw the warning", "I lost an hour on that bug"
    r"(?!(?:(?:a|an|the|that|this|those|these|my|your|our|its|\d+)\s+)?(?:\w+\s+)?(?:error|"
    r"warning|bug|test|build|log|message|issue|exception|trace|output|diff|pr|commit|failure|"
    r"hour|minute|day|time|point|file|line|change|problem)s?\b)"
    # nor is a moment of the day, nor someone unnamed: "I went to bed", "I met him once"
    r"(?!(?:bed|sleep|lunch|dinner|breakfast|work|him|her|them|it|that|this|those|these)\b)\w",
    re.IGNORECASE,
)
# A moment away is no plan: "I'm going to lunch", "back in an hour".
_AWAY: Final = re.compile(
    r"\b(?:going to|off to|heading to)\s+(?:lunch|dinner|breakfast|bed|sleep|grab|get (?:a|some)|"
    r"(?:a|the)\s+(?:meeting|call|break|gym|standup|stand-up))\b|\bback in (?:an?|\d+|a few)\b|"
    r"\b(?:brb|be right back|step away|take a break|let's continue|continue tomorrow|"
    r"call it a day|pick (?:this|it) up)\b|"
    # how the user feels right now: "I'm so tired today"
    r"^i(?:'m| am)\s+(?:(?:so|very|really|a bit|pretty|super|just|kind of)\s+)*(?:tired|bored|"
    r"sick|busy|exhausted|hungry|sleepy|stressed|happy|sad|fine|ok|okay|good|great|excited|"
    r"nervous|confused|lost|stuck|annoyed|frustrated)\b",
    re.IGNORECASE,
)
# An event says what happened besides when: "Twice, in 2016 and 2018" does not.
_EVENTFUL: Final = re.compile(
    r"\b(?!(?:and|the|but|for|twice|once|both|only|also|then|too|with)\b)[a-z]{3,}\b", re.I
)


def _event_text(text: str, when: When | None, role: Role) -> str:
    body = text
    if when is not None and when.named:
        body = f"{text[: when.end]} ({when.label}){text[when.end :]}"
    elif when is not None and not re.match(r"\d{4}-\d{2}-\d{2}$", text[when.start : when.end]):
        phrase = text[when.start : when.end]
        lead = re.match(
            r"^(?:on|by|in|until|since|during|(?:end|start|beginning|middle)\s+of|mid)[\s-]+",
            phrase, re.I
        )  # fmt: skip
        prep = lead.group().strip().lower() if lead else ("on" if when.precision == "day" else "in")
        before = text[: when.start]
        if re.search(r"\b(?:on|by|in|until|since|during|from|at)(?:\s+the)?\s*$", before, re.I):
            prep = ""  # "back on January 6", "on the 2nd of May": the preposition is there
        before = re.sub(r"(?<=\s)the\s*$", "", before, flags=re.I)  # "is the 30th of May"
        if not re.search(r"\d{4}", phrase):
            body = f"{before}{prep} {when.label}{text[when.end :]}".replace("  ", " ")
    return third_person(clean(body), role)


# A clause that only leads on to what follows its colon: "so the plan is: we migrate …".
_LEADS_ON: Final = re.compile(r"^[\w\s']{0,40}\b(?:is|are|was|were)\s*:?$", re.IGNORECASE)


# Someone named with the group they belong to: "Grace from compliance", "Sara from finance".
_FROM_GROUP: Final = re.compile(
    r"(?:^|(?<=\s))(?P<name>(?-i:[A-Z][a-z]+))\s+from\s+(?P<group>(?-i:[a-z][\w\-]+)"
    r"(?:\s+(?-i:[a-z][\w\-]+))?)(?=\s+(?:wants|owns|says|said|is|was|has|runs|leads|asked|"
    r"told|thinks|will|needs|approved|signed|handles|manages)\b)"
)


@lru_cache(maxsize=64)
def _away_in(sentence: str) -> bool:
    """``_AWAY`` in a whole sentence, read once for all its clauses (a long run of clauses
    would otherwise read it once per clause: quadratic)."""
    return _AWAY.search(sentence) is not None


def states_nothing(text: str, sentence: str) -> bool:
    """Whether a clause says it holds no fact: a moment away ("I'm going to lunch", "I have a
    meeting at 3, let's …"), a thought ("I always thought it was Sydney"), a denial ("Nothing
    new"), small talk ("ok that's enough for today"). The phrasing-agnostic reading
    (``disclosure``) respects it too. So is a choice not made ("we haven't decided yet") or
    put off ("let's not migrate anything yet"), and a clause that only appraises ("Orla is a
    legend", "I'm gutted", "I'm allergic" with its object lost: ``appraisal``)."""
    away = _AWAY.search(text) or _away_in(sentence)
    return bool(
        away
        or _MENTAL.match(text)
        or _NOTHING.match(text)
        or small_talk(text)
        or only_appraises(text)
        or UNDECIDED.search(text)
        or puts_off(text)
    )


def classify(text: str, sentence: str, role: Role, base: str | None, talk: Talk) -> list[Fact]:
    """The facts one clause states (without message ids)."""
    facts: list[Fact] = []
    user = role is Role.USER
    if user:
        text = resolve_there(text, talk)
        text = _RESUMPTIVE.sub(r"\g<who> ", text)  # "My son Mateus he is starting …"
    when = resolve_when(text, base)
    decision = decision_in(text, role)
    past = when is not None and bool(base) and when.iso < (base or "")[:10]
    if decision is not None and past and change_done(text):
        # "we migrated the auth service to Java 21 two weeks ago": a change done then is an
        # event; "last week we decided to migrate" stays a decision
        decision = None
    if decision is not None:
        body, choice, fields = decision
        listed = DECIDED_LIST.match(text)
        if listed is not None:  # "we decided: no more Friday deploys, and every migration …"
            return [
                Fact(MemoryType.DECISION, third_person(clean(listed.group("head") + item), role,
                     team=True), memory_key(item), sentence, (), {**fields, "decision": item},
                     when)
                for item in (clean(listed.group("a")), clean(listed.group("b")))
            ]  # fmt: skip
        return [Fact(MemoryType.DECISION, body, choice, sentence, (), fields, when)]
    if not user or states_nothing(text, sentence) or _LEADS_ON.search(text):
        return []
    their = THEIR_NAME.match(text)
    if their and talk.last_relation:
        name = their.group("name")
        text = f"My {talk.last_relation} is named {name}{text[their.end() :]}"
    it_called = IT_CALLED.match(text)
    if it_called and talk.last_thing:
        name = clean(it_called.group("name"))
        talk.last_name, talk.last_person = name, False
        return [Fact(MemoryType.ENTITY, f"{name} is the {talk.last_thing}", name, sentence, (),
                     {"name": name, "kind": talk.last_thing})]  # fmt: skip
    whose = _THEIR_RELATION.search(text)
    relative_named = ""  # who "her husband Piotr" is about: Piotr
    if whose and talk.last_name and talk.last_person:  # "her husband Piotr built it"
        text = f"{text[: whose.start()]}{talk.last_name}'s{text[whose.end() :]}"
        relative_named = whose.group("name")
    thing = LAST_THING.search(text)
    talk.last_thing = thing.group("thing") if thing else ""
    named = named_facts(text, talk)
    # the last one named, for a later "she" / "it" clause
    for _, name, name_fields in named:
        talk.names.add(name)
        talk.last_name = name
        kind = name_fields.get("kind", "")
        talk.last_person = bool(IS_RELATION.match(kind)) if kind else None
    relation = REL_MENTION.search(text)
    if relation and not named:
        talk.last_relation = relation.group("rel").lower()
    about_named = ABOUT_NAMED.match(text)
    if about_named is not None:
        name = about_named.group("name")
        talk.last_name = name
        rest = [n for n in named if n[1] != name]
        main_fact = Fact(MemoryType.ENTITY, third_person(clean(text)), name, sentence, (),
                         {"name": name})  # fmt: skip
        if when is not None:
            main_fact = Fact(MemoryType.EVENT, _event_text(text, when, role), memory_key(text),
                             sentence, (), {"when": when.label}, when)  # fmt: skip
            rest = named
        return [main_fact] + [Fact(MemoryType.ENTITY, b, n, sentence, (), f) for b, n, f in rest]
    resolved = resolve_pronoun(text, talk)
    if resolved is not None:
        text = resolved
        when = resolve_when(text, base)  # its place in the text moved with the name
    whose = re.match(r"^i(?:'m| am)\s+(?P<pro>his|her)\s", text, re.IGNORECASE)
    if whose and talk.last_name and talk.last_person:  # "I'm her maid of honour"
        text = f"{text[: whose.start('pro')]}{talk.last_name}'s{text[whose.end('pro') :]}"
        when = resolve_when(text, base)
    main: Fact | None = None
    vague_time = when is not None and re.match(
        r"this\s+(?:week|month|year)\b", text[when.start : when.end], re.I
    )
    if vague_time:
        when = None
    if when is not None and (
        YEARLY.match(text)
        or (text[when.start : when.end].lower().startswith("since") and _SINCE_STATE.search(text))
    ):
        when = None  # profile facts (below) that carry their date in the text
    relative = _ABOUT_RELATIVE.match(text)
    if when is None and relative and not named:
        about = f"the user's {relative.group('rel').lower()}"
        return [Fact(MemoryType.ENTITY, third_person(clean(text)), about, sentence, (),
                     {"kind": relative.group("rel").lower()})]  # fmt: skip
    if when is not None and _EVENTFUL.search(text[: when.start] + text[when.end :]):
        main = Fact(MemoryType.EVENT, _event_text(text, when, role), memory_key(text), sentence,
                    (), {"when": when.label}, when)  # fmt: skip
    elif _PLAN.match(text) or (when is None and _EXPERIENCE.match(text)):
        main = Fact(MemoryType.EVENT, third_person(clean(text)), memory_key(text), sentence)
    if main is None and _PROCEDURE.search(text):
        main = Fact(MemoryType.PROCEDURE, third_person(clean(text), team=True),
                    memory_key(text), sentence)  # fmt: skip
    dropped = given_up(expanded(text)) if main is None else None
    if dropped is not None:  # "I don't prefer tabs any more": replaces the one about tabs
        main = Fact(MemoryType.PREFERENCE, dropped[0], dropped[1], sentence, (),
                    {REPLACES: dropped[1]})  # fmt: skip
    if main is None:
        preference = read_preference(text, talk.follow_on and talk.instructed)
        if preference is not None:
            main = Fact(MemoryType.PREFERENCE, preference[0], preference[1], sentence)
    talk.instructed = main is not None and main.text.startswith("The user wants the assistant")
    if main is None:
        for body, subject, fields in profile_facts(text):
            facts.append(Fact(MemoryType.PROFILE, body, subject, sentence, (), fields))
    if main is None and not facts:
        subject_match = NAME_SUBJECT.match(text)
        about = ""
        said = text[len(talk.last_name) :]
        if resolved is not None and (not LASTING.match(said) or PASSING.search(said)):
            pass  # a passing state of someone named before is no memory
        elif (
            subject_match
            and subject_match.group("name").split()[0] not in NOT_NAMES
            and not any(f.get("kind", "").lower() == subject_match.group("name").lower()
                        for _, _, f in named)  # "Production is called osprey"
        ):  # fmt: skip
            about = subject_match.group("name")
        elif resolved is not None:
            about = talk.last_name
        elif relative_named:
            about = relative_named
        elif len(named) == 1:
            about = named[0][1]
        if about and not about.lower().endswith("ing"):
            main = Fact(MemoryType.ENTITY, third_person(clean(text)), about, sentence, (),
                        {"name": about})  # fmt: skip
            talk.last_name = about
            talk.names.add(about)
            named = [n for n in named if n[1] != about]
    if main is not None:
        facts.insert(0, main)
    promoted = _PROMOTED.match(text)
    if promoted:  # "I got promoted to senior designer": the event, and the user's role now
        role_name = clean(promoted.group("role"))
        facts.append(Fact(MemoryType.PROFILE, f"The user is a {role_name}", "role", sentence, (),
                          {"role": role_name}))  # fmt: skip
    place = home_of(text) if MOVED.match(expanded(text)) else None
    if place and main is not None and main.type is MemoryType.EVENT:
        # "I moved to Utrecht last month": the event, and where the user lives now
        facts.append(Fact(MemoryType.PROFILE, f"The user lives in {place}", "home", sentence, (),
                          {"home": place}))  # fmt: skip
    for body, name, fields in named:
        facts.append(Fact(MemoryType.ENTITY, body, name, sentence, (), fields))
    group = _FROM_GROUP.search(text)
    if (
        group is not None
        and group.group("name").split()[0] not in NOT_NAMES
        and not any(f.type is MemoryType.ENTITY and f.subject == group.group("name") for f in facts)
    ):  # "Sara from finance wants the report by Friday": who Sara is, besides the event
        name, where = group.group("name"), group.group("group")
        facts.append(Fact(MemoryType.ENTITY, f"{name} is from {where}", name, sentence, (),
                          {"name": name, "kind": where}))  # fmt: skip
    # "Pip is my parrot" read both as who Pip is and as a fact about the user: one memory, the
    # entity when it names someone (a relation, a pet), else the profile ("Papiamento is my
    # first language")
    profiles = {memory_key(f.text) for f in facts if f.type is MemoryType.PROFILE}
    someone = {
        memory_key(f.text)
        for f in facts
        if f.type is MemoryType.ENTITY and IS_RELATION.match(f.fields.get("kind", ""))
    }
    return [
        f
        for f in facts
        if not (f.type is MemoryType.PROFILE and memory_key(f.text) in someone)
        and not (
            f.type is MemoryType.ENTITY
            and memory_key(f.text) in profiles
            and memory_key(f.text) not in someone
        )
    ]


def pending_facts(texts: Sequence[str]) -> list[Fact]:
    """Facts in text without a speaker (items the working memory could not hold): decisions,
    dated events and named things only, since "I" names nobody there."""
    found: list[Fact] = []
    for text in texts:
        for sentence in sentences(text):
            said = statement(sentence)
            if said is None:
                continue
            when = resolve_when(said, stamp_date(text))
            decision = decision_in(said, Role.SYSTEM)
            if decision is not None:
                body, choice, fields = decision
                fields.pop("decided_by", None)
                found.append(Fact(MemoryType.DECISION, body, choice, sentence, (), fields, when))
            elif when is not None:
                found.append(Fact(MemoryType.EVENT, _event_text(said, when, Role.SYSTEM),
                                  memory_key(said), sentence, (), {}, when))  # fmt: skip
            else:
                for body, name, fields in named_facts(said, Talk()):
                    found.append(Fact(MemoryType.ENTITY, body, name, sentence, (), fields))
    return found
