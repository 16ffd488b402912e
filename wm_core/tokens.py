"""Token estimate shared by the window accounting, the guards and the assembler.

The weights are the reference system's (0.25 per code point, 1.5 for CJK scripts, 2.0 for
astral code points), so that thresholds such as "1,500 tokens per section" mean the same here
as there. It is an estimate, deliberately cheap: no tokenizer is loaded.
"""

from __future__ import annotations

import math

# Ranges that count 1.5: CJK ideographs, kana, hangul, full-width forms, CJK punctuation.
_CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2EBEF),
    (0x3040, 0x30FF),
    (0x31F0, 0x31FF),
    (0xAC00, 0xD7AF),
    (0x1100, 0x11FF),
    (0x3130, 0x318F),
    (0xFF00, 0xFFEF),
    (0x3000, 0x303F),
)


def _is_cjk(code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in _CJK_RANGES)


def estimate_tokens(text: str | None) -> int:
    """Estimated tokens of ``text``: the weighted code-point sum, rounded up."""
    if not text:
        return 0
    if text.isascii():
        # Fast path for the common case: every code point weighs 0.25.
        return math.ceil(len(text) / 4)
    quarters = 0  # count in quarter tokens to stay in exact integer arithmetic
    for ch in text:
        code = ord(ch)
        if code < 0x80:
            quarters += 1
        elif _is_cjk(code):
            quarters += 6
        elif code > 0xFFFF:
            quarters += 8
        else:
            quarters += 1
    return -(-quarters // 4)
