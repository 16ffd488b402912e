"""The offline extraction rules for preferences: what the user likes, dislikes, prefers, and
what they want the assistant to always or never do.

Why it exists: the clause rules (``rules``) ask each user clause, in turn, whether it is a
decision, an event, a procedure, a preference or a fact about the user; the preference
readings are many ("I'd rather …", "I'm a big fan of …", "Emojis in comments drive me
crazy", "I find dark mode easier on my eyes", "Never use semicolons", "Use pytest for all new
tests") and live here, apart from the others. A preference given up for another ("I don't
prefer tabs any more") is read by ``changes``.

Pure: text in, answers out.
"""

from __future__ import annotations

import re
from typing import Final

from wm_core._memory.speech import clean, expanded, object_of, third_person

_ADV = r"(?:(?:really|strongly|generally|usually|always|definitely|much|still|now|also|truly|absolutely|totally|personally|honestly|kinda|kind of|sort of|secretly|just|do)\s+)*"
# The verbs of taste, by their meaning (the object follows): liking, disliking, and choosing
# by habit ("I always use pnpm", "I never use ORMs", "I only write Kotlin"). A habit of
# choosing a tool or a thing is a preference; other habits ("I usually go running") are who
# the user is, read by the profile rules.
_LIKE_VERBS = (
    r"prefer|like|love|enjoy|adore|hate|dislike|detest|loathe|avoid|despise|can't stand|"
    r"cannot stand|can't bear|can't live without|cannot live without|swear by|"
    r"(?:have\s+)?(?:always|never)\s+(?:liked|loved|enjoyed|hated|preferred|trusted)|"
    r"don't like|do not like|don't enjoy|don't eat|don't drink|don't use|do not use|"
    r"don't want|never eat|never drink"
)
_CHOOSE_VERBS = (
    r"use|write|code in|work in|work with|pick|choose|order|buy|stick to|stick with|go with|"
    r"go for|reach for|listen to|read|watch|run|drink|eat|do|wear|book|fly|drive|take"
)
_PREFER: Final = re.compile(
    rf"^i\s+{_ADV}(?P<verb>{_LIKE_VERBS}|(?:always|never|only|mostly|usually|exclusively)\s+"
    # "I always want type hints": a standing wish is a preference, not a habit
    rf"(?:{_CHOOSE_VERBS}|want|need)|drink|eat|take)\s+(?P<what>.+)$",
    re.IGNORECASE,
)
_RATHER: Final = re.compile(
    r"^i(?:'d| would)\s+(?:much\s+)?(?P<verb>rather|prefer|love to|love)\s+"
    r"(?P<what>.+)$",
    re.IGNORECASE,
)
_INTO: Final = re.compile(
    rf"^i(?:'m| am)\s+{_ADV}(?:not\s+(?:really\s+)?)?(?P<verb>into|a (?:big |huge )?fan of|"
    r"passionate about|obsessed with|not a fan of|crazy about|keen on|fond of|partial to|"
    r"all about|big on|sick of|tired of|done with|allergic to (?-i:[a-z]+ing)|no fan of)\s+"
    r"(?P<what>.+)$",
    re.IGNORECASE,
)
# What the user names as their favourite, their go-to or their default, either way round:
# "my go-to editor is Neovim", "Neovim is my go-to", "my favourite part of the job is …".
_FAVOURITE: Final = re.compile(
    r"^(?:my|our)\s+(?:(?:absolute|all-time|current|usual)\s+)?(?:favou?rite|go-to|preferred|"
    r"default)\s+(?P<kind>[\w\s\-]+?)\s+(?:is|are|has always been|has been)\s+(?P<what>.+)$|"
    r"^(?P<what2>[\w][\w\s\-.+#']{0,40}?)\s+(?:is|are|has always been)\s+(?:still\s+)?(?:my|our)\s+"
    r"(?:(?:absolute|all-time|current|usual)\s+)?(?:favou?rite|go-to|preferred|default)\b",
    re.I,
)
# An opinion of taste about a thing: "Kotlin is overrated", "Tabs are the best".
_OPINION: Final = re.compile(
    r"^(?!(?:it|this|that|he|she|they|you|there|which|what)\b)(?P<what>[\w][\w\s\-.+#']{0,40}?)"
    r"\s+(?:is|are)\s+(?:(?:so|totally|way|completely|just)\s+)?(?:overrated|underrated|"
    r"the best|the worst|a must|unbeatable|a nightmare|a joy|a pain)\b",
    re.I,
)
_ALWAYS: Final = re.compile(
    r"^(?:please\s+)?(?P<when>always|never)\s+(?P<what>.+)$|"
    r"^(?:please\s+)?(?:don't|do not)\s+(?:ever\s+)?(?P<what2>(?!worry|know|understand|forget "
    r"to)\w.+)$|^(?:please\s+)?stop\s+(?P<what3>\w+ing\b.+)$",
    re.IGNORECASE,
)
# What bothers the user ("Emojis in comments drive me crazy") and how they find something ("I
# find dark mode easier on my eyes"): a taste, said about the thing.
_BOTHERS: Final = re.compile(
    r"^(?!(?:it|this|that|he|she|they|you)\b)(?P<what>[\w\-].{1,60}?)\s+(?:really\s+|always\s+)?"
    r"(?:drives?\s+me\s+(?:crazy|nuts|mad|insane)|makes?\s+me\s+(?:crazy|mad|cringe)|"
    r"(?:annoys?|bugs?|irritates?|frustrates?)\s+me)\b",
    re.IGNORECASE,
)
_FIND: Final = re.compile(
    r"^i\s+(?:really\s+|always\s+)?find\s+(?P<what>.+?)\s+(?:(?:a lot|much|far|really|so|too|very|"
    r"quite|a bit)\s+)?(?:distracting|annoying|irritating|confusing|tedious|noisy|unreadable|"
    r"easier|harder|nicer|better|worse|cleaner|clearer|more\s+\w+|less\s+\w+|(?:easy|hard)\s+"
    r"to\s+\w+)\b",
    re.IGNORECASE,
)
_NEVER_MIND: Final = re.compile(r"^(?:never\s*mind|nevermind|never again)\b", re.I)
_IMPERATIVE: Final = re.compile(
    r"^(?:please,?\s+)?(?P<what>(?:use|keep|write|add|put|format|name|prefer|avoid|send|give|"
    r"answer|reply|respond|call|address|show|include|sort|indent|stick to)\b.+)$",
    re.IGNORECASE,
)
_GENERAL: Final = re.compile(
    r"\b(?:for all|in all|all new|every|each|whenever|from now on|by default|in general|"
    # what the assistant writes, in the plural, is every answer: "keep answers short"
    r"always|never|,\s*not\s+\w|(?:your\s+)?(?:answers|responses|replies|explanations|"
    r"examples|summaries|code samples)\b)",
    re.IGNORECASE,
)


def read_preference(text: str, instructing: bool = False) -> tuple[str, str] | None:
    """(text, subject) of a preference in a user's clause; ``instructing``: the clause goes on
    from an instruction ("Use pytest for all new tests." "And keep test files next to …"),
    so an imperative is one too."""
    if _NEVER_MIND.match(text):
        return None
    original, text = text, expanded(text)
    for pattern in (_PREFER, _RATHER, _INTO):
        match = pattern.match(text)
        you = (
            re.match(r"^(?:it\s+if\s+)?you\s+(?P<do>\w.+)$", match.group("what"), re.I)
            if match
            else None
        )  # "I'd love it if you kept examples in Go"
        if you and pattern is _RATHER and you.group().lower().startswith("it"):
            return third_person(clean(original)), clean(you.group("do"))  # "… it if you kept …"
        if you and pattern is _RATHER:  # "I'd rather you answer in English": an instruction
            body = third_person(clean(you.group("do")), sentence=False)
            return f"The user wants the assistant to {body}", clean(you.group("do"))
        if match:
            what = object_of(match.group("what"))
            if what is None:
                return None
            verb = match.group("verb").lower()
            if (
                pattern is _PREFER
                and verb in ("drink", "eat", "take")
                and not re.search(r"\b(?:my|no|without|with|only|black|every)\b", what, re.I)
            ):
                return None
            return third_person(clean(original)), what
    match = _BOTHERS.match(text)
    if match:
        what = object_of(match.group("what"))
        return (f"The user dislikes {what[:1].lower()}{what[1:]}", what) if what else None
    match = _FIND.match(text)
    if match:
        what = object_of(match.group("what"))
        return (third_person(clean(original)), what) if what else None
    match = _FAVOURITE.match(text)
    if match:
        what = object_of(match.group("what") or match.group("what2"))
        return (third_person(clean(original)), what) if what else None
    match = _OPINION.match(text)
    if match:
        what = object_of(match.group("what"))
        return (third_person(clean(original)), what) if what else None
    match = _ALWAYS.match(text)
    if match:
        what = object_of(match.group("what") or match.group("what2") or match.group("what3") or "")
        if what is None:
            return None
        when = (match.group("when") or ("stop" if match.group("what3") else "never")).lower()
        return f"The user wants the assistant to {when} {third_person(what, sentence=False)}", what
    match = _IMPERATIVE.match(text)
    if match and (_GENERAL.search(text) or instructing):
        what = clean(match.group("what"))
        body = third_person(what, sentence=False)
        return f"The user wants the assistant to {body[:1].lower()}{body[1:]}", what
    return None
