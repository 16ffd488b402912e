"""Sentence-level rules of the offline summarizer: what reads as a request, a question, a
decision, a correction or a TODO, a title from a request, and when a reply answers a question.

Why here and not with the memory rules: these sort a conversation into the working memory's
sections (what the next model needs to carry on), not into long-term memories about the user.
Plain string processing: the same text always gives the same answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from wm_core._document.sentences import sentences
from wm_core._messages import Message, TextPart

MAX_ITEM_CHARS: Final = 400
MAX_TITLE_WORDS: Final = 10

_GREETING = re.compile(
    r"^\s*(?:hi|hello|hey|hallo|(?:good )?(?:morning|afternoon|evening))(?: there| all| team)?"
    r"(?:[!,.]+\s*|\s+|$)",
    re.IGNORECASE,
)
# A durable statement worth keeping as a fact: it carries a figure or a person's full name.
DATA = re.compile(r"\d|(?<=\s)[A-Z][a-z]+ [A-Z][a-z]+\b")
_LEAD_IN = re.compile(
    r"^\s*(?:(?:ok(?:ay)?|great|nice|thanks|thank you|perfect|cool|also|and|so|now)\b[,.!]?\s+)+",
    re.IGNORECASE,
)
_REQUEST_LEAD = re.compile(
    r"^\s*(?:please|can you|could you|would you|will you|i want you to|i'd like you to|"
    r"i need you to|help me(?: to)?|let's|let us)\b[,]?\s*(?:please\b\s*)?(?:also\b\s*)?",
    re.IGNORECASE,
)
_IMPERATIVE = re.compile(
    r"^\s*(?:add|fix|make|implement|write|create|update|remove|delete|change|refactor|support|"
    r"ensure|investigate|find|check|explain|rename|move|migrate|upgrade|port|build|run|test|"
    r"document|debug|review|set up|configure|replace|keep|don't|do not|never|always)\b",
    re.IGNORECASE,
)
_REQUIREMENT = re.compile(
    r"\b(?:should|must|needs? to|has to|have to|i want|i need|we need)\b", re.IGNORECASE
)
DECISION = re.compile(
    r"\b(?:decision|decided|decide to|agreed|we(?:'ll| will) (?:use|keep|go|detect|switch|skip|"
    r"store|stick)|i(?:'ll| will) use|let's (?:use|go with|keep)|going with|settled on|"
    r"prefer(?:s|red)?|must|mustn't|never|always|don't (?:touch|change|use|modify)|"
    r"do not (?:touch|change|use|modify)|won't|switch(?:ed)? to|constraint|requirement|"
    r"convention)\b",
    re.IGNORECASE,
)
TODO = re.compile(
    r"\b(?:TODO|FIXME|XXX|follow[- ]up|open question|still need to|not yet (?:done|implemented|"
    r"supported)|remaining:|for later|next session)\b",
    re.IGNORECASE,
)
CORRECTION = re.compile(
    r"^\s*(?:no[,.!]|nope\b|wrong\b|actually[, ]|that'?s (?:not|wrong|incorrect)|"
    r"this is (?:not|wrong)|but wait\b|wait[,!]|don'?t do that|stop\b)",
    re.IGNORECASE,
)
# Tags in front of an item: status markers ("[resolved]") and the summarizer's own labels.
ITEM_TAGS = re.compile(
    r"^(?:\[[^\]]*\]\s*)*"
    r"(?:unanswered question from the user:|waiting for the user:|user correction:)?\s*",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z]+")
_STOPWORD_TEXT: Final = (
    "also there their they them then than that this these those what when where which while "
    "with without would could should shall will have has had does doesn doesnt didn dont isn "
    "aren wasn about into from your yours mine some such only just even every other more most "
    "very much many like able being been were here how why who whom whose way any all can "
    "might must need needs want wants make makes made the and for are but not you our out"
)
_STOPWORDS: Final = frozenset(_STOPWORD_TEXT.split())


def clip(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def stems(text: str) -> set[str]:
    """Content words cut to six letters: enough to see that a reply talks about a question."""
    return {w[:6] for w in _WORD.findall(text.lower()) if len(w) >= 4 and w not in _STOPWORDS}


def text_parts(message: Message) -> list[str]:
    """The message's non-blank text parts."""
    return [p.text for p in message.parts if isinstance(p, TextPart) and p.text.strip()]


def strip_lead(sentence: str) -> str:
    """The sentence without greeting and filler ("Great. Also, …"), capitalized."""
    core = _LEAD_IN.sub("", _GREETING.sub("", sentence)).strip()
    return core[:1].upper() + core[1:]


def summary_title(text: str) -> str:
    """A short title from a user request: first sentence, no greeting or "please", ≤10 words."""
    for sentence in sentences(_GREETING.sub("", text)):
        core = _REQUEST_LEAD.sub("", strip_lead(sentence)).strip()
        if not core:
            continue
        words = core.split()
        for cut in (":", ";", " — ", " - ", " ("):
            index = core.find(cut)
            if index > 0 and len(core[:index].split()) >= 3:
                words = core[:index].split()
                break
        title = " ".join(words[:MAX_TITLE_WORDS]).rstrip(",.:;!?—-")
        if title:
            return title[0].upper() + title[1:]
    return ""


def is_request(sentence: str) -> bool:
    core = strip_lead(sentence)
    if _REQUEST_LEAD.match(core) or _IMPERATIVE.match(core):
        return True
    return not core.endswith("?") and bool(_REQUIREMENT.search(core))


def is_question(sentence: str) -> bool:
    core = strip_lead(sentence)
    return core.endswith("?") and not _REQUEST_LEAD.match(core)


def answered(question: str, later_replies: Sequence[set[str]]) -> bool:
    """Whether some later assistant text (given as its stems) shares enough content words."""
    wanted = stems(question)
    if not wanted:
        return bool(later_replies)
    needed = max(2, round(0.4 * len(wanted))) if len(wanted) >= 2 else 1
    return any(len(wanted & reply) >= needed for reply in later_replies)


def core_text(item: str) -> str:
    """An item without the tags the summarizer or a model put in front of it, for comparing
    items across sections ("Unanswered question from the user: X" is the item X)."""
    return ITEM_TAGS.sub("", item)
