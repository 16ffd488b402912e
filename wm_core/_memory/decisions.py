"""A clause that states a decision: what was chosen, over what, why.

Why it exists: a decision is said in many forms, by either role, and the clause rules
(``rules``) need one reader for all of them: "we decided / agreed / chose / switched …",
"we'll use …", "let's use …" — one lexicon of choice verbs for every form (``_CHOOSE_VERBS``:
"we'll be using", "we're not going to support", "the platform team is no longer …"), a choice
said as its outcome ("SQS it is", "final call on X: Y"), a decision starting inside a clause
("… and the team agreed to"), a topic before it kept ("for the HTTP layer we went with …"),
two decisions listed after a colon (``DECIDED_LIST``), a choice not made refused ("we haven't
decided yet": ``UNDECIDED``) — with the reason ("because", "since") in its fields. A change
made ("we migrated …", ``change_done``) is an event when dated in the past. Who agreed, across
turns, is read by ``agreements``.

The module is pure.
"""

from __future__ import annotations

import re
from typing import Final

from wm_core._memory.changes import switch
from wm_core._memory.names import RELATIONS
from wm_core._memory.speech import CHOSE, REASON, VAGUE, clean, third_person
from wm_core._memory.subjects import REPLACES
from wm_core._messages import Role

_MOVES: Final = (
    "moved",
    "switched",
    "set up",
    "introduced",
    "enabled",
    "disabled",
    "deprecated",
    "banned",
    "ruled",
    "mandated",
    "dropped",
    "ditched",
    "replaced",
    "swapped",
    "migrated",
)
# A change made (``_MOVES``) as against a choice made: dated in the past, the first is an event.
_DONE: Final = re.compile(rf"\b(?:{'|'.join(_MOVES)})\b", re.IGNORECASE)
_CHOSE: Final = re.compile(
    rf"\b(?:{'|'.join((*CHOSE, 'agreed', 'chosen', 'voted', 'gone with'))})\b", re.I
)
# What a decision's subject is without its verb: "go with Redis for the cache" is about
# "Redis for the cache", as a later "we'll use Memcached for the cache" is.
_CHOICE_VERB: Final = re.compile(
    r"^(?:to\s+|on\s+|that\s+)?(?:go(?:ing)?\s+with|use|using|stick(?:ing)?\s+with|"
    r"keep(?:ing)?|switch(?:ing)?\s+to|adopt(?:ing)?|pick|choose|move\s+to)\s+",
    re.IGNORECASE,
)
_DECIDED: Final = re.compile(
    # "After discussing it, the team chose …": a short lead-in before the decision
    r"^(?:(?:after|following|in the end|eventually|finally|ultimately)\b[^,]{0,40},\s+)?"
    r"(?:(?:we|i|they|(?:the|our)\s+(?:[\w\-]+\s+){0,3}(?:team|group|board|committee|leads|"
    r"leadership|management|client|customer|guild|squad|council|panel|department|org)|"
    r"management|leadership|everyone|everybody|"
    # someone named with the user: "Priya and I settled on …" (a name alone deciding may be
    # a fact of their life: "Sarah decided to quit her job")
    r"(?-i:[A-Z][a-z]+)\s+and\s+i)"
    r"(?:\s+have|\s+has|'ve|\s+all|\s+finally|\s+just|\s+also)*\s+|"
    r"(?:it was|it's been)\s+)?"
    r"(?P<verb>decided|agreed|chose|chosen|settled on|went with|gone with|went for|gone for|"
    r"opted for|opted to|landed on|switched|moved|"
    r"picked(?!\s+up\b)|"
    r"committed to|ended up|voted|standardi[sz]ed on|"
    # what a team set in place is its choice: "We've set up cert-manager to auto-renew"
    r"set up|introduced|enabled|disabled|deprecated|banned|ruled|mandated|"
    # what the team let go of or swapped: "we dropped Memcached for Redis"
    r"dropped|ditched|replaced|swapped|migrated)\b(?P<what>.*)$",
    re.IGNORECASE,
)
# A rule the speaker sets for themselves from now on: "From now on I'll keep notes in git".
_FROM_NOW: Final = re.compile(
    r"^(?:from now on|going forward|moving forward|from today on|in future|in the future),?\s+"
    r"(?:i|we)(?:'ll|\s+will|'re going to|\s+are going to|'m going to|\s+am going to)\s+"
    r"(?P<what>\w.+)$|"
    r"^(?:we|the team)(?:'ll|\s+will|'re going to|\s+are going to)\s+(?P<rule>\w.+?),?\s+"
    r"(?:from now on|going forward|moving forward|from today on)$",
    re.IGNORECASE,
)
_DECISION_IS: Final = re.compile(
    r"^(?:the|our)\s+(?:new\s+|final\s+)?(?:decision|rule|policy|convention)\s+(?:is|was)"
    r"(?:\s+to)?\s+(?P<what>\w.*)$",
    re.I,
)
# One lexicon of choice verbs for every form a choice is said in ("we'll go with", "we're
# switching to", "we'll be using", "we're not upgrading to", "let's stick with").
_CHOOSE_VERBS: Final = (
    r"go(?:ing)? with|use|using|keep|keeping|stick(?:ing)? with|switch(?:ing)?|drop(?:ping)?|"
    r"adopt(?:ing)?|migrat(?:e|ing)|mov(?:e|ing)|deprecat(?:e|ing)|pin(?:ning)?|"
    r"replac(?:e|ing)|standardi[sz](?:e|ing) on|upgrad(?:e|ing)|downgrad(?:e|ing)|"
    r"retir(?:e|ing)|sunset(?:ting)?|postpon(?:e|ing)|delay(?:ing)?|cap(?:ping)?|"
    r"limit(?:ing)?|freez(?:e|ing)|enforc(?:e|ing)|requir(?:e|ing)|ban(?:ning)?|"
    r"settl(?:e|ing) on|opt(?:ing)? for|pick(?:ing)?|choos(?:e|ing)"
)
_WILL: Final = re.compile(
    r"^(?:we|the team|(?:the|our)\s+[\w\-]+\s+team)(?:'ll|\s+will|'re|\s+are|\s+should|\s+is|'s)"
    # a refusal takes any verb: "we're not going to support IE11", "no longer supporting it"
    r"(?:\s+(?P<neg>not|no longer))?(?:\s+going to)?"
    r"(?:\s+(?:be|now|also|just|definitely|all|officially))*\s+"
    rf"(?P<what>(?(neg)[a-z]+|(?:{_CHOOSE_VERBS}))\b.+)$",
    re.IGNORECASE,
)
# The user's own choice said as what they will do: "I'll use Poetry for this project".
_I_WILL: Final = re.compile(
    rf"^i(?:'ll|\s+will|'m going to|\s+am going to)\s+(?P<what>(?:{_CHOOSE_VERBS})\b.+)$", re.I
)
# A choice chat says without its subject: "dropping redis for the session store", "switching
# to pnpm" ("moving to Leeds" is a move, "dropping the kids off" an errand).
_GERUND_CHOICE: Final = re.compile(
    r"^(?P<what>(?:dropping|ditching|switching(?:\s+(?:to|from))?|going with|sticking with|"
    r"replacing|migrating(?:\s+(?:to|from))?|standardi[sz]ing on|adopting)\s+"
    r"(?!(?:off|by|in|out|back|home|the kids|him|her|them)\b)\w.+)$",
    re.IGNORECASE,
)
# A move of the user's household, not of the team's software: the "we" who move has family,
# a home or a city in the clause.
_HOME_MOVE: Final = re.compile(
    rf"^\S+\s+(?:'re|are|will|'ll)?\s*(?:be\s+)?(?:moving|relocating|mov(?:e|ing) house)\b"
    rf"(?=.*\b(?:my|our)\s+(?:{RELATIONS}|kids|family|house|flat|apartment|home)\b|"
    r".*\b(?:house|flat|apartment|city|country|abroad)\b)",
    re.IGNORECASE,
)
# Two decisions listed after a colon: "we decided: no more Friday deploys, and every migration
# needs a rollback script" is one memory per decision.
DECIDED_LIST: Final = re.compile(
    r"^(?P<head>[^:]{0,80}\b(?:decided|agreed|settled|rules?|decisions?)\s*:\s*)"
    r"(?P<a>\w[^,:]{3,80}?),?\s+and\s+(?P<b>\w[^:]{3,120})$",
    re.IGNORECASE,
)
_LETS: Final = re.compile(
    # "let's not X" sets a rule whatever X is; "let's X" decides when X is a verb of choice or
    # of change ("let's raise that limit"), not of the work at hand ("let's look at the logs")
    r"^let's\s+(?P<what>(?:not\s+(?!(?:worry|bother|forget|panic|get ahead)\b)[a-z]+|use|"
    r"go with|switch|stick with|pick|choose|keep|drop|adopt|move|migrate|pin|split|deprecate|"
    r"freeze|replace|standardi[sz]e on|do|make|go for|add|cap|rotate|set|limit|postpone|delay|"
    r"skip|ship|remove|enable|disable|turn on|turn off|raise|lower|increase|reduce|bump|"
    r"upgrade|downgrade|rename|retire|archive|schedule|move)\b.+)$",
    re.IGNORECASE,
)
# A refusal that puts a choice off decides nothing: "let's not pin anything yet".
_PUT_OFF: Final = re.compile(r"^(?:not|no longer)\b(?:.*\b(?:yet|anything)\b)", re.I)
# A choice said as its outcome: "SQS it is", "Final answer on the logo: the teal one".
_IT_IS: Final = re.compile(r"^(?P<what>[\w][\w .\-+#/]{0,40}?)\s+it is\b(?P<rest>.*)$", re.I)
_FINAL: Final = re.compile(
    r"^(?:(?:the\s+)?final\s+(?:answer|call|decision|verdict|choice|word)|(?:the\s+)?verdict|"
    # "Final answer from the architecture review today: …": where it came from is no topic
    r"decision(?:\s+(?:made|taken|is in))?|decided|settled|agreed|"
    # a vote's outcome: "ok team voted: standups go async"
    r"(?:(?:the|our)\s+)?(?:team|group|committee|board|everyone|we)\s+(?:voted|decided|agreed))"
    r"(?:\s+(?:on|for|about)\s+(?P<topic>[^:,]{1,40})|"
    r"\s+(?:from|after|at|in|of)\s+[^:,]{1,40})?\s*[:,-]\s*(?P<what>\w.+)$",
    re.IGNORECASE,
)


# What may come before the one who decides: a time ("last week we decided …"), how it went
# ("after a lot of back and forth we're going with …", "so in the end the team chose …").
_DECISION_LEAD: Final = re.compile(
    r"^(?:(?:so|ok|okay|anyway|then|and)\s+)?(?:(?:after|following|in the end|eventually|"
    r"finally|ultimately|as of|since|last|this|earlier|yesterday|today|on|at|by|for now|"
    # the part of the work it is about: "For the HTTP layer we went with Litestar"
    r"for|as for|regarding|about|in)\b"
    r"[^,]{0,50}?,?\s+)(?=(?:we|we've|we're|we'll|i|i've|i'll|the team|our team|the \w+ team)\s)",
    re.IGNORECASE,
)


UNDECIDED: Final = re.compile(
    r"\b(?:haven't|have not|hasn't|has not|didn't|did not|can't|cannot|couldn't|not yet|never)\s+"
    r"(?:yet\s+|really\s+|fully\s+)?(?:decided|agreed|chosen|chose|settled|picked|decide|agree|"
    r"choose|settle|pick)\b",
    re.IGNORECASE,
)
# Where a decision may start inside a clause: "We had a retro today and the team agreed to …",
# "ok final call: we're not upgrading …".
_DECISION_INSIDE: Final = re.compile(
    # "after Wednesday's outage the on-call group agreed to …": what led to it, no comma
    r"(?:,|:|\band\b|\bso\b|\bthen\b|\bbut\b|\b(?:after|following)\s+[\w'\-]+(?:\s+[\w'\-]+){0,4}?)"
    # "… and finally we will use Keycloak": how it went, between the link and the subject
    r"\s+(?:(?:finally|eventually|ultimately|in the end|now|then),?\s+)?"
    r"(?=(?:we|i|the|our|they|let's)\b)",
    re.I,
)


def decision_in(text: str, role: Role) -> tuple[str, str, dict[str, str]] | None:
    """The decision a clause states, if any: its text in the third person, what it is about
    (the choice without its verb) and its fields (decision, decided_by, reason, replaces)."""
    if UNDECIDED.search(text):
        return None  # "we haven't decided between gRPC and REST yet"
    lead = _DECISION_LEAD.match(text)
    if lead is not None:
        found = _decision_at(text[lead.end() :], role)
        if found is not None:
            # "for the search index we'll go with Meilisearch", "after the incident review we
            # decided …": the topic or the occasion stays in the memory, in the clause's words
            return third_person(clean(text), role, team=True), found[1], found[2]
    found = _decision_at(text, role) or _outcome(text, role)
    if found is not None:
        return found
    for inside in _DECISION_INSIDE.finditer(text):
        found = _decision_at(text[inside.end() :], role)
        if found is not None:
            # the memory keeps the whole clause: "Priya and I settled on GraphQL" names Priya
            return third_person(clean(text), role, team=True), found[1], found[2]
    return None


def _outcome(text: str, role: Role) -> tuple[str, str, dict[str, str]] | None:
    """A choice said as its outcome ("SQS it is", "Final call on the logo: the teal one")."""
    final = _FINAL.match(text)
    if final is not None:
        topic = final.group("topic")
        choice = clean(final.group("what"))
        what = f"{clean(topic)}: {choice}" if topic else choice
        why = ""
    else:
        it_is = _IT_IS.match(text)
        rest = it_is.group("rest") if it_is else ""
        if it_is is None or (rest.strip(" .!") and not re.match(r"^\s*[.,;:!\-—]", rest)):
            return None  # "SQS it is. nobody wants to babysit it": what follows is the why
        what = choice = clean(it_is.group("what"))
        why = clean(rest.strip(" .,;:!-—"))
    if not choice or choice.lower().split()[0] in VAGUE:
        return None
    decided = third_person(what, role, sentence=False, team=True)
    fields = {"decision": decided, "decided_by": role.value}
    if why:
        fields["reason"] = third_person(why, role, sentence=False, team=True)
    return third_person(clean(text), role, team=True), _CHOICE_VERB.sub("", choice), fields


def _decision_at(text: str, role: Role) -> tuple[str, str, dict[str, str]] | None:
    match = (
        _DECIDED.match(text)
        or _DECISION_IS.match(text)
        or _WILL.match(text)
        or _LETS.match(text)
        or _FROM_NOW.match(text)
        or (_I_WILL.match(text) if role is Role.USER else None)
        or (_GERUND_CHOICE.match(text) if role is Role.USER else None)
    )
    if match is None:
        return None
    if match.re is _WILL and _HOME_MOVE.search(text):
        return None  # "we're moving to Edinburgh because my wife …": a family's move, an event
    personal = re.match(r"^i\b", text, re.I) is not None
    verb = match.group("verb").lower() if "verb" in match.groupdict() else ""
    if personal and verb in _MOVES:
        return None  # "I moved to Berlin" is about the user, not a choice of the team
    if verb in _MOVES[2:] and text.lower().startswith(verb):
        return None  # "Set up the project: …" asks for work; "we've set up X" tells a choice
    what = (match.group("what") or match.groupdict().get("rule") or "").strip()
    if match.groupdict().get("neg"):
        what = f"{match.group('neg').lower()} {what}"
    if _PUT_OFF.match(what):
        return None  # "let's not pin anything yet" puts the choice off
    parts = REASON.split(what, maxsplit=1)
    choice = clean(parts[0])
    why = clean(parts[1]) if len(parts) > 1 else ""
    words = choice.lower().split()
    if not why and (not words or (words[-1] in VAGUE and len(words) <= 3)):
        return None  # "let's do that" is an agreement, "we agreed" says nothing
    if len(choice.split()) < 2 and not why:
        return None
    fields = {
        "decision": third_person(choice, role, sentence=False, team=True),
        "decided_by": role.value,
    }
    if why:
        fields["reason"] = third_person(why, role, sentence=False, team=True)
    body = third_person(clean(text), role, team=True)
    change = switch(choice)
    if change is not None:  # "switched the ledger from PostgreSQL to CockroachDB"
        fields[REPLACES] = change[1]
        return body, change[0], fields
    return body, _CHOICE_VERB.sub("", choice), fields


def change_done(text: str) -> bool:
    """Whether a decision clause tells a change made (``_MOVES``) rather than a choice made:
    dated in the past, "we migrated the auth service to Java 21 two weeks ago" is an event,
    while "last week we decided to migrate" stays a decision."""
    return bool(_DONE.search(text)) and not _CHOSE.search(text)


def puts_off(text: str) -> bool:
    """Whether a clause puts a choice off ("let's not migrate anything yet"): no decision, and
    no fact for any other reader either."""
    lets = _LETS.match(text)
    return lets is not None and _PUT_OFF.match(lets.group("what")) is not None
