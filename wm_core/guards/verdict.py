"""What a guard returns when it intervenes."""

from __future__ import annotations

from dataclasses import dataclass

from wm_core.ops import SectionOp
from wm_core.records import Record


@dataclass(frozen=True, slots=True)
class Verdict(Record):
    """The op to apply instead of the requested one, with the reason and the items involved.

    A guard that lets the op through returns None instead, so "no verdict" always means
    "nothing to record".
    """

    op: SectionOp
    reason: str
    dropped: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    # The items of an APPEND verdict were already checked against the old body.
    deduplicated: bool = False
