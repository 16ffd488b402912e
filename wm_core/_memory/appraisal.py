"""Clauses that only appraise: an emotion, an evaluation, or an adjective that lost its object.

Why it exists: people say how they feel and what they think of things far more often than
they state a fact, and a clause such as "ugh I'm so tired today", "Orla is a legend", "the
new linter config is a nightmare honestly" or "my feet are destroyed" kept as a memory is
noise ("The user is gutted"). So is a clause whose object a cut lost: "The user is allergic"
(to what?). Rather than one pattern per phrasing, a clause is read as *subject, copula,
predicate*: it only appraises when every word of the predicate is an intensifier, a filler,
a word of time or one of a lexicon of emotions and evaluations (with at least one of those),
or when the predicate ends on an adjective that needs an object ("allergic", "afraid of").
A predicate with anything else in it ("nervous about the exam on Friday", "vegetarian",
"allergic to penicillin") is left to the rules.

Pure: text in, answer out.
"""

from __future__ import annotations

import re
from typing import Final

# Subject (at most five words, no verb of its own), then a copula or a verb of feeling.
_COPULA: Final = re.compile(
    r"^(?:(?:ugh|wow|omg|man|god|lol|honestly|tbh|oh|ah|argh|phew|meh)[,!.]?\s+)*"
    r"(?P<subject>(?:[\w\-']+\s+){0,4}?[\w\-']+?)"
    r"(?:\s+(?:is|are|was|were|am|feel|feels|felt|feeling|looks?|looked|seems?|seemed|got|"
    r"get|getting)|'s|'m|'re)\s+(?P<predicate>.+)$",
    re.IGNORECASE,
)


def _lexicon(words: str) -> frozenset[str]:
    return frozenset(words.split())


_EMOTION: Final = _lexicon(
    """tired exhausted knackered shattered sleepy gutted thrilled excited happy sad upset
    stressed annoyed frustrated bored angry furious cross miserable depressed heartbroken
    devastated delighted relieved worried nervous anxious scared overwhelmed lonely grumpy
    hungry dead destroyed wrecked broken fried done stoked pumped ecstatic glad sorry jealous embarrassed ashamed proud grateful thankful lucky blessed confused lost
    stuck fine ok okay alright good great"""
)
_EVALUATION: Final = _lexicon(
    """legend hero star genius saint champ rockstar gem angel idiot nightmare disaster mess
    pain joke dream treat blast awful terrible horrible dreadful bad worse worst amazing
    awesome best greatest brilliant fantastic wonderful lovely nice cool fun funny hilarious
    weird strange odd crazy insane wild ridiculous stupid silly annoying boring beautiful gorgeous cute
    perfect incredible unreal epic rubbish trash garbage useless pointless chaos chaotic
    madness hell heaven excellent superb outstanding decent meh"""
)
_FILLER: Final = _lexicon(
    """so very really super pretty quite a an the such bit little kind sort of just totally
    absolutely completely utterly honestly tbh lol haha though too again still always all
    today tonight now right this week weekend morning lately literally bloody damn fucking
    freaking rather fairly kinda sorta and but it its it's is was as well ever most more
    getting here there out total complete real proper absolute utter"""
)
# Adjectives that say nothing without their object: "allergic" (to what?), "afraid" (of what?).
_NEEDS_OBJECT: Final = _lexicon("""allergic afraid scared terrified fond aware capable addicted""")
_WORD: Final = re.compile(r"[a-z']+|\d+", re.IGNORECASE)


def only_appraises(clause: str) -> bool:
    """Whether the clause only says how someone feels or what something is worth, or ends on
    an adjective whose object was lost (see the module docstring)."""
    text = clause.strip().rstrip(".!… ")
    match = _COPULA.match(text)
    if match is None:
        return False
    words = [w.lower() for w in _WORD.findall(match.group("predicate"))]
    if not words:
        return False
    if words[-1] in _NEEDS_OBJECT and all(w in _FILLER or w in _NEEDS_OBJECT for w in words):
        return True
    judged = [w for w in words if w in _EMOTION or w in _EVALUATION]
    return bool(judged) and all(w in _EMOTION or w in _EVALUATION or w in _FILLER for w in words)


# What the subject of an appraisal says on its own: "Orla from accounting" (is a legend),
# "my brother Tomasz" (is the best).
_NAME_FROM: Final = re.compile(
    r"^(?P<name>[A-Z][\w\-']+(?:\s+[A-Z][\w\-']+)?)\s+(?P<prep>from|at|in|on)\s+(?P<what>.+)$"
)
_MY_NAMED: Final = re.compile(
    r"^(?P<my>my|our)\s+(?P<rel>[a-z][\w\-]*(?:\s+[a-z][\w\-]*)?)\s+(?P<name>[A-Z][\w\-']+)$"
)


def subject_fact(clause: str) -> str | None:
    """When a clause only appraises but its subject names someone with what they are ("Orla
    from accounting is a legend"), that as a clause of its own ("Orla is from accounting");
    else None."""
    if not only_appraises(clause):
        return None
    match = _COPULA.match(clause.strip().rstrip(".!… "))
    subject = match.group("subject") if match else ""
    named = _NAME_FROM.match(subject)
    if named:
        return f"{named.group('name')} is {named.group('prep')} {named.group('what')}"
    mine = _MY_NAMED.match(subject)
    if mine:
        return f"{mine.group('my').capitalize()} {mine.group('rel')} is named {mine.group('name')}"
    return None
