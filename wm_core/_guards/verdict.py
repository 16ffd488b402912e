"""What a guard returns when it intervenes."""

from __future__ import annotations

from dataclasses import dataclass

from wm_core._ops.section_ops import SectionOp


@dataclass(frozen=True, slots=True)
class Verdict:
    """The op to apply instead of the requested one, with the reason and the items involved.

    A guard that lets the op through returns None instead, so "no verdict" always means
    "nothing to record".
    """

    op: SectionOp
    reason: str
    dropped: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    deduplicated: bool = False  # the items of an APPEND verdict were already checked
