"""Choices made across turns: the alternatives a conversation names, and the reply that picks one.

Why it exists: a decision is rarely one sentence. The alternatives are named in one turn —
by the assistant ("Auth0 or Keycloak. Auth0 is managed, Keycloak you host yourself.", "I
could cache them in Redis, or just in process memory. Which do you prefer?") or by the user
("Which CI should we use, GitHub Actions or Buildkite?", "We went back and forth on the queue,
Kafka vs RabbitMQ.") — and the pick comes a turn or two later, in the user's own words:
"Keycloak, we can't send user data to a third party", "ok, github actions then", "RabbitMQ
won, Kafka is overkill", "in-process is fine, we only run one instance". Rather than one
pattern per phrasing, the rules here are two mechanisms:

- ``options_in``: the two alternatives of the last sentence of a message that names them
  ("A or B", "A vs B", "A versus B", "between A and B"), each cut to the few words next to
  the conjunction;
- ``pick``: a reply picks an option when the head of its first clause (what comes before the
  first comma, at most six words, without lead-ins such as "ok") shares a word (compared by
  its first five letters) with exactly one of them and with more words of it than of the
  other; a head that refuses ("neither", "not sure", "let me think") picks nothing.

And a third: ``answer_to_should``: a reply to "Should we …?" that states something (not a
question, not "not sure") is a decision, whatever its first word: "Yes, XML stays for them",
"No, drop it", "For three more months, then remove them" (but "No, not yet" puts it off). The memory
quotes the question, since the answer alone says nothing.

And a fourth: ``numbered_pick``: a reply that answers a numbered list of options ("(1) Loki,
(2) Elasticsearch, (3) CloudWatch") by its number or its rank ("1. cheapest to run", "option
2", "the second one") picks that option.

Pure: text in, answers out.
"""

from __future__ import annotations

import re
from typing import Final

from wm_core._document.sentences import sentences
from wm_core._memory.speech import LEAD, TENTATIVE, clean

_OR: Final = re.compile(
    r"(?P<a>[^,:;?!.()]+?),?\s+(?:or|vs\.?|versus|or maybe|or just)\s+(?P<b>[^,:;?!()]+?)"
    r"(?=[,;?!()]|\.(?:\s|$)|$)",
    re.IGNORECASE,
)
_BETWEEN: Final = re.compile(
    r"\bbetween\s+(?P<a>[^,:;?!.]+?)\s+and\s+(?P<b>[^,:;?!()]+?)(?=[,;?!()]|\.(?:\s|$)|$)", re.I
)
# Words an option's span starts with that are not the option: "should we use", "I could …".
_OPTION_LEAD: Final = re.compile(
    r"^(?:.*\b(?:use|using|pick|choose|with|take|go with|either|options? (?:are|is)|"
    r"between|like|prefer|look at|try|consider|recommend|suggest|go for)\s+|(?:(?:should|shall|could|would|do|can)\s+)?(?:we|i|you)\s+"
    r"(?:could|should|would|can|might|want to|prefer to)?\s*|(?:the|a|an|just)\s+)",
    re.IGNORECASE,
)
# A sentence offers a choice when it says so: "should we", "which", "prefer", "options",
# "vs" — "Do you know if it's a boy or a girl?" asks for a fact, not a choice.
_CHOICE_CUE: Final = re.compile(
    r"\b(?:should|shall|which|prefer|rather|option|options|choose|choice|pick|go with|use|"
    r"vs\.?|versus|between|could|recommend|suggest|look at|either|want|would you like)\b",
    re.IGNORECASE,
)
_MAX_OPTION_WORDS: Final = 8
_MAX_HEAD_WORDS: Final = 6
_MAX_BARE_WORDS: Final = 5
_HABIT: Final = re.compile(
    r"\b(?:mostly|usually|always|normally|often|generally|typically)\b", re.I
)
_REFUSAL: Final = re.compile(
    r"^(?:neither|none|no idea|not sure|don't know|let me think|both|either|depends|hmm)\b", re.I
)
_SHOULD: Final = re.compile(
    r"^(?:so\s+)?should\s+(?P<who>we|the|it|they|this|that|our|all|every)\b.+\?$", re.I
)
_MAX_ANSWER_WORDS: Final = 25
# An answer that puts the question off decides nothing: "No, not yet.", "Later."
_DEFERRED: Final = re.compile(
    r"^(?:no[,.!]?\s+)?(?:not\s+(?:yet|now|today|for now)|later|maybe later|we'll see)[.!]?$", re.I
)


def _option(span: str, last: bool) -> str:
    """The option a span names: without its lead-in, cut to the words next to "or"."""
    span = clean(span)
    stripped = _OPTION_LEAD.sub("", span) if not last else span
    words = (stripped or span).split()
    kept = words[:_MAX_OPTION_WORDS] if last else words[-_MAX_OPTION_WORDS:]
    return clean(" ".join(kept))


def options_in(text: str) -> tuple[str, str] | None:
    """The two alternatives named by the last sentence of ``text`` that offers a choice (see
    the module docstring)."""
    found = sentences(text)
    for index in range(len(found) - 1, -1, -1):
        said = LEAD.sub("", found[index]).strip()
        after = found[index + 1] if index + 1 < len(found) else ""
        bare = said.endswith("?") and len(said.split()) <= _MAX_BARE_WORDS
        if not _CHOICE_CUE.search(said) and not _CHOICE_CUE.search(after) and not bare:
            continue  # (a bare "Schema-first or code-first?" offers a choice by its form)  # "… in Redis, or in process memory. Which do you prefer?" asks after
        for pattern in (_BETWEEN, _OR):
            for match in pattern.finditer(said):
                a = _option(match.group("a"), last=False)
                b = _option(match.group("b"), last=True)
                if a and b and a.lower() != b.lower():
                    return a, b
    return None


def _stems(text: str) -> set[str]:
    return {w[:5] for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


def pick(reply: str, options: tuple[str, str]) -> tuple[str, str, str] | None:
    """(the option picked, the reply's head in its own words, its first sentence) when a
    reply picks one of two options, else None (see the module docstring)."""
    found = sentences(reply)
    first = LEAD.sub("", found[0]).strip() if found else ""
    # the head ends at the first comma or full stop: "k8s cronjobs. we want it in one place"
    cut = re.search(r",|[.;!]\s", first)
    head, rest = (first[: cut.start()], first[cut.end() :]) if cut else (first, "")
    if not head or head.endswith("?") or _REFUSAL.match(head) or TENTATIVE.match(head):
        return None
    if _HABIT.search(head) or len(head.split()) > _MAX_HEAD_WORDS:
        return None  # "Indoor mostly": how the user lives, not a choice made
        return None
    said = _stems(head)
    scores = [len(said & _stems(option)) for option in options]
    if max(scores) == 0 or scores[0] == scores[1]:
        return None
    chosen = options[scores.index(max(scores))]
    return chosen, clean(head), clean(f"{head}, {rest.strip()}" if rest.strip() else head)


def other(options: tuple[str, str], chosen: str) -> str:
    return options[1] if options[0] == chosen else options[0]


def answer_to_should(question: str, reply: str) -> str | None:
    """The reply's first sentence when it answers a "Should we …?" question with a statement
    (see the module docstring); None for another question or a reply that decides nothing."""
    if not _SHOULD.match(question):
        return None
    found = sentences(reply)
    first = found[0].strip() if found else ""
    said = LEAD.sub("", first).strip()
    decided = said or first  # "Yes." alone answers too
    if not decided or decided.endswith("?") or len(decided.split()) > _MAX_ANSWER_WORDS:
        return None
    if TENTATIVE.match(said) or _REFUSAL.match(said) or _DEFERRED.match(first):
        return None
    return clean(first)


# A numbered option: "(1) Loki", "1. Loki", "2) Elasticsearch".
_NUMBER: Final = re.compile(r"(?:^|(?<=[\s:;,]))\(?(?P<n>[1-9])[.)]\s+")
# A reply that picks by number or rank: "1.", "1, cheapest", "option 2", "#3", "the second one".
_RANKS: Final = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5}
_BY_NUMBER: Final = re.compile(
    r"^\s*(?:(?:option|number|#)\s*(?P<n1>[1-9])\b|\(?(?P<n>[1-9])(?=[.):,!]|\s*[-—]|\s*$))"
    r"[.):,!]?\s*(?:[-—]\s*)?(?P<rest>.*)$|"
    r"^\s*(?:the\s+)?(?P<rank>first|second|third|fourth|fifth)\s+(?:one|option)\b[.,:]?\s*"
    r"(?P<rest2>.*)$",
    re.IGNORECASE | re.DOTALL,
)


def numbered_options(text: str) -> list[str]:
    """The options of a numbered list in ``text`` (1, 2, … in order), or [] without one."""
    marks = list(_NUMBER.finditer(text))
    options: list[str] = []
    for index, mark in enumerate(marks):
        if int(mark.group("n")) != len(options) + 1:
            break
        end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
        option = re.split(r"[.;:!?\n]|,\s*(?:or\s+)?$", text[mark.end() : end])[0]
        option = re.sub(r"[,\s]+(?:or|and)?\s*$", "", option).strip()
        if option:
            options.append(option)
    return options if len(options) > 1 else []


def numbered_pick(offer: str, reply: str) -> tuple[str, list[str], str] | None:
    """(the option picked, the others, the rest of the reply) when ``reply`` picks one of the
    numbered options ``offer`` lists by its number or rank, else None."""
    found = _BY_NUMBER.match(reply)
    if found is None:
        return None
    options = numbered_options(offer)
    number = found.group("n") or found.group("n1")
    n = int(number) if number else _RANKS[found.group("rank").lower()]
    if not options or n > len(options):
        return None
    rest = clean(found.group("rest") or found.group("rest2") or "")
    return options[n - 1], [o for i, o in enumerate(options) if i != n - 1], rest
