"""The offline extraction rules for who the user is: the ``profile`` facts of a user's clause.

Why it exists: the clause rules (``rules``) ask each user clause, in turn, whether it is a
decision, an event, a preference or a fact about the user; the identity readings are many
and live here apart from the others: a name ("my name is …", "I'm Dana, …", "Quick intro:
Beatriz Moreno, staff engineer at Quillsoft"), an age ("I'm 41", "I turn 30 in May", "…,
turning 30") and the list after it ("I'm 41, married, two kids"), pronouns, where the user
lives (also "we live just outside Utrecht"), work, health, diet, languages, habits, and what
the user's team is and uses ("we're a team of six", "our main language is TypeScript"). A
state of work ("My PR is blocked") or of today ("I'm working on auth this week") is none.

Pure: text in, answers out.
"""

from __future__ import annotations

import re
from typing import Final

from wm_core._memory.changes import home_of, new_name, organization_of
from wm_core._memory.model import memory_key
from wm_core._memory.names import NAME, NOT_NAMES
from wm_core._memory.speech import REASON, clean, expanded, third_person

# A yearly date is who the user is, not an event: "My birthday is on March 3".
YEARLY: Final = re.compile(r"^(?:my|our)\s+(?:birthday|wedding anniversary|anniversary)\b", re.I)

# Profile: who the user is.
_MY_NAME: Final = re.compile(
    rf"^(?:my name is|my name's|call me|i go by)\s+(?P<name>{NAME})", re.IGNORECASE
)
_IM_NAME: Final = re.compile(
    rf"^(?i:i'm|i am)\s+(?P<name>{NAME})(?i:\s+(?:btw|by the way|here|fyi))?\s*"
    r"(?:,\s*(?P<rest>.+))?$"
)
# A self-introduction without "I'm": "Quick intro: Beatriz Moreno, staff engineer at Quillsoft".
_INTRO: Final = re.compile(
    rf"^(?:(?:quick|short|a quick|brief)\s+)?(?i:intro(?:duction)?|about me)\s*:\s*(?P<name>{NAME})"
    r"\s*(?:,\s*(?P<rest>.+))?$"
)
# What follows a name in an introduction: a role ("(a) staff engineer at Quillsoft") or a home.
_ROLE_AT: Final = re.compile(r"^(?:(?:a|an|the)\s+\w|[\w\- ]+?\s+(?:at|for)\s+(?-i:[A-Z]))", re.I)
_HOME_AT: Final = re.compile(
    r"^(?:based|living|located)\s+in\s+(?P<place>.+)$|^from\s+(?P<from>.+)$", re.I
)
_AGE: Final = re.compile(
    r"^(?:i(?:'m| am)\s+(?:turning\s+|now\s+)?|i\s+(?:just\s+)?turn(?:ed)?\s+|turning\s+)"
    r"(?P<age>\d{1,3})(?:\s+years?\s+old|\s*(?:yo|y/o))?(?!\s*(?:%|percent|minutes|hours|days|"
    r"weeks|months|km|miles|mins?|am|pm|:))\b",
    re.I,
)
# An age said in passing after another fact: "my birthday's on the 3rd of July, turning 30".
_AGE_AFTER: Final = re.compile(r",\s+(?:and\s+)?turning\s+(?P<age>\d{1,3})\b(?!\s*%)", re.I)
# What a list after the age says ("I'm 41, married, two kids"): each item is a profile fact.
_STATUS: Final = re.compile(
    r"^(?:(?:happily|recently|newly)\s+)?(?P<is>married|single|divorced|engaged|widowed|retired|"
    r"separated|vegan|vegetarian|pregnant|unemployed|self-employed|freelance|a\s+[\w\-]+(?:\s+"
    r"[\w\-]+)?)$|^(?P<has>(?:no|one|two|three|four|five|six|\d+)\s+(?:kids?|children|sons?|"
    r"daughters?|dogs?|cats?|grandchildren|grandkids))$",
    re.I,
)
# The user's pronouns: "I use they/them pronouns", "my pronouns are she/her", "(he/him)".
_PRONOUNS: Final = re.compile(
    r"\bpronouns?\b|\b(?:he/him|she/her|they/them|ze/zir|xe/xem|he/they|she/they)\b", re.I
)
# What the user's team or company is: "we're a team of six", "we're a small agency".
_WE_ARE: Final = re.compile(
    r"^we(?:'re| are)\s+(?:(?:just|only|still|pretty much|\w+ly)\s+)?(?:a|an)\s+(?:[\w\-+#.]+\s+){0,3}?(?:team|"
    r"company|startup|start-up|shop|agency|studio|family|couple|group|org|organi[sz]ation|"
    r"nonprofit|non-profit|lab|consultancy|household)\b",
    re.I,
)
_PROFILE_START: Final = re.compile(
    r"^we\s+(?:(?:just|also|now|currently|still|recently)\s+)*(?:live|'ve lived|have lived|"
    r"moved|relocated)\b|"
    r"^i\s+(?:(?:just|also|really|currently|now|still|recently|actually)\s+)*(?:"
    r"(?:'m|am)\s+(?:(?:finally|now|still|currently|also|really|just)\s+)*(?:a|an|the|allergic|vegetarian|vegan|pescatarian|lactose|gluten|diabetic|"
    r"pregnant|married|divorced|single|retired|based|from|originally|left-handed|"
    r"right-handed|colou?r-?blind|deaf|blind|\w+\s+intolerant|(?:running|training|learning|"
    r"studying|working|doing)\s+(?:\d+|as|at|on|in|\w+\s+(?:twice|once|every|daily))|"
    r"(?:learning|picking up)\s+(?:to\s+)?[\w\-]+|(?-i:[A-Z])[\w\-]*'s\s+[\w\-]+)|"
    r"live|'ve lived|have lived|grew up|moved|relocated|studied|was raised|went to (?:school|"
    r"university|college|uni)|have\s+(?:just\s+|recently\s+|finally\s+)?"
    r"(?:moved|relocated)|work|'ve worked|have worked|teach|lead|manage|"
    r"run\s+(?:a|my|\d)|speak|study|own|drive|play|volunteer|was born|usually|often|always|"
    r"normally|"
    r"typically|go\s+(?:\w+\s+)?(?:every|\w+\s+times|twice|once)|need at least|"
    r"can't (?:have|eat|drink)|cannot (?:have|eat|drink)|"
    r"have\s+(?:a|an|two|three|four|\d|type|asthma|diabetes|chronic|c[o]?eliac|adhd|autism|"
    r"(?:[\w\-]+\s+){0,2}(?:disease|syndrome|disorder|allergy|condition))|"
    r"'ve been\s+(?:a|an|vegan|vegetarian|having|suffering|diagnosed|married|working|living|"
    r"learning|playing|doing|running|teaching)|have been\s+\w+)\b",
    re.IGNORECASE,
)
_MY_IS: Final = re.compile(
    r"^(?:my\s+(?!favou?rite|go-to|next\s|goal|plan|dream)[\w'\-]+(?:\s+[\w'\-]+){0,3}\s+"
    r"(?:is|are|should)\s+|"
    # how the user's team works: "our main language is TypeScript", "our stack is Go"
    r"our\s+(?:(?:main|primary|default|whole|entire|core|only)\s+)?(?:language|languages|"
    r"stack|tech stack|platform|cloud|team|company|product|office|headquarters|hq|customers|"
    r"users|clients|domain|business|industry|framework|database|db)\s+(?:is|are)\s+|"
    r"[\w\-]+(?:\s+[\w\-]+)?\s+(?:is|are)\s+my\s+)",
    re.IGNORECASE,
)
# How the user's team works ("Our team uses trunk-based development"): a fact about the user.
# Any adverb may come before the verb ("we mostly use PyTorch"), a place of work before the
# clause ("in our shop we use GitHub Actions"), and what runs where is said of "everything" or
# of one of the team's things too ("everything runs on Databricks", "our data lives in
# BigQuery").
_TEAM_USES: Final = re.compile(
    r"^(?:(?:in|at)\s+(?:our|my)\s+(?:team|company|org|shop|job|work|place)\s*,?\s+)?"
    r"(?:(?:our|my)\s+(?:team|company|org|organi[sz]ation|shop)\s+(?:\w+ly\s+)?(?:uses|works|"
    r"follows|practi[cs]es|deploys|runs|ships|builds|hosts|writes)|"
    r"we\s+(?:(?:all|also|still|now|\w+ly)\s+)?(?:use|work|follow|practi[cs]e|deploy|ship|"
    r"host|build|write|code|run\s+(?:on|everything|all|our|it)|are on|'re on)|"
    r"(?:everything|(?:all\s+)?(?:of\s+)?our\s+[\w\-]+(?:\s+[\w\-]+)?)\s+(?:\w+ly\s+)?(?:runs?|"
    r"lives?|is hosted|are hosted|sits?|deploys?|go|goes)\s+(?:on|in|to|through|via)\b)\b",
    re.IGNORECASE,
)
_FREQUENCY: Final = re.compile(
    r"\b(?:once|twice|\w+\s+times)\s+(?:a|per)\s+(?:day|week|month|year)\b|"
    r"\b(?:every|each)\s+(?:day|morning|evening|night|week|weekend|month|monday|tuesday|"
    r"wednesday|thursday|friday|saturday|sunday)\b|\b(?:daily|weekly)\b|"
    r"\b(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|a few|several)\s+[a-z]+\s+"
    r"(?:a|per)\s+(?:day|week|month)\b",
    re.I,
)
_STATE: Final = re.compile(
    r"(?:still\s+|now\s+|currently\s+|again\s+)?(?:blocked|broken|down|failing|stuck|slow|red|"
    r"green|done|ready|open|closed|merged|pending|waiting|running|up|fixed|missing|empty|full|"
    r"late|busy)\b",
    re.IGNORECASE,
)
_FOR_NOW: Final = re.compile(
    r"\b(?:this week|today|tonight|this morning|this afternoon|this evening)\b", re.IGNORECASE
)
_PROFILE_NOT: Final = re.compile(
    r"^i(?:'m| am)\s+(?:a\s+(?:bit|little|fan|big fan|huge fan)|not sure|sorry|glad|happy|"
    r"trying|looking|thinking|wondering|done|back|going to|planning)\b|^i need (?:help|you)|"
    r"^i have (?:a|an) (?:question|idea|problem|issue|bug|error)",
    re.IGNORECASE,
)


# What the user does for a living, in any present-tense verb: "I do ML at a startup called
# Veridia", "I handle billing for Acme", "I mostly write Go at Lumio". A past or passing verb
# is no profile ("I met Sara at Google", "I bought it at IKEA").
_WORK_AT: Final = re.compile(
    r"^i\s+(?:(?:mostly|mainly|currently|now|still|also|basically|actually)\s+)?"
    r"(?!(?:met|saw|was|went|had|got|bought|ran|left|lost|found|took|made|sent|came|did|said|"
    r"told|heard|read|ate|spent|paid|sold|won|broke|put|need|want|think|guess|hope|wish|feel|"
    r"will|can|could|would|should|might|must)\b)[a-z]+(?<!ed)\s+(?:[\w\-+#/.]+\s+){0,6}?"
    r"(?:at|for)\s+(?:(?:a|an|the)\s+(?:[\w\-]+\s+){0,3}?(?:called|named)\s+)?(?-i:[A-Z])",
    re.IGNORECASE,
)


def profile_facts(text: str) -> list[tuple[str, str, dict[str, str]]]:
    """(text, subject, fields) of identity statements in a user's clause."""
    found: list[tuple[str, str, dict[str, str]]]
    original, text = text, expanded(text)
    match = _MY_NAME.match(text)
    name = new_name(text) or (match.group("name") if match else None)
    if name:
        return [(f"The user's name is {name}", "name", {"name": name})]
    match = _IM_NAME.match(text) or _INTRO.match(text)
    if match and match.group("name").split()[0] not in NOT_NAMES:
        name = match.group("name")
        found = [(f"The user's name is {name}", "name", {"name": name})]
        for part in re.split(r",\s+|\s+and\s+", match.group("rest") or ""):
            part = clean(part)
            home = _HOME_AT.match(part)
            if home:
                place = home.group("place") or home.group("from")
                found.append((f"The user is {part}", "home", {"home": clean(place)}))
            elif _ROLE_AT.match(part):
                found.append((f"The user is {part}", "role", {"role": part}))
        return found
    match = _AGE.match(text)
    if match:
        age = match.group("age")
        found = [(f"The user is {age} years old", "age", {"age": age})]
        more = re.match(r"^\s+and\s+(?P<more>\w.+)$", text[match.end() :], re.I)
        if more:  # "I'm 52 and recently retired from teaching"
            body = third_person(clean(f"I {more.group('more')}"))
            found.append((body, memory_key(body), {}))
        for item in re.split(r",\s*(?:and\s+)?", text[match.end() :])[1:]:
            status = _STATUS.match(clean(item))  # "I'm 41, married, two kids"
            if status and status.group("is"):
                found.append((f"The user is {status.group('is')}", status.group("is").lower(), {}))
            elif status:
                found.append((f"The user has {status.group('has')}", "family", {}))
        return found
    if _PRONOUNS.search(text) and re.match(r"^(?:i|my)\b", text, re.I):
        return [(third_person(clean(original)), "pronouns", {})]
    we_are = _WE_ARE.match(text)
    if we_are:  # "we're a team of six": what the user is part of
        article = re.search(r"\b(?:a|an)\s", text, re.I)
        body = clean(text[article.start() :] if article else text)
        return [(f"The user is part of {body}", memory_key(text), {})]
    found = []
    after = _AGE_AFTER.search(text)
    if after:  # "my birthday's on the 3rd of July, turning 30"
        age = after.group("age")
        found.append((f"The user is turning {age}", "age", {"age": age}))
        text = original = original[: after.start()]
    if found and not re.match(r"^(?:i|my)\b", text, re.I):
        return found
    if _PROFILE_NOT.match(text):
        return found
    habit = re.match(r"^i\s", text, re.I) and _FREQUENCY.search(text)
    team = _TEAM_USES.match(text) and not REASON.search(text)
    my_is = _MY_IS.match(text)
    if my_is and _STATE.match(text[my_is.end() :]):
        return found  # "My PR is blocked on review": a state of work, not who the user is
    if _FOR_NOW.search(text):
        return found  # "I'm working on the auth refactor this week"
    work = _WORK_AT.match(text)
    if _PROFILE_START.match(text) or my_is or habit or team or work or YEARLY.match(text):
        body = third_person(clean(original))
        lower = text.lower()
        subject = memory_key(body)
        fields: dict[str, str] = {}
        organization = organization_of(text)
        if re.match(r"^i am (?:a|an|the)\s.+\s(?:at|for)\s+[A-Z]", text, re.I):
            subject = "role"
        elif home_of(text) or re.search(r"\b(?:live|based|moved to|relocated to|grew up)\b", lower):
            subject = "home" if "grew up" not in lower else "origin"
            place = home_of(text) if subject == "home" else None
            fields = {"home": place} if place else {}
        elif organization:
            subject, fields = "organization", {"organization": organization}
        return [(body, subject, fields), *found]
    return found
