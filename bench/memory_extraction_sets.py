"""The memory extraction sets and how an extraction is scored against them.

The sets (``bench/memory_extraction/*.txt``) are conversations
with the memories a reader expects from them. ``dev`` is the split the offline rules were first
tuned on (``dev2``: new phrasings the third round tuned on, written after heldout4 was
committed; ``dev3``: a deliberately diverse set of registers and phrasings the fourth round
wrote and committed before changing any rule, first figure P 0.77, R 0.59, then tuned on);
``heldout`` was written at the same time, before any tuning; ``heldout2`` after
heldout's first run. Both had been seen by the second round, which tuned on all three;
``heldout3`` was written and committed before that round changed any rule and seen once at its
end (P 0.79, R 0.62). ``heldout4`` was written and committed by the third round before it
changed any rule, measured then and once at its end, never tuned on (its figure is the one to
quote; its misses are not listed while tuning). The fourth round tuned on dev, dev2 and dev3
only and measured heldout3 and heldout4 once at its end: heldout3 P/R 0.79/0.63 -> 0.81/0.68,
heldout4 0.61/0.49 -> 0.65/0.51 (dev3 0.77/0.59 -> 0.99/1.00): the broader mechanisms moved
the untuned split little, short of the targets (R >= 0.8, P >= 0.9).

Round five: ``dev5`` (51 conversations: coding and ops work, companion chat about family,
trips, health, pets, jobs and moves with relative dates, and no-memory chat; phrasing varied
on purpose) was written and committed before any rule changed (first figure P 0.86, R 0.52).
From then on EVERY split here (dev, dev2, dev3, dev5, heldout, heldout2, heldout3, heldout4)
is a tuning split: none is untuned any more. The untuned figure is a sealed split written
by someone else and measured at the end; until then the honest estimate is
leave-one-split-out (``scripts/train_disclosure_weights.py --loso``: the clause classifier
trained on seven splits, the whole extraction scored on the eighth; the rules themselves
were fitted to all of them, so it flatters the splits the rules were tuned on most).
The sealed splits ``heldout5`` (50 conversations, 106 memories) and ``heldout6`` (40, 86)
were written on 2026-12-06 by a writer who saw neither the extractor nor its output, before
round five changed any rule (``SEALED``: the bench measures them, the training script never
reads them). Before round five: P/R 0.68/0.38 and 0.59/0.37; after: 0.58/0.42 and 0.58/0.40
(more memories, 404 -> 534 and 474 -> 518 per 1,000 turns; many extras are true facts split or
typed otherwise than the annotation, some are noise: "The user is gutted").
Round five's misses were mostly clauses no rule recognised, then terms a rewrite dropped,
then the wrong type; it added a phrasing-agnostic reading of unrecognised clauses
(``wm_core._memory.disclosure``: a no-memory filter, a generated linear classifier, the
clause kept in the third person with its words) and a few general fixes. In-sample
heldout4 0.65/0.51 -> 0.67/0.63, dev5 0.86/0.52 -> 0.88/0.67; leave-one-split-out pooled
P/R 0.86/0.81 (heldout4 0.62/0.58, dev5 0.81/0.55, heldout3 0.79/0.73): still short of
the targets on data nothing was fitted to.

Round six: ``dev6`` (41 conversations, 46 memories, decision-heavy: choices stated by either
side in many forms, proposals accepted by "sounds good" or "ship it", team decisions
reported, reasons after since / because / as / so; then personal-life chat and chat with no
memory, emotions and evaluations among it) was written and committed before any rule
changed (first figure P 0.58, R 0.48), then tuned on with the others. The sealed splits
were not run. Mechanisms rather than phrasings: one choice-verb lexicon, a choice said as its
outcome, one decision per reply that accepts or picks (with the assistant's sentence a short
or referring reply takes up, the alternative set aside), an echo as an agreement, and clauses
that only appraise dropped (``wm_core._memory.appraisal``). In sample dev6 0.58/0.48 ->
0.89/0.72, heldout4 0.67/0.63 -> 0.76/0.72, dev5 0.88/0.67 -> 0.91/0.72, heldout3 0.81/0.77
-> 0.85/0.80, the rest unchanged; leave-one-split-out pooled 0.84/0.78 -> 0.88/0.82
(heldout4 0.62/0.58 -> 0.73/0.67, dev5 0.84/0.54 -> 0.84/0.61, heldout3 0.79/0.75 ->
0.82/0.75; dev6 in every figure, before and after). The sealed splits, measured by the lead
at its end: heldout5 0.58/0.42 -> 0.58/0.42 (decisions 0.14/0.07 -> 0.30/0.21), heldout6
0.58/0.40 -> 0.55/0.40: leave-one-split-out over splits the rules were fitted to does not
predict fresh text, and the gap to the targets is on text nobody tuned on.

Round seven: ``dev7`` (50 conversations, 96 memories: a user with a coding, ops or data
assistant, personal companion chat with relative dates, chat with no memory; lowercase,
typos, long messages with several facts, facts the assistant states and the user confirms,
negations, changes) was written before its writer read the extractor and committed with its
first figure, P 0.51, R 0.34 (decision 0.46/0.46, entity 0.50/0.35, event 0.68/0.59,
preference 0.20/0.11, profile 0.46/0.19): as far from the targets as the sealed splits, and
mostly for the same reasons. Its misses were clauses no rule read (a lower-case sentence
swallowed by the fact before it, a clause after a fact dropped as its "continuation", the "I"
chat leaves out, a stack or a job said with another verb), then the wrong type (a household's
"we're moving" read as a team decision, a dated change read as a decision), then split or
merged facts. What changed, as mechanisms: a lower-case sentence inside a sentence is a clause
of its own; a clause too long to go on from a fact, or following an entity, is read by
``disclosure`` instead of lost; the left-out "I" is put back (``speech.with_subject``, past and
perfect verbs only); the team's stack and the user's work in any verb form (adverbs,
"everything runs on", "our data lives in", "I do X at Org"); an assistant's check with a tag
("…, is that right?") confirmed is read by the clause rules as the user's own words; a
decision keeps its occasion ("after the review we decided …"), "final answer from …:" and
"decision made:" are outcomes, an assistant's imperative of change the user keeps is agreed
(not when it answers a how-to), a sign-off that says why gives the reason, two decisions
listed after "decided:" are two, choice verbs "dropped / replaced / swapped / migrated", and a
change dated in the past is an event; an undated event and the date said next are one memory;
a time's direction is read in the part of the sentence that says it; "the 1st of September",
"end of June" and "mid-May" resolve; then, from probes written fresh rather than from the
splits: a taste with its "I'm" left out ("not a fan of …"), a standing request asked as a
question ("can you always … from now on"), "I'd love it if you …", someone named with their
group ("Sara from finance …") an entity, "X is my parrot" one memory. Figures, before -> after
(tuning splits in sample, the weights regenerated with dev7): dev7 0.51/0.34 -> 0.72/0.56
(430 -> 497 memories per 1,000 turns), dev 0.90/0.93 -> 0.90/0.92, dev2 0.91/0.93 ->
0.91/0.93, dev3 0.97/1.00 -> 0.99/1.00, dev5 0.91/0.72 -> 0.86/0.71 (its stack, annotated as
entities, is a profile now, as the annotation rule below asks), dev6 0.89/0.72 -> 0.89/0.72,
heldout 0.92/0.88 -> 0.91/0.88, heldout2 0.97/0.99 -> 0.97/0.99, heldout3 0.85/0.80 ->
0.85/0.82, heldout4 0.76/0.72 -> 0.76/0.73. Leave-one-split-out (dev7 among the splits,
before and after): pooled 0.85/0.76 -> 0.85/0.78, dev7 0.51/0.34 -> 0.64/0.51 (the honest
figure for these changes' generality: the classifier not trained on dev7, the rules studied
on its misses), dev5 0.85/0.61 -> 0.80/0.60, heldout3 0.84/0.76 -> 0.80/0.73, heldout4
0.74/0.68 -> 0.76/0.72. Still far from the targets on text nobody tuned on. The sealed
splits, measured by the lead at its end: heldout5 0.58/0.42 -> 0.61/0.43, heldout6 0.55/0.40
-> 0.58/0.47.

Round eight (2026-12-07). ``dev8`` (50 conversations, 100 expected memories, in registers
unlike dev7's: terse chat-app messages, long rambling ones with several facts, non-native
English, voice transcripts without punctuation, facts told in passing inside a question,
corrections, facts about other people, plans with deadlines, amounts, places, health, money,
work decisions with reasons, 20 % chat with nothing worth keeping) was written before its
writer read the extractor and committed with its first figure, P 0.37, R 0.19 (decision
0.50/0.08, entity 0.35/0.19, event 0.43/0.22, preference 0.33/0.20, profile 0.33/0.21): further
from the targets than any split before, the registers themselves being what the rules had
never read. Before any rule changed, ``rules`` and ``conversation`` were split by job
(``decisions``: a clause's decision; ``agreements``: proposals, agreements and sign-offs
across turns), every non-sealed split's table identical. What changed, as mechanisms: chat
and voice spellings read as one (a short weekday after the word that dates it, "next thu"; a
day said in words, "from the fifteenth", "the thirtieth of September"; "name's X", "@ Org");
a question states its premise ("since I'm allergic to …, is …?", "As a nurse on night shifts,
how …?") and a statement with a lower-case question typed after it still states; a run-on
said aloud (16 words or more, no comma) is cut where a new subject follows a time or "her
name is" starts; corrections (``corrections``: "actually it's the 16th not the 14th", "sorry
not Sandra, it's Sunita" fix the facts of the latest message that said the old value; a choice
taken back, "… but scrap that", states nothing and the next decision names what it replaces);
"her husband Piotr" after Anneliese is Anneliese's; a subject said twice ("My son Mateus he
is …") is read once; a title without its dot ("Dr Femi Adeyemi"); decisions said the chat way
("dropping redis for …", "… and finally we will use …", "team voted: …"), a sign-off in
another speaker's grammar ("is agree with this"), a pick from a numbered list ("(1) Loki, (2)
…" — "1. cheapest to run"); a timetable's present ("then I start … in October"), an
obligation ("need to … by 30 September") and "my last day is the 30th" read as ahead, a month
after "from" or "all of" dated; a choice put off ("let's not … yet") states nothing for the
classifier either, and a check the user confirmed is kept whatever the classifier's none says.
Not done, seen in dev8's misses: a fact inside a question that has no premise clause ("a gift
for my wife Leonor's 40th?"), an answer naming a pet ("What's your cat's name?" — "Mochi"),
reported speech ("the doctor said I have …"), a verbless fragment carrying an amount after
its fact ("23k over 9 years"), a meeting's outcome in the present ("…: we keep the monolith").
Figures, before -> after (tuning splits in sample, the weights regenerated with dev8): dev8
0.37/0.19 -> 0.66/0.42 (340 -> 427 memories per 1,000 turns), dev7 0.72/0.56 -> 0.72/0.60,
dev5 0.86/0.71 -> 0.87/0.72, dev 0.90/0.92 -> 0.90/0.93, dev2 0.91/0.93, dev3 0.99/1.00, dev6
0.89/0.72, heldout 0.91/0.88, heldout2 0.97/0.99, heldout3 0.85/0.82, heldout4 0.76/0.73 (those
six unchanged). Leave-one-split-out (dev8 among the splits, before and after): pooled
0.81/0.71 -> 0.83/0.74, dev8 0.37/0.19 -> 0.60/0.36 (the classifier not trained on dev8, the
rules studied on its misses), dev7 0.63/0.50 -> 0.64/0.49, dev5 0.79/0.61 -> 0.79/0.61,
heldout3 0.80/0.75 -> 0.82/0.76, heldout4 0.72/0.72 -> 0.73/0.73. Offline extraction CPU per
conversation over the 495 non-sealed conversations, median 1.52 -> 1.78 ms (mean 1.66 ->
1.91 ms). The sealed splits, measured by the lead at its end (never read by the round):
heldout5 0.61/0.43 -> 0.63/0.46 (profile 0.41/0.37 -> 0.50/0.53), heldout6 0.58/0.47 ->
0.57/0.47 (decision 0.17/0.09 -> 0.33/0.18, entity 0.81/0.65 -> 0.73/0.62): a fresh register
moved from 0.37/0.19 to 0.60/0.36 left out, the blind splits by two or three points.

Annotation (every split from round seven on): identity facts are ``profile`` (name, role and
employer, the team's stack), people are ``entity`` (name | relation), dated happenings are
``event`` with the resolved ISO date as a term.

A second human reader of the sealed splits (2026-12-06, after round six): a writer who saw
neither the extractor, its output nor the sealed annotation read the sealed conversations
with the expected memories removed, wrote the memories a reader expects (type and key terms),
then each as the sentence a careful memory system would store (``second_reader/<split>.jsonl``:
conversation, type, text, event_time). Scored like the extractor against the sealed
annotation, a human reaches P/R 0.79/0.82 on heldout5 and 0.76/0.83 on heldout6 (profile and
preference 0.58-0.70 precision: where identity ends and a preference or a decision begins is
a judgement; compared by key terms alone, the type set aside and one shared key word
enough, the two readers name the same facts: 0.95/0.98 and 0.88/0.97). So on text the
extractor's writer did not annotate, precision 0.9 is above what a second careful human
reaches under this matching rule: the annotation's own ambiguity, not only the rules, bounds
the untuned figure. The bench prints this table next to each sealed split's.

File format: ``=== <id> <ISO date of the messages>`` opens a conversation; ``U: text`` and
``A: text`` are user and assistant turns; ``+ <type>: term | term | …`` is one expected
memory; ``#`` lines are comments.

Matching rule (one expected memory ↔ at most one extracted memory, maximum matching):
an extracted memory matches an expected one when it has the same type and contains every
term. Text compared is the memory's text, its field values and its event time, folded
(case, accents kept) and cut into tokens of letters, digits, ``-``, ``&`` and ``'``. A term's
word matches a token when: the word has a digit and the token starts with it ("2026-09"
matches the event time "2026-09-01"); else the word has five letters or more and the token
starts with its first five ("replication" matches "replicated"); else the token equals it.
Precision = matched extracted / extracted, recall = matched expected / expected, per type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wm_core import (
    MemoryOp,
    MemoryOpKind,
    MemoryType,
    Message,
    Role,
    TextPart,
    fold_text,
    message_tokens,
)

SETS = Path(__file__).resolve().parent / "memory_extraction"
# Every one a tuning split since round five (see the docstring).
SPLITS = (
    "dev",
    "dev2",
    "dev3",
    "dev5",
    "dev6",
    "dev7",
    "dev8",
    "heldout",
    "heldout2",
    "heldout3",
    "heldout4",
)
# Written blind and never tuned on: measured, never trained on, their misses never read.
SEALED = ("heldout5", "heldout6")


@dataclass(frozen=True, slots=True)
class Expected:
    type: str
    terms: tuple[str, ...]


@dataclass
class Conversation:
    id: str
    date: str
    messages: list[Message] = field(default_factory=list)
    expected: list[Expected] = field(default_factory=list)

    @property
    def dates(self) -> dict[str, str]:
        return {m.id: self.date for m in self.messages}


def load(split: str) -> list[Conversation]:
    found: list[Conversation] = []
    for raw in (SETS / f"{split}.txt").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("==="):
            _, cid, date = line.split()
            found.append(Conversation(cid, date))
            continue
        current = found[-1]
        if line.startswith("+"):
            kind, _, terms = line[1:].partition(":")
            current.expected.append(
                Expected(kind.strip(), tuple(t.strip() for t in terms.split("|") if t.strip()))
            )
            continue
        who, _, text = line.partition(":")
        role = Role.USER if who.strip() == "U" else Role.ASSISTANT
        parts = (TextPart(text.strip()),)
        mid = f"{current.id}-m{len(current.messages) + 1}"
        current.messages.append(Message(mid, role, parts, message_tokens(parts)))
    return found


_TOKEN = re.compile(r"[\w\-&']+")


def second_reader(split: str) -> dict[str, list[MemoryOp]]:
    """The memories a second human reader wrote for ``split``, by conversation id."""
    found: dict[str, list[MemoryOp]] = {}
    path = SETS / "second_reader" / f"{split}.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        op = MemoryOp(
            MemoryOpKind.CREATE,
            MemoryType(record["type"]),
            record["text"],
            event_time=record["event_time"] or None,
        )
        found.setdefault(record["conversation"], []).append(op)
    return found


def _tokens(text: str) -> list[str]:
    return [t.strip("-'") for t in _TOKEN.findall(fold_text(text))]


def haystack(op: MemoryOp) -> list[str]:
    return _tokens(" ".join([op.text, *op.fields.values(), op.event_time or ""]))


def _word_matches(word: str, tokens: Sequence[str]) -> bool:
    if any(c.isdigit() for c in word):
        return any(t.startswith(word) for t in tokens)
    if len(word) >= 5:
        return any(t.startswith(word[:5]) for t in tokens)
    return word in tokens


def matches(expected: Expected, op: MemoryOp) -> bool:
    if op.type is None or op.type.value != expected.type:
        return False
    tokens = haystack(op)
    return all(_word_matches(w, tokens) for term in expected.terms for w in _tokens(term))


def best_matching(expected: Sequence[Expected], ops: Sequence[MemoryOp]) -> dict[int, int]:
    """A maximum one-to-one matching: expected index → op index (augmenting paths)."""
    edges = [[j for j, op in enumerate(ops) if matches(e, op)] for e in expected]
    owner: dict[int, int] = {}

    def assign(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or assign(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in range(len(expected)):
        assign(i, set())
    return {i: j for j, i in owner.items()}


@dataclass
class Score:
    expected: int = 0
    extracted: int = 0
    matched_expected: int = 0
    matched_extracted: int = 0

    @property
    def precision(self) -> float:
        return self.matched_extracted / self.extracted if self.extracted else 1.0

    @property
    def recall(self) -> float:
        return self.matched_expected / self.expected if self.expected else 1.0


def score(
    conversation: Conversation, ops: Sequence[MemoryOp], scores: dict[str, Score]
) -> tuple[list[Expected], list[MemoryOp]]:
    """Adds one conversation to ``scores`` (by type and "all"); returns the misses and the
    extracted memories nothing expected."""
    pairs = best_matching(conversation.expected, ops)
    for i, e in enumerate(conversation.expected):
        for key in (e.type, "all"):
            s = scores.setdefault(key, Score())
            s.expected += 1
            s.matched_expected += i in pairs
    used = set(pairs.values())
    for j, op in enumerate(ops):
        kind = op.type.value if op.type else "?"
        for key in (kind, "all"):
            s = scores.setdefault(key, Score())
            s.extracted += 1
            s.matched_extracted += j in used
    missed = [e for i, e in enumerate(conversation.expected) if i not in pairs]
    extra = [op for j, op in enumerate(ops) if j not in used]
    return missed, extra
