"""The recovery chain: from one archive's messages to a new working memory, or a clean failure.

The order of attempts is the product's promise that a bad model answer never costs the
working memory (the reference stores a placeholder instead, and loses everything):

1. update (the previous document is a working memory): ask for per-section ops; a
   schema-valid answer is merged through the guards;
2. an invalid answer (text only, cut off at ``max_tokens``, wrong shape) is salvaged section
   by section with ``wm_core.parse_tool_arguments``;
3. if nothing usable is left, one repair call shows the model its validation errors; an
   answer cut off at ``max_tokens`` gets that repair call even when its salvage is usable,
   asking for the sections that were missing or cut, since otherwise those sections keep
   their old text and the turn's news for them is lost. The salvaged part and the repaired
   part are merged together: the repair wins for the sections it covers, a KEEP in it does
   not undo a salvaged op, and two APPENDs are joined;
4. if that fails too, a creation call rewrites the document with the previous one as context,
   and its output is still merged through the guards, so a fresh rewrite cannot drop paths,
   errors or open issues the previous document had;
5. if nothing is usable at all, :class:`GenerationFailed` (retryable): the caller keeps the
   previous document and retries later. A placeholder is never produced.

Creation (no previous document, or a legacy one without the seven sections) is one creation
call whose output is normalized to the canonical document, or refused.

Provider errors (:class:`LlmError`: rate limits, timeouts, outages) are not handled here; they
propagate so Phase 2 can back off and retry the whole generation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from wm_core import (
    DEFAULT_LIMITS,
    ERRORS_CORRECTIONS,
    FILES_CONTEXT,
    KEEP,
    KEY_FACTS,
    OPEN_ISSUES,
    SECTIONS,
    TASK_GOALS,
    CreationRejected,
    Decision,
    Guard,
    Message,
    OpKind,
    ParsedDocument,
    PendingItem,
    SectionOp,
    WmLimits,
    bound_document,
    bullet_items,
    canonical_name,
    item_key,
    merge,
    normalize_creation,
    parse_document,
    parse_document_detailed,
    parse_tool_arguments,
    pending_reminder,
    section_reminders,
    validate_create_arguments,
    validate_update_arguments,
)
from wm_server.llm.port import (
    CreateRequest,
    LlmError,
    LlmProvider,
    ModelReply,
    Purpose,
    RepairRequest,
    UpdateRequest,
    Usage,
)

Mode = Literal["create", "update"]
# The deterministic extractor's update arguments for (previous document, messages): what a
# section the model left unread is backfilled from (``wm_core.summary_update_ops``).
Backfill = Callable[[str, Sequence[Message]], Mapping[str, Any]]
# Only what can be appended is backfilled: the extractor's guesses never replace text.
_BACKFILLED = (TASK_GOALS, KEY_FACTS, FILES_CONTEXT, ERRORS_CORRECTIONS, OPEN_ISSUES)

# -- events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LlmCallStarted:
    """A model call is about to be made."""

    purpose: Purpose
    provider: str
    model: str


@dataclass(frozen=True, slots=True)
class LlmCallFinished:
    """A model call returned (``stop_reason`` "error" and ``error`` set when it raised)."""

    purpose: Purpose
    stop_reason: str
    usage: Usage
    duration_ms: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class OpsParsed:
    """The ops that are about to be merged, one per section, and what reading them took."""

    ops: Mapping[str, SectionOp]
    problems: tuple[str, ...] = ()


ChainEvent = LlmCallStarted | LlmCallFinished | OpsParsed
EventSink = Callable[[ChainEvent], Awaitable[None]]

# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Generation:
    """A new working memory and how it was obtained.

    ``mode`` is "update" when ops were merged into the previous document, "create" when the
    document came from a creation call (first document, legacy upgrade, or the fallback of
    step 4). ``decisions`` are the guard records of the merge: empty for a plain creation,
    present for an update and for a fallback creation (which is merged through the guards).
    ``ops`` are the ops that were merged (None for a plain creation). ``calls`` lists the
    purposes of the model calls made, in order, e.g. (UPDATE, REPAIR, CREATE).
    """

    document: str
    decisions: tuple[Decision, ...]
    mode: Mode
    usage: Usage
    problems: list[str] = field(default_factory=list)
    ops: dict[str, SectionOp] | None = None
    calls: tuple[Purpose, ...] = ()
    # The document's section bodies as the merge or the bound made them (None: not known).
    sections: Mapping[str, str] | None = None


class GenerationFailed(Exception):
    """No usable working memory came out of any step; the previous one must stay current."""

    def __init__(self, reason: str, retryable: bool = True, usage: Usage | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.usage = usage or Usage()


# -- reading an update answer --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UpdateReading:
    """An update answer as the chain reads it: the ops, and whether they are worth merging.

    ``trusted`` are the sections whose op was read in full; ``incomplete`` (only for an answer
    cut off at the output limit) the sections it never reached or was cut off in, whose
    news a repair call has to supply.
    """

    ops: dict[str, SectionOp]
    usable: bool
    errors: tuple[str, ...]  # why the answer is not schema-valid (shown in a repair request)
    problems: tuple[str, ...]  # everything worth reporting, errors included
    trusted: tuple[str, ...] = ()
    incomplete: tuple[str, ...] = ()


def _decode(tool_input: dict[str, Any] | str | None) -> tuple[object, str | None]:
    if not isinstance(tool_input, str):
        return tool_input, None
    try:
        return json.loads(tool_input), None
    except json.JSONDecodeError as exc:
        return None, f"arguments are not valid JSON ({exc.msg} at character {exc.pos})"


def _answer_errors(reply: ModelReply) -> list[str]:
    errors: list[str] = []
    if reply.tool_input is None:
        if reply.text.strip():
            errors.append("no update_working_memory call: the answer was plain text")
        else:
            errors.append("no update_working_memory call and no text")
        return errors
    decoded, decode_error = _decode(reply.tool_input)
    if decode_error:
        errors.append(decode_error)
    else:
        errors.extend(validate_update_arguments(decoded))
    if reply.stop_reason == "max_tokens":
        errors.append("the answer was cut off at the output limit (stop_reason max_tokens)")
    return errors


def _op_sections(tool_input: Mapping[str, Any]) -> list[str]:
    """Canonical section names in the order the model wrote them."""
    inner = tool_input.get("sections")
    source = inner if isinstance(inner, Mapping) else tool_input
    names = [canonical_name(key) for key in source if isinstance(key, str)]
    return [name for name in names if name is not None]


def _distrust_last(
    tool_input: Mapping[str, Any], ops: dict[str, SectionOp], problems: list[str]
) -> str | None:
    """After a cut-off answer, do not trust the op the model was writing when it stopped.

    The SDK hands over a partially decoded object, so a half-written UPDATE looks complete;
    applying it would replace a section with a fragment. The last section written becomes a
    KEEP (UPDATE) or loses its last item (APPEND).
    """
    written = _op_sections(tool_input)
    if not written:
        return None
    name = written[-1]
    op = ops.get(name, KEEP)
    if op.kind == OpKind.UPDATE:
        ops[name] = KEEP
        problems.append(f"{name}: the answer was cut off while writing it; UPDATE not applied")
    elif op.kind == OpKind.APPEND and op.items:
        rest = op.items[:-1]
        ops[name] = SectionOp.append(rest) if rest else KEEP
        problems.append(f"{name}: the answer was cut off; its last item was not applied")
    return name


def read_update_answer(reply: ModelReply) -> UpdateReading:
    """Validate the answer; salvage what can be salvaged when it is not valid."""
    errors = _answer_errors(reply)
    if not errors:
        decoded, _ = _decode(reply.tool_input)
        parsed = parse_tool_arguments(decoded)
        return UpdateReading(dict(parsed.ops), True, (), tuple(parsed.problems), parsed.found)
    source: object = reply.tool_input if reply.tool_input is not None else reply.text
    parsed = parse_tool_arguments(source)
    ops = dict(parsed.ops)
    problems = [f"invalid answer: {error}" for error in errors] + list(parsed.problems)
    distrusted = set(parsed.distrusted)
    incomplete: tuple[str, ...] = ()
    if reply.stop_reason == "max_tokens":
        if isinstance(reply.tool_input, Mapping):
            cut = _distrust_last(reply.tool_input, ops, problems)
            if cut is not None:
                distrusted.add(cut)
        incomplete = tuple(
            name for name in SECTIONS if name in distrusted or name not in parsed.found
        )
    trusted = tuple(name for name in parsed.found if name not in distrusted)
    # A salvage that changes nothing is not worth merging: the new messages would be lost
    # from the document without anyone noticing. Ask again instead.
    changes = any(ops[name].kind != OpKind.KEEP for name in parsed.found)
    return UpdateReading(
        ops, parsed.usable and changes, tuple(errors), tuple(problems), trusted, incomplete
    )


def _joined(first: SectionOp, second: SectionOp) -> SectionOp:
    """Two APPENDs of one section as one: the items of the first, then the new ones."""
    seen = {item_key(item) for item in first.items}
    extra = [item for item in second.items if item_key(item) not in seen]
    return SectionOp.append((*first.items, *extra))


def combine_readings(salvaged: UpdateReading, repaired: UpdateReading) -> UpdateReading:
    """The salvage of a cut-off answer completed by the repair answer.

    The repair wins for every section it read in full, except that its KEEP leaves a salvaged
    op alone (the repair prompt asks for KEEP on sections already received) and that two
    APPENDs are joined, so that items received before the cut are not lost.
    """
    ops = dict(salvaged.ops)
    for name in repaired.trusted:
        op = repaired.ops[name]
        if op.kind == OpKind.KEEP:
            continue
        if op.kind == OpKind.APPEND and ops[name].kind == OpKind.APPEND:
            ops[name] = _joined(ops[name], op)
        else:
            ops[name] = op
    covered = set(salvaged.trusted) | set(repaired.trusted)
    still = tuple(name for name in salvaged.incomplete if name not in repaired.trusted)
    problems = list(salvaged.problems) + [f"repair: {p}" for p in repaired.problems]
    if still:
        problems.append("still missing after the repair (kept): " + ", ".join(still))
    return UpdateReading(
        ops,
        True,
        salvaged.errors,
        tuple(problems),
        tuple(name for name in SECTIONS if name in covered),
        still,
    )


def _appendable(raw: object) -> tuple[str, ...]:
    """The items of an extractor op as an APPEND: its items, or an UPDATE's bullet lines."""
    if not isinstance(raw, Mapping):
        return ()
    if raw.get("op") == "APPEND":
        items = raw.get("items")
        return tuple(str(i) for i in items if str(i).strip()) if isinstance(items, list) else ()
    if raw.get("op") == "UPDATE":
        return tuple(bullet_items(str(raw.get("content", ""))))
    return ()


def backfill_sections(
    ops: Mapping[str, SectionOp], unread: Sequence[str], extracted: Mapping[str, Any]
) -> tuple[dict[str, SectionOp], list[Decision]]:
    """``ops`` with the sections the model left unread filled from the extractor's answer,
    as APPENDs that the guards then judge like any other, and a decision for each."""
    inner = extracted.get("sections")
    source: Mapping[str, Any] = inner if isinstance(inner, Mapping) else extracted
    filled = dict(ops)
    decisions: list[Decision] = []
    for name in unread:
        if name not in _BACKFILLED:
            continue
        items = _appendable(source.get(name))
        if not items:
            continue
        op = filled.get(name, KEEP)
        filled[name] = (
            _joined(op, SectionOp.append(items))
            if op.kind == OpKind.APPEND
            else (SectionOp.append(items) if op.kind == OpKind.KEEP else op)
        )
        if filled[name] is op:
            continue
        decisions.append(
            Decision(
                name,
                op.kind.value,
                OpKind.APPEND.value,
                Guard.BACKFILL,
                f"left unread after the repair: {len(items)} item(s) from the deterministic "
                "extractor appended (through the guards)",
                items_restored=items,
            )
        )
    return filled, decisions


# -- the chain ---------------------------------------------------------------------------------


class _Run:
    """One generation: the provider, the event sink, and what has been spent so far."""

    def __init__(self, provider: LlmProvider, on_event: EventSink | None, limits: WmLimits) -> None:
        self.provider = provider
        self.on_event = on_event
        self.limits = limits
        self.usage = Usage()
        self.calls: list[Purpose] = []
        self.problems: list[str] = []
        self.backfilled: list[Decision] = []

    async def emit(self, event: ChainEvent) -> None:
        if self.on_event is not None:
            await self.on_event(event)

    async def call(
        self, purpose: Purpose, invoke: Callable[[], Awaitable[ModelReply]]
    ) -> ModelReply:
        await self.emit(LlmCallStarted(purpose, self.provider.name, self.provider.model))
        started = time.monotonic()
        self.calls.append(purpose)
        try:
            reply = await invoke()
        except LlmError as exc:
            elapsed = int((time.monotonic() - started) * 1000)
            await self.emit(LlmCallFinished(purpose, "error", Usage(), elapsed, error=str(exc)))
            raise
        elapsed = int((time.monotonic() - started) * 1000)
        self.usage = self.usage + reply.usage
        await self.emit(LlmCallFinished(purpose, reply.stop_reason, reply.usage, elapsed))
        return reply

    def failed(self, reason: str) -> GenerationFailed:
        return GenerationFailed(reason, retryable=True, usage=self.usage)

    def result(
        self,
        document: str,
        mode: Mode,
        decisions: Sequence[Decision] = (),
        ops: dict[str, SectionOp] | None = None,
        sections: Mapping[str, str] | None = None,
    ) -> Generation:
        return Generation(
            document=document,
            decisions=tuple(decisions),
            mode=mode,
            usage=self.usage,
            problems=list(self.problems),
            ops=ops,
            calls=tuple(self.calls),
            sections=sections,
        )

    async def create(
        self, messages: Sequence[Message], context: str | None
    ) -> tuple[str, dict[str, str]]:
        """One creation call, normalized: the canonical document and its section bodies."""
        request = CreateRequest(messages=tuple(messages), context_document=context)
        reply = await self.call(Purpose.CREATE, lambda: self.provider.create(request))
        output: object = reply.tool_input if reply.tool_input is not None else reply.text
        if isinstance(reply.tool_input, Mapping):
            self.problems.extend(
                f"creation answer: {e}" for e in validate_create_arguments(reply.tool_input)
            )
        elif reply.tool_input is None:
            self.problems.append("creation answer: no create_working_memory call; read its text")
        if reply.stop_reason == "max_tokens":
            self.problems.append("creation answer was cut off at the output limit (max_tokens)")
        try:
            created = normalize_creation(output)
        except CreationRejected as exc:
            self.problems.extend(exc.problems)
            raise self.failed(f"creation output unusable: {exc}") from exc
        self.problems.extend(created.problems)
        return created.document, parse_document(created.document)

    def merge(
        self,
        previous: str,
        ops: Mapping[str, SectionOp],
        mode: Mode,
        parsed: ParsedDocument | None = None,
    ) -> Generation:
        merged = merge(previous, ops, self.limits, parsed=parsed)
        decisions = (*self.backfilled, *merged.decisions)
        return self.result(merged.document, mode, decisions, dict(ops), merged.sections)


async def generate_working_memory(
    provider: LlmProvider,
    *,
    previous_document: str | None,
    messages: Sequence[Message],
    on_event: EventSink | None = None,
    limits: WmLimits = DEFAULT_LIMITS,
    backfill: Backfill | None = None,
    pending: Sequence[PendingItem] = (),
) -> Generation:
    """The next working memory after ``messages``, within ``limits``; see the module
    docstring for the steps.

    Raises :class:`GenerationFailed` when every step came out empty (the previous document is
    untouched), and lets :class:`LlmError` from the provider propagate.
    """
    run = _Run(provider, on_event, limits)
    # The previous document read once, for the reminders and the merge: it has a section
    # exactly when it is a working memory (``is_working_memory``, held to it by a test).
    parsed = parse_document_detailed(previous_document)
    previous_is_wm = previous_document is not None and bool(parsed.bodies)

    if not messages:
        if previous_document is not None and previous_is_wm:
            run.problems.append("no messages: the working memory is unchanged")
            return run.result(merge(previous_document, {}, limits).document, "update")
        raise GenerationFailed("no messages to build a working memory from", retryable=False)

    if previous_document is None or not previous_is_wm:
        if previous_document and previous_document.strip():
            run.problems.append("previous document has none of the seven sections; recreated")
        document, _ = await run.create(messages, previous_document)
        bounded = bound_document(document, limits)
        return run.result(bounded.document, "create", bounded.decisions, None, bounded.sections)

    request = UpdateRequest(
        previous_document=previous_document,
        messages=tuple(messages),
        reminders="\n\n".join(
            text
            for text in (
                section_reminders(previous_document, bodies=parsed.bodies),
                pending_reminder(pending),
            )
            if text.strip()
        ),
    )
    reply = await run.call(Purpose.UPDATE, lambda: provider.update(request))
    reading = read_update_answer(reply)
    run.problems.extend(reading.problems)

    if not reading.usable:
        repair = RepairRequest(update=request, previous_reply=reply, errors=reading.errors)
        repaired = await run.call(Purpose.REPAIR, lambda: provider.repair(repair))
        reading = read_update_answer(repaired)
        run.problems.extend(f"repair: {problem}" for problem in reading.problems)
    elif reading.incomplete:
        # Cut off at the output limit: what was salvaged is good, but the sections after the
        # cut would keep their old text. One repair call asks for those sections only.
        repair = RepairRequest(
            update=request,
            previous_reply=reply,
            errors=reading.errors,
            sections=reading.incomplete,
        )
        repaired = await run.call(Purpose.REPAIR, lambda: provider.repair(repair))
        second = read_update_answer(repaired)
        reading = combine_readings(reading, second)
        run.problems.extend(f"repair: {problem}" for problem in second.problems)
        if reading.incomplete:
            run.problems.append(
                "still missing after the repair (kept): " + ", ".join(reading.incomplete)
            )
            if backfill is not None:
                filled, notes = backfill_sections(
                    reading.ops, reading.incomplete, backfill(previous_document, messages)
                )
                reading = replace(reading, ops=filled)
                run.backfilled.extend(notes)

    if reading.usable:
        await run.emit(OpsParsed(reading.ops, reading.problems))
        return run.merge(previous_document, reading.ops, "update", parsed)

    run.problems.append("update and repair gave nothing usable; recreating with the previous one")
    _, bodies = await run.create(messages, previous_document)
    # The rewrite goes through the guards like any update, so it cannot silently drop what
    # the previous document held (paths, errors, open issues, the title).
    ops = {name: SectionOp.update(bodies[name]) if bodies.get(name) else KEEP for name in SECTIONS}
    await run.emit(OpsParsed(ops, ("derived from a creation answer",)))
    return run.merge(previous_document, ops, "create", parsed)
