"""The deterministic memory extractor: long-term memories from plain statements, no model.

Why it exists: with no API key the whole pipeline must still remember what a user plainly
said, and tests need an extractor whose output is known in advance. It answers in the same
ops a model would propose, so its output goes through the same guards.

What it takes, sentence by sentence, from the user's messages (an assistant proposes, the
user decides):

- preferences: "I prefer X", "I like X", "I don't like X", "I love/hate X", "please always
  X", "please never X" — not "I don't prefer X" (it says what is not preferred, not what is),
  not "I'd like you to X" (a request), not a question or a hypothetical ("if I preferred…");
- identity: "my name is X", "I'm the/a ROLE at|for ORG", "I work at|for ORG", "I work on X";
- decisions: "we decided/agreed to X because Y", "let's go with X since Y" (the reason in the
  fields);
- dated events: a statement with an absolute date (2026-03-05, 5 March 2026, March 5, 2026),
  or with "today", "yesterday", "tomorrow", "N days ago" when the message starts with a
  timestamp that makes it absolute; a relative date without one gives no event;
- named entities the user introduces: "a service called X", "our repo named X", "X is our
  billing service".

Each memory is about a *subject* (stored in its ``subject`` field): a preference's object
words, a profile's attribute, an entity's name, a decision's choice. A new statement about
the subject of an existing memory is an UPDATE of it, or, when the new text would drop a name,
date or number of the old one (which the guards refuse in an UPDATE), a RETIRE of the old one
with the statement as its reason and a CREATE. Within one archive the last statement about a
subject wins. Items the working memory could not hold (pending items) are read with the rules
that do not need a speaker (decisions, dated events, entities).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from wm_core._document.sentences import sentences, stamp_date
from wm_core._guards.key_facts import missing_anchors
from wm_core._guards.pending import PendingItem
from wm_core._memory.guard import retire_supported
from wm_core._memory.model import MemoryOp, MemoryOpKind, MemoryRecord, MemoryType, memory_key
from wm_core._memory.tool import MAX_MEMORY_TEXT_CHARS
from wm_core._messages import Message, Role

# -- what a sentence is not ---------------------------------------------------------------------

_QUESTION_START: Final = re.compile(
    r"^(?:what|how|why|when|where|which|who|whom|whose|should|could|would|can|do|does|did|is|"
    r"are|was|were|will|shall|may|might|have|has|am)\b",
    re.IGNORECASE,
)
_HYPOTHETICAL: Final = re.compile(
    r"\b(?:if|suppose|supposing|imagine|hypothetically|assuming|let's say|in case|unless)\b",
    re.IGNORECASE,
)
# A tentative opening: what follows is not (yet) a statement.
_TENTATIVE: Final = re.compile(
    r"^(?:maybe|perhaps|probably|i'd|i would|i might|i could|i may|i wonder|i'm not sure|"
    r"not sure|i think i might|i guess)\b",
    re.IGNORECASE,
)
_LEAD: Final = re.compile(
    r"^\s*(?:(?:ok(?:ay)?|great|nice|thanks|thank you|perfect|cool|also|and|so|now|btw|"
    r"by the way|fyi|actually|just so you know|for the record|oh|well|yes|yeah|right)\b[,.!]?"
    r"\s*)+",
    re.IGNORECASE,
)

# -- the statements ----------------------------------------------------------------------------

_ADVERBS = r"(?:(?:really|strongly|generally|usually|always|definitely|much|still|now|also)\s+)*"
_PREFER: Final = re.compile(rf"^i\s+{_ADVERBS}prefer\s+(?P<what>.+)$", re.IGNORECASE)
_LIKE: Final = re.compile(
    rf"^i\s+{_ADVERBS}(?P<verb>like|love|enjoy|hate|dislike|can't stand)\s+(?P<what>.+)$",
    re.IGNORECASE,
)
_NOT_LIKE: Final = re.compile(
    rf"^i\s+(?:really\s+)?(?:don't|do not|dont)\s+{_ADVERBS}(?P<verb>like|enjoy|want)\s+"
    r"(?P<what>.+)$",
    re.IGNORECASE,
)
_ALWAYS: Final = re.compile(
    r"^(?:please\s+)?(?P<when>always|never)\s+(?P<what>.+)$|^please\s+(?:do\s+)?(?P<dont>"
    r"don't|do not)\s+(?:ever\s+)?(?P<what2>.+)$",
    re.IGNORECASE,
)
_NAME: Final = re.compile(
    r"^(?:hi[,!]?\s+)?my name is\s+(?P<name>[A-Z][\w'\-]+(?:\s+[A-Z][\w'\-]+){0,3})",
    re.IGNORECASE,
)
_ROLE: Final = re.compile(
    r"^(?i:i(?:'m| am))\s+(?P<det>(?i:the|an?))\s+(?P<role>[\w\-/ ]{2,60}?)\s+(?:at|for|of|in)\s+"
    r"(?P<org>[A-Z][\w&.\-]*(?:\s+[A-Z][\w&.\-]*){0,4})",
)
_WORK_AT: Final = re.compile(
    r"^(?i:i\s+(?:currently\s+)?work\s+(?:at|for))\s+(?P<org>[A-Z][\w&.\-]*(?:\s+[A-Z][\w&.\-]*)"
    r"{0,4})",
)
_WORK_ON: Final = re.compile(r"^i\s+(?:mostly\s+|mainly\s+)?work\s+on\s+(?P<what>.+)$", re.I)
_DECIDED: Final = re.compile(
    r"^(?:(?:we|i|the team)(?:\s+have|'ve)?\s+)?(?:finally\s+)?(?:decided|agreed)\s+"
    r"(?:to\s+|on\s+|that\s+)?"
    r"(?P<what>.+?)(?:,?\s+(?:because|since)\s+(?P<why>.+))?$",
    re.IGNORECASE,
)
_GO_WITH: Final = re.compile(
    r"^let's\s+(?:go\s+with|use|stick\s+with|pick|choose)\s+(?P<what>.+?),?\s+(?:because|since)"
    r"\s+(?P<why>.+)$",
    re.IGNORECASE,
)
_KINDS = (
    "project|service|microservice|repo|repository|app|application|library|package|database|api|"
    "tool|team|product|cluster|pipeline|bot"
)
_CALLED: Final = re.compile(
    rf"\b(?P<kind>{_KINDS})\s+(?:called|named)\s+[`\"']?(?P<name>[\w][\w.\-/]*[\w])",
    re.IGNORECASE,
)
_IS_OUR: Final = re.compile(
    rf"^[`\"']?(?P<name>[A-Z][\w.\-/]*[\w]|[\w.\-]+/[\w.\-]+)[`\"']?\s+is\s+(?:our|my|the)\s+"
    rf"(?:[\w\-]+\s+){{0,3}}?(?P<kind>{_KINDS})\b",
)

# -- dates -------------------------------------------------------------------------------------

_MONTHS: Final = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH = "|".join(_MONTHS)
_ISO: Final = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_DAY_MONTH: Final = re.compile(rf"\b(\d{{1,2}})\s+({_MONTH})\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_DAY: Final = re.compile(rf"\b({_MONTH})\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_RELATIVE: Final = re.compile(
    r"\b(?:(?P<word>today|yesterday|tomorrow)|(?P<n>\d{1,3})\s+days?\s+(?P<dir>ago|from now)|"
    r"in\s+(?P<m>\d{1,3})\s+days?)\b",
    re.IGNORECASE,
)
_EVENT_VERB: Final = re.compile(
    r"\b(?:shipped|released|launched|deployed|migrated|moved|started|finished|completed|"
    r"happened|broke|failed|went down|outage|incident|meeting|met|signed|joined|left|"
    r"scheduled|due|deadline|planned|is on|was on|will be on|on)\b",
    re.IGNORECASE,
)


def _date(year: int, month: int, day: int) -> str | None:
    try:
        return datetime.date(year, month, day).isoformat()
    except ValueError:
        return None


def absolute_date(sentence: str) -> str | None:
    """The first absolute calendar date a sentence gives, as an ISO date."""
    for iso in _ISO.finditer(sentence):
        found = _date(int(iso.group(1)), int(iso.group(2)), int(iso.group(3)))
        if found:
            return found
    day_first = _DAY_MONTH.search(sentence)
    if day_first:
        month = _MONTHS.index(day_first.group(2).lower()) + 1
        return _date(int(day_first.group(3)), month, int(day_first.group(1)))
    month_first = _MONTH_DAY.search(sentence)
    if month_first:
        month = _MONTHS.index(month_first.group(1).lower()) + 1
        return _date(int(month_first.group(3)), month, int(month_first.group(2)))
    return None


def relative_date(sentence: str, base: str | None) -> str | None:
    """A relative date ("yesterday", "3 days ago") made absolute by ``base`` (an ISO date)."""
    match = _RELATIVE.search(sentence)
    if match is None or base is None:
        return None
    day = datetime.date.fromisoformat(base)
    word = (match.group("word") or "").lower()
    if word:
        offset = {"today": 0, "yesterday": -1, "tomorrow": 1}[word]
    elif match.group("n"):
        offset = int(match.group("n")) * (-1 if match.group("dir").lower() == "ago" else 1)
    else:
        offset = int(match.group("m"))
    return (day + datetime.timedelta(days=offset)).isoformat()


# -- the third person --------------------------------------------------------------------------

_PRONOUNS: Final = {
    "i": "the user",
    "i'm": "the user is",
    "i've": "the user has",
    "i'll": "the user will",
    "me": "the user",
    "my": "the user's",
    "mine": "the user's",
    "myself": "the user",
    "we": "the team",
    "we're": "the team is",
    "we've": "the team has",
    "we'll": "the team will",
    "us": "the team",
    "our": "the team's",
    "ours": "the team's",
    "let's": "the team will",
}
_PRONOUN: Final = re.compile(r"\b(?:" + "|".join(map(re.escape, _PRONOUNS)) + r")\b", re.I)


def third_person(text: str, *, sentence: bool = True) -> str:
    """``text`` with the speaker's pronouns replaced, so it reads right in a later session;
    capitalised when it is a ``sentence``."""
    replaced = _PRONOUN.sub(lambda m: _PRONOUNS[m.group().lower()], text)
    return replaced[:1].upper() + replaced[1:] if sentence else replaced


_TRAILING: Final = re.compile(r"(?:,?\s+(?:now|instead|anymore|from now on|please))+$", re.I)


def _clean(text: str) -> str:
    text = " ".join(text.split()).strip(" \"'`").rstrip(".!;, ")
    return _TRAILING.sub("", text)


def _finish(text: str) -> str:
    text = _clean(text)
    if len(text) > MAX_MEMORY_TEXT_CHARS - 1:
        text = text[: MAX_MEMORY_TEXT_CHARS - 2].rsplit(" ", 1)[0] + "…"
    return text + "."


# -- subjects ----------------------------------------------------------------------------------

_SUBJECT_STOP_TEXT: Final = (
    "the a an to of for in on at with and or my our your their it this that these those be "
    "is are was were use using when over than instead rather always never please do not "
    "don't user user's team team's"
)
_SUBJECT_STOP: Final = frozenset(_SUBJECT_STOP_TEXT.split())


def subject_words(text: str) -> frozenset[str]:
    """The content words a subject is compared by (normalized, cut to six characters)."""
    words = re.findall(r"[\w'.\-]+", memory_key(text))
    return frozenset(w.strip(".'-")[:6] for w in words if w.strip(".'-") not in _SUBJECT_STOP)


def _same_subject(a: str, b: str) -> bool:
    """Subjects match when they are equal, or share at least half of their words."""
    if memory_key(a) == memory_key(b):
        return True
    left, right = subject_words(a), subject_words(b)
    if not left or not right:
        return False
    return len(left & right) * 2 >= max(len(left), len(right))


# -- candidates --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Candidate:
    type: MemoryType
    text: str
    subject: str
    source: str  # the sentence it came from (a RETIRE's reason quotes it)
    fields: Mapping[str, str] = field(default_factory=dict)
    event_time: str | None = None
    message_ids: tuple[str, ...] = ()


def _statement(sentence: str) -> str | None:
    """The sentence without its lead-in, or None for a question or a hypothetical."""
    text = _LEAD.sub("", sentence).strip()
    if not text or text.endswith("?") or _QUESTION_START.match(text):
        return None
    if _HYPOTHETICAL.search(text) or _TENTATIVE.match(text):
        return None
    return text


def _preference(text: str) -> tuple[str, str] | None:
    """(memory text, subject) of a stated preference."""
    match = _PREFER.match(text)
    if match:
        what = _clean(match.group("what"))
        return f"User prefers {what}", what
    match = _NOT_LIKE.match(text)
    if match:
        what = _clean(match.group("what"))
        verb = match.group("verb").lower()
        if verb == "want" and what.lower().startswith(("you", "to ")):
            return None  # "I don't want you to..." is a request about this task
        return f"User does not {verb} {what}", what
    match = _LIKE.match(text)
    if match:
        what = _clean(match.group("what"))
        verb = match.group("verb").lower()
        if what.lower().startswith(("you to", "it when you")) and verb == "like":
            return None
        phrase = {"can't stand": "cannot stand"}.get(verb, verb + "s")
        return f"User {phrase} {what}", what
    match = _ALWAYS.match(text)
    if match:
        if match.group("when"):
            what = _clean(match.group("what"))
            return f"User wants the assistant to {match.group('when').lower()} {what}", what
        what = _clean(match.group("what2"))
        return f"User wants the assistant to never {what}", what
    return None


def _profile(text: str) -> tuple[str, str, dict[str, str]] | None:
    """(memory text, subject, fields) of an identity statement."""
    match = _NAME.match(text)
    if match:
        name = match.group("name")
        return f"User's name is {name}", "name", {"name": name}
    match = _ROLE.match(text)
    if match:
        role, org = _clean(match.group("role")), _clean(match.group("org"))
        return (
            f"User is {match.group('det').lower()} {role} at {org}",
            "role",
            {"role": role, "organization": org},
        )
    match = _WORK_AT.match(text)
    if match:
        org = _clean(match.group("org"))
        return f"User works at {org}", "organization", {"organization": org}
    match = _WORK_ON.match(text)
    if match:
        what = third_person(_clean(match.group("what")), sentence=False)
        return f"User works on {what}", "works on", {"works_on": what}
    return None


def _decision(text: str) -> tuple[str, str, dict[str, str]] | None:
    match = _GO_WITH.match(text) or _DECIDED.match(text)
    if match is None:
        return None
    what = _clean(match.group("what"))
    why = _clean(match.group("why") or "")
    if len(what.split()) < 2 and not why:
        return None  # "we agreed." says nothing
    body = third_person(text)
    fields = {"decision": third_person(what, sentence=False)}
    if why:
        fields["reason"] = third_person(why, sentence=False)
    return body, what, fields


def _entity(text: str) -> tuple[str, str, dict[str, str]] | None:
    match = _CALLED.search(text) or _IS_OUR.match(text)
    if match is None:
        return None
    name = match.group("name")
    kind = match.group("kind").lower()
    return third_person(text), name, {"name": name, "kind": kind}


def _classify(
    sentence: str, *, speaker: bool, base_date: str | None
) -> tuple[MemoryType, str, str, dict[str, str], str | None] | None:
    """The memory a sentence states: (type, text, subject, fields, event time), or None.

    ``speaker`` is False for text without a speaker (pending items): first-person rules
    (preferences, identity) do not apply to it.
    """
    text = _statement(sentence)
    if text is None:
        return None
    when = absolute_date(text) or relative_date(text, base_date)
    if speaker:
        profile = _profile(text)
        if profile:
            return MemoryType.PROFILE, _finish(profile[0]), profile[1], profile[2], None
        preference = _preference(text)
        if preference:
            return MemoryType.PREFERENCE, _finish(preference[0]), preference[1], {}, None
    decision = _decision(text)
    if decision:
        return MemoryType.DECISION, _finish(decision[0]), decision[1], decision[2], when
    entity = _entity(text)
    if entity:
        return MemoryType.ENTITY, _finish(entity[0]), entity[1], entity[2], None
    if when and _EVENT_VERB.search(text):
        relative = _RELATIVE.search(text) if not absolute_date(text) else None
        if relative is not None:  # a relative date is only kept as the absolute one
            text = f"{text[: relative.start()]}on {when}{text[relative.end() :]}"
        body = third_person(text)
        return MemoryType.EVENT, _finish(body), memory_key(text), {}, when
    return None


def _candidates(
    messages: Sequence[Message],
    pending: Sequence[PendingItem],
    message_dates: Mapping[str, str],
) -> list[_Candidate]:
    found: list[_Candidate] = []
    for message in messages:
        if message.role is not Role.USER:
            continue
        for text in message.text().split("\n"):
            base = stamp_date(text) or message_dates.get(message.id)
            for sentence in sentences(text):
                result = _classify(sentence, speaker=True, base_date=base)
                if result is None:
                    continue
                kind, body, subject, fields, when = result
                found.append(_Candidate(kind, body, subject, sentence, fields, when, (message.id,)))
    for item in pending:
        for sentence in sentences(item.text):
            result = _classify(sentence, speaker=False, base_date=None)
            if result is None:
                continue
            kind, body, subject, fields, when = result
            found.append(_Candidate(kind, body, subject, sentence, fields, when))
    return found


def _latest_per_subject(found: Iterable[_Candidate]) -> list[_Candidate]:
    """One candidate per (type, subject): the last statement wins, at the place of the first."""
    kept: list[_Candidate] = []
    for candidate in found:
        for index, earlier in enumerate(kept):
            if earlier.type is candidate.type and _same_subject(earlier.subject, candidate.subject):
                ids = tuple(dict.fromkeys((*earlier.message_ids, *candidate.message_ids)))
                kept[index] = _Candidate(
                    candidate.type, candidate.text, candidate.subject, candidate.source,
                    candidate.fields, candidate.event_time or earlier.event_time, ids,
                )  # fmt: skip
                break
        else:
            kept.append(candidate)
    return kept


def _subject_of(memory: MemoryRecord) -> str:
    subject = memory.fields.get("subject")
    if subject:
        return subject
    text = re.sub(
        r"^user(?:'s)?\s+(?:prefers|likes|loves|hates|does not \w+|wants the assistant to|"
        r"works (?:at|on)|is|name is)\s+",
        "",
        memory.text,
        flags=re.IGNORECASE,
    )
    return text


def _matching(candidate: _Candidate, existing: Sequence[MemoryRecord]) -> MemoryRecord | None:
    if candidate.type is MemoryType.EVENT:
        return None  # events are many; equal ones are deduplicated by the guards
    for memory in existing:
        if memory.type is candidate.type and _same_subject(_subject_of(memory), candidate.subject):
            return memory
    return None


def archive_text(messages: Sequence[Message], pending: Sequence[PendingItem] = ()) -> str:
    """The text memory ops are judged against (a RETIRE must be backed by it): the text of
    every message and of every pending item offered to extraction."""
    texts = [message.text() for message in messages]
    texts.extend(item.text for item in pending)
    return "\n".join(text for text in texts if text.strip())


def extract_memories(
    messages: Sequence[Message],
    existing: Sequence[MemoryRecord],
    pending: Sequence[PendingItem] = (),
    *,
    message_dates: Mapping[str, str] | None = None,
) -> list[MemoryOp]:
    """The memory ops the statements of ``messages`` (and the ``pending`` items) call for,
    against the owner's ``existing`` memories; see the module docstring.

    ``message_dates`` (message id → ISO date) makes relative dates absolute for messages
    without a leading timestamp.
    """
    ops: list[MemoryOp] = []
    retired: set[str] = set()
    archive = archive_text(messages, pending)
    for candidate in _latest_per_subject(_candidates(messages, pending, message_dates or {})):
        fields = {**candidate.fields, "subject": candidate.subject}
        create = MemoryOp(
            kind=MemoryOpKind.CREATE,
            type=candidate.type,
            text=candidate.text,
            fields=fields,
            event_time=candidate.event_time,
            source_message_ids=candidate.message_ids,
        )
        old = _matching(candidate, existing)
        if old is None or old.id in retired:
            ops.append(create)
            continue
        if memory_key(old.text) == memory_key(candidate.text):
            continue  # already remembered as it is
        reason = f"the user said: {_clean(candidate.source)}"
        if missing_anchors(old.text, candidate.text):
            # A changed name, date or number: the old memory is retired when the archive
            # backs that up (the guards' own rule); else both stay, the newer one dated later.
            if retire_supported(old, reason, archive) is None:
                retired.add(old.id)
                ops.append(
                    MemoryOp(
                        kind=MemoryOpKind.RETIRE,
                        target_ids=(old.id,),
                        reason=reason,
                        source_message_ids=candidate.message_ids,
                    )
                )
            ops.append(create)
            continue
        ops.append(
            MemoryOp(
                kind=MemoryOpKind.UPDATE,
                type=candidate.type,
                text=candidate.text,
                fields=fields,
                event_time=candidate.event_time or old.event_time,
                target_ids=(old.id,),
                reason=reason,
                source_message_ids=candidate.message_ids,
            )
        )
    return ops
