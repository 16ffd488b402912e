"""The deterministic memory extractor: long-term memory ops from a conversation, no model.

Why it exists: with no API key the whole pipeline must still remember what a conversation
plainly said, and tests need an extractor whose output is known in advance. It answers in the
same ops a model would propose, so its output goes through the same guards.

What a conversation states is read by :mod:`wm_core._memory.rules` (profile facts,
preferences, decisions with their reason — :mod:`wm_core._memory.decisions` — and who agreed
— :mod:`wm_core._memory.agreements` —, dated events, plans, named people and things; one fact
per memory, in the third person, with the ids of the messages that state it), and a clause no rule recognised by :mod:`wm_core._memory.disclosure` (a no-memory filter
and a small generated classifier; the clause kept in the third person with its words). This
module turns those facts into ops against the owner's existing memories.

A profile attribute that holds one value (name, age, home, role), a preference and a decision
are about a *subject* (stored in the ``subject`` field): a new statement that replaces an
existing memory (``subjects.replaces``: about the same subject, or naming it as the value a
change replaces, "we switched from PostgreSQL to …") is an UPDATE of it, or, when the new text would drop a name, date or number of the old
one (which the guards refuse in an UPDATE), a RETIRE of the old one with the statement as its
reason and a CREATE. Within one archive the last statement about such a subject wins (the
same rule). Other
facts (events, entities, other profile facts) are many per subject: each is its
own memory, and an equal one is left to the guards' deduplication.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from wm_core._guards.key_facts import missing_anchors
from wm_core._guards.pending import PendingItem
from wm_core._memory.conversation import conversation_facts
from wm_core._memory.disclosure import Weights
from wm_core._memory.guard import archive_text, retire_supported
from wm_core._memory.model import MemoryOp, MemoryOpKind, MemoryRecord, MemoryType, memory_key
from wm_core._memory.rules import Fact, pending_facts
from wm_core._memory.subjects import replaces, replaces_memory, single_valued
from wm_core._memory.tool import MAX_MEMORY_TEXT_CHARS
from wm_core._messages import Message


def _clean(text: str) -> str:
    return " ".join(text.split()).strip(" \"'`").rstrip(".!;, ")


def _finish(text: str) -> str:
    text = _clean(text)
    if len(text) > MAX_MEMORY_TEXT_CHARS - 1:
        text = text[: MAX_MEMORY_TEXT_CHARS - 2].rsplit(" ", 1)[0] + "…"
    return text + "."


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

    @property
    def replaces(self) -> bool:
        """Whether a later statement about its subject replaces it (see the docstring)."""
        return single_valued(self.type, self.subject)


def _candidate(fact: Fact) -> _Candidate:
    return _Candidate(
        fact.type,
        _finish(fact.text),
        fact.subject,
        fact.source,
        dict(fact.fields),
        fact.when.iso if fact.when else None,
        fact.message_ids,
    )


def _candidates(
    messages: Sequence[Message],
    pending: Sequence[PendingItem],
    message_dates: Mapping[str, str],
    weights: Weights | None,
) -> list[_Candidate]:
    facts = conversation_facts(messages, message_dates, weights)
    facts.extend(pending_facts([item.text for item in pending]))
    return [_candidate(fact) for fact in facts]


def _latest_per_subject(found: Iterable[_Candidate]) -> list[_Candidate]:
    """One candidate per (type, subject) of the subjects a later statement replaces (the last
    statement wins, at the place of the first); one per text for the others."""
    kept: list[_Candidate] = []
    for candidate in found:
        for index, earlier in enumerate(kept):
            same = (
                replaces(candidate.type, candidate.subject, candidate.fields, earlier.type,
                         earlier.subject)
                if candidate.replaces and earlier.replaces
                else memory_key(earlier.text) == memory_key(candidate.text)
            )  # fmt: skip
            if earlier.type is candidate.type and same:
                ids = tuple(dict.fromkeys((*earlier.message_ids, *candidate.message_ids)))
                kept[index] = _Candidate(
                    candidate.type, candidate.text, candidate.subject, candidate.source,
                    candidate.fields, candidate.event_time or earlier.event_time, ids,
                )  # fmt: skip
                break
        else:
            kept.append(candidate)
    return kept


def _matching(candidate: _Candidate, existing: Sequence[MemoryRecord]) -> MemoryRecord | None:
    if not candidate.replaces:
        return None  # many per subject; equal ones are deduplicated by the guards
    for memory in existing:
        if replaces_memory(candidate.type, candidate.subject, candidate.fields, memory):
            return memory
    return None


def extract_memories(
    messages: Sequence[Message],
    existing: Sequence[MemoryRecord],
    pending: Sequence[PendingItem] = (),
    *,
    message_dates: Mapping[str, str] | None = None,
    disclosure_weights: Weights | None = None,
) -> list[MemoryOp]:
    """The memory ops the statements of ``messages`` (and the ``pending`` items) call for,
    against the owner's ``existing`` memories; see the module docstring.

    ``message_dates`` (message id → ISO date) makes relative dates absolute for messages
    without a leading timestamp. ``disclosure_weights`` replaces the clause classifier's
    generated weights (the training script's leave-one-split-out runs pass their own).
    """
    ops: list[MemoryOp] = []
    retired: set[str] = set()
    archive = archive_text(messages, pending)
    for candidate in _latest_per_subject(
        _candidates(messages, pending, message_dates or {}, disclosure_weights)
    ):
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
