"""Applying section ops to the previous working memory.

Per section: read the op (``normalize_op``), make its text safe to render, let the
section's guard judge it when there is old content to protect, apply it, and record every
intervention. The result is always the canonical seven-section document, and the same inputs
always give the same document and the same decisions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from wm_core._decisions import Decision, Guard
from wm_core._document.items import fresh_items
from wm_core._document.markdown import (
    ParsedDocument,
    assemble_document,
    parse_document_detailed,
    sanitize_body,
    sanitize_item,
)
from wm_core._document.sections import SECTIONS, canonical_name
from wm_core._guards import GUARDS
from wm_core._guards.bound import DEFAULT_LIMITS, WmLimits, bound_sections
from wm_core._ops.section_ops import KEEP, NormalizedOp, OpKind, SectionOp, describe, normalize_op

_NO_OP = "NONE"
_DROPPED = "DROP"


@dataclass(frozen=True, slots=True)
class MergeResult:
    """The new document, the new section bodies, and every intervention on the way."""

    document: str
    decisions: tuple[Decision, ...] = ()
    sections: Mapping[str, str] = field(default_factory=dict)


def merge(
    previous: str | None,
    ops: Mapping[str, object] | None,
    limits: WmLimits = DEFAULT_LIMITS,
    *,
    parsed: ParsedDocument | None = None,
) -> MergeResult:
    """Merge ``ops`` (section name -> op) into the ``previous`` document, within ``limits``.

    An op is a :class:`SectionOp` or a tool-call dict (``{"op": "UPDATE", "content": ...}``).
    Sections without an op are kept. Never raises on malformed ops. ``parsed``: the
    caller's ``parse_document_detailed(previous)``, when it has it (a 12K-token document
    takes about 0.1 ms to read).
    """
    if parsed is None:
        parsed = parse_document_detailed(previous if isinstance(previous, str) else None)
    decisions: list[Decision] = _structure_decisions(parsed)
    requested = _index_ops(ops, decisions)
    bodies: dict[str, str] = {}
    asked: dict[str, str] = {}
    for name in SECTIONS:
        old = parsed.bodies.get(name, "")
        raw = requested.get(name)
        normalized = normalize_op(raw) if raw is not None else None  # read once per section
        if normalized is None:
            bodies[name] = old
            continue
        bodies[name] = _merge_section(name, old, normalized, decisions)
        asked[name] = normalized.requested
    bodies, cuts = bound_sections(parsed.bodies, bodies, asked, limits)
    decisions.extend(cuts)
    return MergeResult(assemble_document(bodies), tuple(decisions), bodies)


def bound_document(document: str, limits: WmLimits = DEFAULT_LIMITS) -> MergeResult:
    """A document made without a merge (a creation answer) within ``limits``."""
    parsed = parse_document_detailed(document)
    created = {name: "CREATE" for name in SECTIONS}
    bodies, cuts = bound_sections({}, parsed.bodies, created, limits)
    if not cuts:
        return MergeResult(document, (), parsed.bodies)
    return MergeResult(assemble_document(bodies), tuple(cuts), bodies)


def _structure_decisions(parsed: ParsedDocument) -> list[Decision]:
    decisions: list[Decision] = []
    lost_preamble = parsed.preamble_without_title
    if lost_preamble:
        decisions.append(
            Decision(
                "(preamble)",
                _NO_OP,
                _DROPPED,
                Guard.STRUCTURE,
                "text before the first section belongs to no section",
                items_dropped=tuple(lost_preamble.split("\n")),
            )
        )
    for extra in parsed.extras:
        lines = [line for line in extra.body.split("\n") if line.strip()]
        decisions.append(
            Decision(
                extra.title,
                _NO_OP,
                _DROPPED,
                Guard.STRUCTURE,
                "not one of the seven sections",
                items_dropped=tuple(lines),
            )
        )
    for name in dict.fromkeys(parsed.duplicates):
        decisions.append(
            Decision(
                name,
                _NO_OP,
                OpKind.KEEP.value,
                Guard.STRUCTURE,
                "section heading repeated; the bodies were joined in order",
            )
        )
    return decisions


def _index_ops(ops: object, decisions: list[Decision]) -> dict[str, object]:
    if ops is None:
        return {}
    if not isinstance(ops, Mapping):
        decisions.append(
            Decision(
                "(ops)",
                "INVALID",
                OpKind.KEEP.value,
                Guard.OP_SHAPE,
                f"ops is a {type(ops).__name__}, not a mapping; every section kept",
            )
        )
        return {}
    indexed: dict[str, object] = {}
    for key, raw in ops.items():
        name = canonical_name(key) if isinstance(key, str) else None
        if name is not None and name not in indexed:
            indexed[name] = raw
            continue
        normalized = normalize_op(raw)
        if normalized is None or (normalized.op.kind is OpKind.KEEP and not normalized.dropped):
            continue  # nothing would have changed
        reason = (
            "not a section of the working memory; op ignored"
            if name is None
            else "a second op for the same section; ignored"
        )
        decisions.append(
            Decision(
                describe(key) if name is None else name,
                normalized.requested,
                OpKind.KEEP.value,
                Guard.OP_SHAPE,
                reason,
                items_dropped=_payload(normalized),
            )
        )
    return indexed


def _payload(normalized: NormalizedOp) -> tuple[str, ...]:
    op = normalized.op
    if op.kind is OpKind.UPDATE:
        return (op.content.strip(),)
    return op.items + normalized.dropped


def _merge_section(name: str, old: str, normalized: NormalizedOp, decisions: list[Decision]) -> str:
    requested = normalized.requested
    op = normalized.op
    if normalized.guard is not None:
        decisions.append(
            Decision(
                name,
                requested,
                op.kind.value,
                normalized.guard,
                normalized.reason,
                items_dropped=normalized.dropped,
            )
        )
    if op.kind is OpKind.KEEP:
        return old
    op = _make_safe(name, op, requested, decisions)
    deduplicated = False
    if old and op.kind is not OpKind.KEEP:
        entry = GUARDS.get(name)
        if entry is not None:
            guard, judge = entry
            verdict = judge(op, old)
            if verdict is not None:
                decisions.append(
                    Decision(
                        name,
                        requested,
                        verdict.op.kind.value,
                        guard,
                        verdict.reason,
                        items_dropped=verdict.dropped,
                        items_restored=verdict.restored,
                        items_refused=verdict.refused,
                    )
                )
                op = verdict.op
                deduplicated = verdict.deduplicated
    return _apply(name, op, old, requested, decisions, deduplicated)


def _make_safe(name: str, op: SectionOp, requested: str, decisions: list[Decision]) -> SectionOp:
    """Neutralise headings in new text before any guard looks at it, so guards judge the
    text that will actually be stored."""
    if op.kind is OpKind.UPDATE:
        cleaned = sanitize_body(op.content, name)
        if not cleaned.changed:
            return op
        safe: SectionOp = SectionOp(OpKind.UPDATE, content=cleaned.text) if cleaned.text else KEEP
        decisions.append(
            Decision(
                name,
                requested,
                safe.kind.value,
                Guard.STRUCTURE if cleaned.text else Guard.EMPTY_UPDATE,
                _heading_reason(len(cleaned.rewritten), len(cleaned.removed)),
                items_dropped=cleaned.removed,
            )
        )
        return safe
    if op.kind is OpKind.APPEND and any("\n" in item for item in op.items):
        items: list[str] = []
        rewritten = 0
        for item in op.items:
            cleaned = sanitize_item(item)
            items.append(cleaned.text)
            rewritten += len(cleaned.rewritten)
        if rewritten:
            decisions.append(
                Decision(
                    name, requested, op.kind.value, Guard.STRUCTURE, _heading_reason(rewritten, 0)
                )
            )
            return SectionOp(OpKind.APPEND, items=tuple(items))
    return op


def _heading_reason(rewritten: int, removed: int) -> str:
    parts: list[str] = []
    if removed:
        parts.append("a leading heading repeating the section name was removed")
    if rewritten:
        parts.append(
            f"{rewritten} heading line(s) in the new text were demoted so they cannot split "
            "the document"
        )
    return "; ".join(parts)


def _apply(
    name: str,
    op: SectionOp,
    old: str,
    requested: str,
    decisions: list[Decision],
    deduplicated: bool,
) -> str:
    if op.kind is OpKind.UPDATE:
        return op.content.strip()
    if op.kind is not OpKind.APPEND:
        return old
    if deduplicated:
        fresh, duplicates = list(op.items), list[str]()
    else:
        fresh, duplicates = fresh_items(op.items, old)
    if duplicates:
        decisions.append(
            Decision(
                name,
                requested,
                OpKind.APPEND.value if fresh else OpKind.KEEP.value,
                Guard.DEDUP,
                f"{len(duplicates)} item(s) already present; not appended again",
                items_dropped=tuple(duplicates),
            )
        )
    if not fresh:
        return old
    block = "\n".join("- " + item for item in fresh)
    return old + "\n" + block if old else block
