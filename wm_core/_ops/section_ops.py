"""Section ops: the engine's own representation, and the bridge from whatever arrives.

Ops come from two places: an LLM's tool call (JSON-shaped dicts, sometimes malformed) and the
gRPC API (already typed). Both end up as :class:`SectionOp`, and :func:`normalize_op` is the
single place that decides what a malformed op means, so that the same input is always read
the same way and every reading that loses something says so.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from wm_core._decisions import Guard
from wm_core._document.items import bullet_items
from wm_core._document.text import normalize_newlines


class OpKind(StrEnum):
    KEEP = "KEEP"
    UPDATE = "UPDATE"
    APPEND = "APPEND"


@dataclass(frozen=True, slots=True)
class SectionOp:
    """What to do with one section: keep it, replace its body, or add bullet items.

    ``content`` is meaningful for UPDATE only (the body without its heading), ``items`` for
    APPEND only (texts without bullet markers; each is rendered as ``- <item>``).
    """

    kind: OpKind
    content: str = ""
    items: tuple[str, ...] = ()

    @classmethod
    def keep(cls) -> SectionOp:
        return KEEP

    @classmethod
    def update(cls, content: str) -> SectionOp:
        return cls(OpKind.UPDATE, content=content)

    @classmethod
    def append(cls, items: Iterable[str]) -> SectionOp:
        return cls(OpKind.APPEND, items=tuple(items))

    def to_dict(self) -> dict[str, object]:
        """The op in the tool-call JSON shape."""
        if self.kind == OpKind.UPDATE:
            return {"op": OpKind.UPDATE.value, "content": self.content}
        if self.kind == OpKind.APPEND:
            return {"op": OpKind.APPEND.value, "items": list(self.items)}
        return {"op": OpKind.KEEP.value}


KEEP: Final = SectionOp(OpKind.KEEP)

_SHORT = reprlib.Repr()
_SHORT.maxstring = 200
_SHORT.maxother = 200


def describe(value: object) -> str:
    """A bounded, never-failing text for a value that could not be used."""
    if isinstance(value, str):
        return value
    try:
        return _SHORT.repr(value)
    except Exception:  # a hostile __repr__ must not break a merge
        return f"<{type(value).__name__}>"


@dataclass(frozen=True, slots=True)
class NormalizedOp:
    """An op made usable, with the intervention (if any) that reading it required.

    ``requested`` is the op name as asked, for the records (``KEEP``, ``UPDATE``, ``APPEND``,
    or the unknown name that arrived).
    """

    requested: str
    op: SectionOp
    guard: Guard | None = None
    reason: str = ""
    dropped: tuple[str, ...] = ()


_KEPT: Final = NormalizedOp(OpKind.KEEP.value, KEEP)


def _text(value: str) -> str:
    """Line breaks as the document reader sees them, so what we check is what gets read."""
    return normalize_newlines(value).strip()


def _split_items(values: Iterable[object]) -> tuple[list[str], list[str]]:
    kept: list[str] = []
    dropped: list[str] = []
    for value in values:
        if isinstance(value, str):
            text = _text(value)
            if text:
                kept.append(text)
        else:
            dropped.append(describe(value))
    return kept, dropped


def _append(requested: str, items: object, content: object) -> NormalizedOp:
    notes: list[str] = []
    kept: list[str] = []
    dropped: list[str] = []
    if isinstance(items, (list, tuple)):
        kept, dropped = _split_items(items)
        if dropped:
            notes.append(f"{len(dropped)} non-string item(s) dropped")
    elif isinstance(items, str):
        kept, _ = _split_items([items])
        notes.append("items was a single string; used as one item")
    elif items is not None:
        dropped.append(describe(items))
        notes.append("items is not a list")
    if not kept and not dropped and isinstance(content, str) and content.strip():
        kept = bullet_items(_text(content))
        notes.append("APPEND without items; items taken from its content")
    if not kept and not notes:
        # Like an UPDATE without content: the model meant to change the section and said
        # nothing, which is worth a record naming the section (an empty APPEND is KEEP).
        notes.append(
            "APPEND with blank items only"
            if isinstance(items, (list, tuple, str)) and items
            else "APPEND without items"
        )
    op = SectionOp(OpKind.APPEND, items=tuple(kept)) if kept else KEEP
    if not notes:
        return NormalizedOp(requested, op)
    if not kept:
        notes.append("nothing left to append; section kept")
    return NormalizedOp(requested, op, Guard.OP_SHAPE, "; ".join(notes), tuple(dropped))


def _update(requested: str, content: object) -> NormalizedOp:
    if isinstance(content, str) and content.strip():
        return NormalizedOp(requested, SectionOp(OpKind.UPDATE, content=_text(content)))
    if content is None or isinstance(content, str):
        return NormalizedOp(requested, KEEP, Guard.EMPTY_UPDATE, "UPDATE without content; kept")
    return NormalizedOp(
        requested,
        KEEP,
        Guard.EMPTY_UPDATE,
        f"UPDATE content is a {type(content).__name__}, not a string; kept",
        (describe(content),),
    )


def _unknown(requested: str, reason: str, payload: Mapping[object, object] | None) -> NormalizedOp:
    dropped: list[str] = []
    if payload is not None:
        content = payload.get("content")
        if isinstance(content, str) and content.strip():
            dropped.append(content.strip())
        items = payload.get("items")
        if isinstance(items, (list, tuple)):
            dropped.extend(describe(item) for item in items)
    return NormalizedOp(requested, KEEP, Guard.OP_SHAPE, reason, tuple(dropped))


def normalize_op(raw: object) -> NormalizedOp | None:
    """Read one section op; None means "no op for this section" (the section is kept).

    Accepts a :class:`SectionOp` or a tool-call dict. The op name is case-insensitive, as in
    the reference. An UPDATE with empty or non-string content is a KEEP; non-string APPEND
    items are dropped; an unknown op keeps the section. Each of these is reported.
    """
    if raw is None:
        return None
    if raw is KEEP:
        return _KEPT
    if isinstance(raw, SectionOp):
        if raw.kind == OpKind.UPDATE:
            return _update(OpKind.UPDATE.value, raw.content)
        if raw.kind == OpKind.APPEND:
            return _append(OpKind.APPEND.value, list(raw.items), None)
        return _KEPT
    if isinstance(raw, Mapping):
        name = raw.get("op")
        if not isinstance(name, str):
            label = "MISSING" if name is None else "INVALID"
            return _unknown(label, f"op name is {label.lower()}; section kept", raw)
        requested = name.strip().upper()
        if requested == OpKind.KEEP:
            return _KEPT
        if requested == OpKind.UPDATE:
            return _update(requested, raw.get("content"))
        if requested == OpKind.APPEND:
            return _append(requested, raw.get("items"), raw.get("content"))
        return _unknown(requested, f"unknown op {describe(name)!r}; section kept", raw)
    if isinstance(raw, str) and raw.strip().upper() == OpKind.KEEP:
        return _KEPT
    return NormalizedOp(
        "INVALID",
        KEEP,
        Guard.OP_SHAPE,
        f"op is a {type(raw).__name__}, not an object; section kept",
        (describe(raw),),
    )
