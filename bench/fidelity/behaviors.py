"""Scripted model behaviors: an honest core, and the ways real models distort its answer.

Each behavior is an :class:`~wm_server.llm.port.LlmProvider`, so the service runs it through
the real recovery chain and guards, exactly as it would run a model. The same object also
answers the two baselines (``strategies``): its ops are applied without guards, and its
creation-style rewrite is stored as is.

Why an honest core plus distortions: the benchmark measures what the working memory keeps
when the model misbehaves, so every behavior starts from the answer a careful model would
give for the turn (it knows the planted facts of the turn and reads the previous document)
and then distorts how it treats the *old* content: it replaces a section with only the new
items, renames the session, forgets paths, paraphrases errors, drops open issues, or
consolidates so hard that the details go. New facts of the turn are always written; losing
them would measure the model, not the memory. The behaviors that break the output
(truncated or curly-quoted JSON, no tool call) do so on about a third of the commits.

Repair calls. When the recovery chain cannot use an answer it makes one repair call, and each
behavior answers it as described by its ``repair_note``. A truncated answer (one commit in six
for "truncated / curly JSON": commits 2, 8, 14, 20, 26) stops at the output limit, modelled as
a number of characters: the length at which that commit's full answer is cut. The chain then
salvages what was complete and asks, in ``RepairRequest.sections``, for the sections that were
missing or cut (listed to the model under ``<sections_to_send>``). The model does what it is
asked: the complete op for each listed section and ``KEEP`` for every other one. That answer
is short and is not cut: a real output limit is thousands of tokens and an answer overflows it
by a margin, so the sections it did not reach fit in a second answer. (The scripted answers are
far shorter than real ones, so a character budget taken from their cut point would be smaller
than the JSON frame of seven KEEPs; a repair that overflows the limit again is not modelled.)
When the request names no section (the whole answer is asked for again), the model resends its
full answer, cut at the same point. Which commits have a truncated first answer, and where it
is cut, does not depend on the repair. The variant "truncated / curly JSON, repair ignored"
breaks the same commits the same way but ignores the list of sections and repeats its cut
answer, byte for byte, on every repair: the case one repair call cannot fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from bench.fidelity.scenario import (
    LONG_SCENARIO,
    SCENARIO,
    VERY_LONG_SCENARIO,
    Fact,
    FactClass,
    Scenario,
    Turn,
    turn_of,
)
from wm_core import (
    SECTIONS,
    Message,
    OpKind,
    SectionOp,
    parse_document,
    render_document,
    section_reminders,
    summary_bodies,
)
from wm_server.llm.offline import OfflineProvider
from wm_server.llm.port import (
    CreateRequest,
    MemoryRequest,
    ModelReply,
    RepairRequest,
    UpdateRequest,
    Usage,
)

TITLE, STATE, GOALS, FACTS, FILES, ERRORS, ISSUES = SECTIONS
KEEP: Final = SectionOp(OpKind.KEEP)
Bodies = dict[str, str]
Ops = dict[str, SectionOp]
Breakage = Literal["truncate", "curly", "no_tool"]

RESOLVED: Final = "[resolved] "
_SEPARATOR: Final = " | "
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_TOPIC_LINE = re.compile(r"^\*\*(?P<topic>[^*]+)\*\*: (?P<rest>.*)$")
_BACKTICKED = re.compile(r"`([^`]+)`")
_SENTINEL_MARK: Final = "CONSOLIDATION REQUIRED"


# -- reading and writing section bodies --------------------------------------------------------


def items_of(body: str) -> list[str]:
    """Bullet items of a body, one per non-empty line, without their markers."""
    found: list[str] = []
    for line in body.split("\n"):
        text = _BULLET.sub("", line.strip(), count=1).strip()
        if text and not text.startswith("#"):
            found.append(text)
    return found


def bullets(items: Iterable[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def apply_naively(bodies: Mapping[str, str], ops: Mapping[str, SectionOp]) -> Bodies:
    """Ops applied as written, with no guard: UPDATE replaces, APPEND adds bullets, KEEP keeps.

    This is how a model pictures the effect of its own answer, and it is the
    "ops without guards" baseline.
    """
    out = {name: bodies.get(name, "").strip() for name in SECTIONS}
    for name, op in ops.items():
        if name not in out:
            continue
        if op.kind == OpKind.UPDATE:
            out[name] = op.content.strip()
        elif op.kind == OpKind.APPEND and op.items:
            added = bullets(item.strip() for item in op.items if item.strip())
            out[name] = f"{out[name]}\n{added}".strip()
    return out


# -- what the model knows about the turn -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """The turns covered by one request (several when an earlier commit failed)."""

    turns: tuple[Turn, ...]

    @property
    def index(self) -> int:
        return self.turns[-1].index

    @property
    def topic(self) -> str:
        return self.turns[-1].topic

    @property
    def state(self) -> str:
        return self.turns[-1].state

    def _collect(self, pick: Callable[[Turn], Sequence[Fact]]) -> list[str]:
        return [fact.text for turn in self.turns for fact in pick(turn)]

    @property
    def goals(self) -> list[str]:
        return [goal for turn in self.turns for goal in turn.goals]

    @property
    def facts(self) -> list[str]:
        return self._collect(lambda t: t.facts)

    @property
    def paths(self) -> list[str]:
        return self._collect(lambda t: t.paths)

    @property
    def errors(self) -> list[str]:
        return self._collect(lambda t: t.errors)

    @property
    def issues(self) -> list[str]:
        return self._collect(lambda t: t.issues)

    @property
    def resolves(self) -> list[str]:
        return [rid for turn in self.turns for rid in turn.resolves]

    def new_items(self, section: str) -> list[str]:
        return {GOALS: self.goals, FACTS: self.facts, FILES: self.paths, ERRORS: self.errors}.get(
            section, []
        )


def plan_for(messages: Sequence[Message], scenario: Scenario) -> Plan:
    """The scripted turns behind these messages, identified by their message ids."""
    indices = sorted({i for m in messages if (i := turn_of(m.id)) is not None})
    if not indices:
        raise ValueError("messages are not from the scripted scenario")
    return Plan(tuple(scenario.turns[i] for i in indices))


def warned(reminders: str, section: str) -> bool:
    """Whether the size reminders ask to consolidate ``section``."""
    return f'"{section}"' in reminders


def _fact_of(text: str, scenario: Scenario, cls: FactClass) -> Fact | None:
    lowered = text.lower()
    for fact in scenario.facts.values():
        if fact.cls == cls and all(a.lower() in lowered for a in fact.anchors):
            return fact
    return None


def _pieces(items: Iterable[str], topics: set[str]) -> list[str]:
    """Items with earlier consolidations (``**Topic**: a | b``) split back into facts."""
    pieces: list[str] = []
    for item in items:
        if _SENTINEL_MARK in item:
            continue  # the engine's request to consolidate is not a fact
        match = _TOPIC_LINE.match(item)
        if match and match["topic"] in topics:
            pieces.extend(p.strip() for p in match["rest"].split(_SEPARATOR) if p.strip())
        else:
            pieces.append(item)
    return list(dict.fromkeys(pieces))


def _group(
    pieces: Iterable[str], key: Callable[[str], str | None]
) -> tuple[dict[str, list[str]], list[str]]:
    groups: dict[str, list[str]] = {}
    loose: list[str] = []
    for piece in pieces:
        name = key(piece)
        if name is None:
            loose.append(piece)
        else:
            groups.setdefault(name, []).append(piece)
    return groups, loose


def _path_group(item: str) -> str | None:
    match = _BACKTICKED.search(item)
    if not match or "/" not in match.group(1):
        return None
    return match.group(1).split("/", 1)[0] + "/"


# -- the honest core -----------------------------------------------------------------------------


class HonestCore:
    """The answer a careful model gives: KEEP what it has no news for, APPEND new items,
    mark resolved issues instead of deleting them, and consolidate an oversized section
    by grouping its items under topics without dropping a single detail."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.topics = {f.topic for f in scenario.facts.values() if f.topic}

    def topic_of(self, piece: str) -> str | None:
        fact = _fact_of(piece, self.scenario, FactClass.KEY_FACT)
        return fact.topic if fact else None

    def consolidate_facts(self, items: Iterable[str]) -> list[str]:
        groups, loose = _group(_pieces(items, self.topics), self.topic_of)
        lines = [f"**{topic}**: " + _SEPARATOR.join(facts) for topic, facts in groups.items()]
        return lines + loose

    def consolidate_files(self, items: Iterable[str]) -> list[str]:
        tops = {f"{top}" for top in (_path_group(i) for i in items) if top}
        groups, loose = _group(_pieces(items, tops), _path_group)
        lines = [f"**{top}**: " + _SEPARATOR.join(refs) for top, refs in groups.items()]
        return lines + loose

    def mark_resolved(self, items: Iterable[str], resolves: Iterable[str]) -> list[str]:
        anchors = [self.scenario.facts[rid].anchors[0].lower() for rid in resolves]
        out: list[str] = []
        for item in items:
            if not item.startswith(RESOLVED) and any(a in item.lower() for a in anchors):
                item = RESOLVED + item
            out.append(item)
        return out

    def ops(self, prev: Mapping[str, str], plan: Plan, reminders: str) -> Ops:
        ops: Ops = {name: KEEP for name in SECTIONS}
        if not prev.get(TITLE, "").strip():
            ops[TITLE] = SectionOp.update(self.scenario.title.text)
        ops[STATE] = SectionOp.update(plan.state)
        old_goals = items_of(prev.get(GOALS, ""))
        goals = [g for g in plan.goals if g not in old_goals]
        if goals:
            ops[GOALS] = SectionOp.append(goals)
        old_facts = items_of(prev.get(FACTS, ""))
        if warned(reminders, FACTS):
            ops[FACTS] = SectionOp.update(bullets(self.consolidate_facts(old_facts + plan.facts)))
        elif plan.facts:
            ops[FACTS] = SectionOp.append(plan.facts)
        old_files = items_of(prev.get(FILES, ""))
        if warned(reminders, FILES):
            ops[FILES] = SectionOp.update(bullets(self.consolidate_files(old_files + plan.paths)))
        elif plan.paths:
            ops[FILES] = SectionOp.append(plan.paths)
        if plan.errors:
            ops[ERRORS] = SectionOp.append(plan.errors)
        if plan.issues or plan.resolves:
            old_issues = self.mark_resolved(items_of(prev.get(ISSUES, "")), plan.resolves)
            ops[ISSUES] = SectionOp.update(bullets(old_issues + plan.issues))
        return ops


# -- behaviors -----------------------------------------------------------------------------------

_BREAK_PERIOD: Final = 3  # one commit in three breaks (commits 2, 5, 8, ...)


def _curly(text: str) -> str:
    """Typographic quotes instead of ASCII ones, as a model "prettifying" its JSON does."""
    out: list[str] = []
    opening = True
    for ch in text:
        if ch == '"':
            out.append("\u201c" if opening else "\u201d")
            opening = not opening
        elif ch == "'":
            out.append("\u2019")
        else:
            out.append(ch)
    return "".join(out)


def _cut(text: str, index: int) -> str:
    """Where a truncated answer stops: between 40 % and 80 % of the full answer."""
    return text[: int(len(text) * (0.4 + 0.1 * (index % 5)))]


def _arguments(ops: Mapping[str, SectionOp]) -> dict[str, Any]:
    return {"sections": {name: ops[name].to_dict() for name in SECTIONS}}


class Behavior:
    """A scripted model. Subclasses override :meth:`distort` and/or :meth:`breakage`.

    ``rewrite`` is True when the model writes the whole document (creation call, or the full
    rewrite baseline): it must then reproduce every section, so a distortion of old content
    applies on every commit, not only when the section had news.
    """

    key: ClassVar[str] = "honest"
    label: ClassVar[str] = "honest"
    description: ClassVar[str] = "answers like a careful model: KEEP, APPEND, mark resolved"
    breaks: ClassVar[bool] = False
    repair_note: ClassVar[str] = (
        "when asked to repair a broken answer it usually sends a valid one; on some commits "
        "(for breaking behaviors) it breaks the same way again"
    )
    miss_note: ClassVar[str] = ""  # why a target miss is expected, shown in the results
    # The session it is replayed on (the 32-commit week unless it needs a longer one).
    session: ClassVar[Scenario] = SCENARIO

    def __init__(self, scenario: Scenario = SCENARIO) -> None:
        self.scenario = scenario
        self.core = HonestCore(scenario)
        self.calls: dict[str, int] = {"update": 0, "repair": 0, "create": 0}

    # -- provider port --

    @property
    def name(self) -> str:
        return f"fidelity-{self.key}"

    @property
    def model(self) -> str:
        return f"scripted-{self.key}"

    async def update(self, request: UpdateRequest) -> ModelReply:
        self.calls["update"] += 1
        plan = plan_for(request.messages, self.scenario)
        ops = self.answer(parse_document(request.previous_document), plan, request.reminders)
        return self.reply(ops, self.breakage(plan.index), plan.index)

    async def repair(self, request: RepairRequest) -> ModelReply:
        """Shown its errors, the model usually gets it right; every other time it fails again.

        After a truncated answer, see :meth:`repair_truncated`.
        """
        self.calls["repair"] += 1
        plan = plan_for(request.update.messages, self.scenario)
        update = request.update
        ops = self.answer(parse_document(update.previous_document), plan, update.reminders)
        breakage = self.breakage(plan.index)
        if breakage == "truncate":
            return self.repair_truncated(ops, request.sections, plan.index)
        again = breakage is not None and (plan.index // _BREAK_PERIOD) % 4 in (0, 1)
        return self.reply(ops, breakage if again else None, plan.index)

    def repair_truncated(
        self, ops: Mapping[str, SectionOp], sections: Sequence[str], index: int
    ) -> ModelReply:
        """The repair answer after a cut-off answer (see the module docstring): the complete
        op for every section the request names and KEEP for the others, a short answer that
        fits in the output limit; asked for everything again, the full answer, cut again."""
        if not sections:
            return self.reply(ops, "truncate", index)
        wanted = set(sections)
        partial = {name: ops[name] if name in wanted else KEEP for name in SECTIONS}
        return self.reply(partial, None, index)

    async def create(self, request: CreateRequest) -> ModelReply:
        self.calls["create"] += 1
        plan = plan_for(request.messages, self.scenario)
        bodies = self.rewrite_bodies(parse_document(request.context_document or ""), plan)
        return ModelReply(dict(bodies), "tool_use", Usage(llm_calls=1), model=self.model)

    async def extract_memories(self, request: MemoryRequest) -> ModelReply:
        """The benchmark measures the working memory: no long-term memories are proposed."""
        return ModelReply({"ops": []}, "tool_use", Usage(), model=self.model)

    async def aclose(self) -> None:
        return None

    # -- answers --

    def answer(self, prev: Mapping[str, str], plan: Plan, reminders: str) -> Ops:
        return self.distort(self.core.ops(prev, plan, reminders), prev, plan, rewrite=False)

    def rewrite_bodies(self, prev: Mapping[str, str], plan: Plan) -> Bodies:
        """The whole document as this model writes it from its own view (it sees the size
        warnings of what it rewrites, as an update would)."""
        reminders = section_reminders(render_document(prev)) if prev else ""
        ops = self.distort(self.core.ops(prev, plan, reminders), prev, plan, rewrite=True)
        bodies = apply_naively(prev, ops)
        if not bodies[TITLE]:
            bodies[TITLE] = self.scenario.title.text
        return bodies

    def rewrite_text(self, previous_document: str, messages: Sequence[Message]) -> str:
        """A creation-style answer for the full-rewrite baseline, broken like the updates."""
        plan = plan_for(messages, self.scenario)
        text = render_document(self.rewrite_bodies(parse_document(previous_document), plan))
        breakage = self.breakage(plan.index)
        if breakage == "truncate":
            return _cut(text, plan.index)
        if breakage == "curly":
            return _curly(text)
        if breakage == "no_tool":
            return self.chat(plan)
        return text

    def reply(
        self, ops: Mapping[str, SectionOp], breakage: Breakage | None, index: int
    ) -> ModelReply:
        """The tool call carrying ``ops``, broken the way ``breakage`` says."""
        arguments = _arguments(ops)
        usage = Usage(llm_calls=1)
        if breakage == "truncate":
            text = json.dumps(arguments, ensure_ascii=False)
            return ModelReply(_cut(text, index), "max_tokens", usage, model=self.model)
        if breakage == "curly":
            text = _curly(json.dumps(arguments, ensure_ascii=False))
            return ModelReply(text, "tool_use", usage, model=self.model)
        if breakage == "no_tool":
            return ModelReply(None, "end_turn", usage, text=self._chat_text(), model=self.model)
        return ModelReply(arguments, "tool_use", usage, model=self.model)

    def _chat_text(self) -> str:
        return "I have reviewed the new messages and updated my understanding of the session."

    def chat(self, plan: Plan) -> str:
        return f"Sure! Quick recap instead of the document: {plan.state}"

    # -- hooks --

    def distort(self, ops: Ops, prev: Mapping[str, str], plan: Plan, *, rewrite: bool) -> Ops:
        return ops

    def breakage(self, index: int) -> Breakage | None:
        return None

    def breaks_on(self, index: int) -> bool:
        return self.breaks and index % _BREAK_PERIOD == 2


class Honest(Behavior):
    pass


class Lazy(Behavior):
    key = "lazy"
    label = "lazy"
    description = "UPDATE with only the new items instead of APPEND or a full rewrite"

    def distort(self, ops: Ops, prev: Mapping[str, str], plan: Plan, *, rewrite: bool) -> Ops:
        for section in (GOALS, FACTS, FILES, ERRORS):
            new = plan.new_items(section)
            if new:
                ops[section] = SectionOp.update(bullets(new))
            elif ops[section].kind == OpKind.UPDATE:
                ops[section] = KEEP  # too lazy to consolidate without news
        if ops[ISSUES].kind == OpKind.UPDATE:
            done = [RESOLVED + self.scenario.facts[rid].text for rid in plan.resolves]
            ops[ISSUES] = SectionOp.update(bullets(done + plan.issues))
        return ops


class TitleDrift(Behavior):
    key = "title_drift"
    label = "title drift"
    description = "retitles the session after the sub-topic of the turn, every commit"

    def distort(self, ops: Ops, prev: Mapping[str, str], plan: Plan, *, rewrite: bool) -> Ops:
        if prev.get(TITLE, "").strip() and prev[TITLE].strip() != plan.topic:
            ops[TITLE] = SectionOp.update(plan.topic)
        return ops


class DropsPaths(Behavior):
    key = "drops_paths"
    label = "drops paths"
    description = "rewrites Files & Context keeping only the 3 latest old entries plus new ones"

    def distort(self, ops: Ops, prev: Mapping[str, str], plan: Plan, *, rewrite: bool) -> Ops:
        if rewrite or ops[FILES].kind != OpKind.KEEP:
            old = items_of(prev.get(FILES, ""))
            ops[FILES] = SectionOp.update(bullets(old[-3:] + plan.paths))
        return ops


class RewritesErrors(Behavior):
    key = "rewrites_errors"
    label = "rewrites errors"
    description = "rewrites Errors & Corrections, paraphrasing old records without their details"

    def distort(self, ops: Ops, prev: Mapping[str, str], plan: Plan, *, rewrite: bool) -> Ops:
        if rewrite or plan.errors:
            old = [self._paraphrase(item) for item in items_of(prev.get(ERRORS, ""))]
            ops[ERRORS] = SectionOp.update(bullets(list(dict.fromkeys(old)) + plan.errors))
        return ops

    def _paraphrase(self, item: str) -> str:
        fact = _fact_of(item, self.scenario, FactClass.ERROR)
        return fact.paraphrase if fact else item


class DropsIssues(Behavior):
    key = "drops_issues"
    label = "drops open issues"
    description = "rewrites Open Issues with only the issues of the turn and the 2 latest others"

    def distort(self, ops: Ops, prev: Mapping[str, str], plan: Plan, *, rewrite: bool) -> Ops:
        if not rewrite and ops[ISSUES].kind == OpKind.KEEP:
            return ops
        old = self.core.mark_resolved(items_of(prev.get(ISSUES, "")), plan.resolves)
        touched = [item for item in old if item.startswith(RESOLVED) and self._now(item, plan)]
        others = [item for item in old if item not in touched and not item.startswith(RESOLVED)]
        ops[ISSUES] = SectionOp.update(bullets(touched + others[-2:] + plan.issues))
        return ops

    def _now(self, item: str, plan: Plan) -> bool:
        anchors = [self.scenario.facts[rid].anchors[0].lower() for rid in plan.resolves]
        return any(a in item.lower() for a in anchors)


class BrokenJson(Behavior):
    key = "broken_json"
    label = "truncated / curly JSON"
    description = "on 1 commit in 3: arguments cut off at the output limit, or curly-quoted"
    breaks = True
    repair_note = (
        "after a cut-off answer, it sends what the repair asks for: the complete op for each "
        "section listed as missing or cut, KEEP for the others (a short answer that fits in "
        "the output limit); asked for the whole answer, it resends it, cut at the same point. "
        "Curly-quoted answers are read by the tolerant parser and get no repair call"
    )

    def breakage(self, index: int) -> Breakage | None:
        if not self.breaks_on(index):
            return None
        return "truncate" if (index // _BREAK_PERIOD) % 2 == 0 else "curly"


class BrokenJsonRepairIgnored(BrokenJson):
    key = "broken_json_repair_ignored"
    label = "truncated / curly JSON, repair ignored"
    description = (
        "breaks the same commits as truncated / curly JSON, but ignores what a repair asks for"
    )
    repair_note = (
        "after a cut-off answer, it ignores the sections the repair asks for and resends its "
        "whole answer, cut at the same point"
    )
    miss_note = (
        "the repair answer is the same cut answer, so it adds nothing. The chain merges the "
        "salvage and backfills the sections after the cut from the deterministic extractor "
        "(paths, errors, open questions, dated facts, as APPENDs through the guards); what "
        "only the model would have phrased, such as a fact without a date or a number, is "
        "still lost for that turn"
    )

    def repair_truncated(
        self, ops: Mapping[str, SectionOp], sections: Sequence[str], index: int
    ) -> ModelReply:
        return self.reply(ops, "truncate", index)


class NoToolCall(Behavior):
    key = "no_tool_call"
    label = "no tool call"
    description = "on 1 commit in 3: answers in prose without calling the tool"
    breaks = True
    repair_note = (
        "shown its errors, it calls the tool on 4 of its 10 prose commits and answers in "
        "prose again on the other 6 (the chain then falls back to a creation call)"
    )

    def breakage(self, index: int) -> Breakage | None:
        return "no_tool" if self.breaks_on(index) else None


class OverEager(Behavior):
    key = "over_eager"
    label = "over-eager consolidation"
    description = (
        "when asked to consolidate, keeps one fact per topic and a count of the rest "
        "(Key Facts), one line per folder without the paths (Files)"
    )

    def distort(self, ops: Ops, prev: Mapping[str, str], plan: Plan, *, rewrite: bool) -> Ops:
        if ops[FACTS].kind == OpKind.UPDATE:
            old = items_of(prev.get(FACTS, ""))
            groups, _ = _group(_pieces(old, self.core.topics), self.core.topic_of)
            lines = [
                f"**{topic}**: {facts[0]} (and {len(facts) - 1} related decisions)"
                for topic, facts in groups.items()
            ]
            ops[FACTS] = SectionOp.update(bullets(lines + plan.facts))
        if ops[FILES].kind == OpKind.UPDATE:
            old = items_of(prev.get(FILES, ""))
            groups, _ = _group(old, _path_group)
            lines = [f"{top}: {len(refs)} files" for top, refs in groups.items()]
            ops[FILES] = SectionOp.update(bullets(lines + plan.paths))
        return ops


class NeverConsolidates(Behavior):
    key = "never_consolidates"
    label = "never consolidates"
    description = (
        "over 100 commits (the week, then 68 commits of three new key facts each), only ever "
        "APPENDs: it ignores every request to consolidate (size reminders, the consolidation "
        "sentinel, the pending items) and never rewrites Key Facts or Files"
    )
    session = LONG_SCENARIO

    def distort(self, ops: Ops, prev: Mapping[str, str], plan: Plan, *, rewrite: bool) -> Ops:
        for section in (FACTS, FILES):
            if ops[section].kind == OpKind.UPDATE:  # a consolidation: append the news instead
                new = plan.new_items(section)
                ops[section] = SectionOp.append(new) if new else KEEP
        return ops


class NeverConsolidates200(NeverConsolidates):
    key = "never_consolidates_200"
    label = "never consolidates over 200 commits"
    description = (
        'the same model as "never consolidates" on 200 commits (the week, then 168 commits '
        "of three new key facts each): Key Facts sits at its emergency bound for most of the "
        "session, so nearly every later fact is refused and must stay reachable as a pending "
        "item (issue 36)"
    )
    session = VERY_LONG_SCENARIO


class Offline(Behavior):
    """The offline summarizer as the model: no scripted answer, what the server's default
    provider extracts from the turn's messages, through the same strategies."""

    key = "offline"
    label = "offline summarizer (no model)"
    description = (
        "the server's deterministic extractive summarizer (WM_LLM_PROVIDER=offline) instead "
        "of a model: it knows nothing of the planted facts and reads only the messages"
    )
    miss_note = (
        "an extractive summarizer can only quote the messages: the planted title's wording is "
        "never said in them (its title is the first request, shortened), and a fact stated "
        "without a figure, a name, a decision or a request marker is not recognized"
    )

    def __init__(self, scenario: Scenario = SCENARIO) -> None:
        super().__init__(scenario)
        self.summarizer = OfflineProvider()

    @property
    def model(self) -> str:
        return self.summarizer.model

    async def update(self, request: UpdateRequest) -> ModelReply:
        self.calls["update"] += 1
        return await self.summarizer.update(request)

    async def repair(self, request: RepairRequest) -> ModelReply:
        self.calls["repair"] += 1
        return await self.summarizer.repair(request)

    async def create(self, request: CreateRequest) -> ModelReply:
        self.calls["create"] += 1
        return await self.summarizer.create(request)

    def rewrite_text(self, previous_document: str, messages: Sequence[Message]) -> str:
        """A creation from the messages with the previous document as context, stored as is."""
        return render_document(summary_bodies(messages, previous_document or None))


BEHAVIORS: Final[tuple[type[Behavior], ...]] = (
    Honest,
    Lazy,
    TitleDrift,
    DropsPaths,
    RewritesErrors,
    DropsIssues,
    BrokenJson,
    BrokenJsonRepairIgnored,
    NoToolCall,
    OverEager,
    NeverConsolidates,
    NeverConsolidates200,
    Offline,
)


def behavior_named(key: str) -> type[Behavior]:
    for cls in BEHAVIORS:
        if cls.key == key:
            return cls
    raise KeyError(f"unknown behavior {key!r}; known: {', '.join(c.key for c in BEHAVIORS)}")
