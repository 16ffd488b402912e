"""What a guard returns when it intervenes."""

from __future__ import annotations

from wm_core.ops import SectionOp


class Verdict:
    """The op to apply instead of the requested one, with the reason and the items involved.

    A guard that lets the op through returns None instead, so "no verdict" always means
    "nothing to record". Internal and read-only by convention; a plain class rather than a
    frozen dataclass, whose generated ``__init__`` stays interpreted in the compiled engine.
    """

    __slots__ = ("deduplicated", "dropped", "op", "reason", "refused", "restored")

    def __init__(
        self,
        op: SectionOp,
        reason: str,
        dropped: tuple[str, ...] = (),
        restored: tuple[str, ...] = (),
        refused: tuple[str, ...] = (),
        deduplicated: bool = False,  # the items of an APPEND verdict were already checked
    ) -> None:
        self.op = op
        self.reason = reason
        self.dropped = dropped
        self.restored = restored
        self.refused = refused
        self.deduplicated = deduplicated
