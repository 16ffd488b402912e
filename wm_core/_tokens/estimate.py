"""Token estimate shared by the window accounting, the guards and the assembler.

The weights are the reference system's (0.25 per code point, 1.5 for CJK scripts, 2.0 for
astral code points), so that thresholds such as "1,500 tokens per section" mean the same here
as there. It is an estimate, deliberately cheap: no tokenizer is loaded.
"""

from __future__ import annotations

import math
import re
from typing import Final

# Code points that count 1.5: CJK ideographs (also the astral extensions B to F), kana, hangul,
# full-width forms, CJK punctuation.
_CJK = re.compile(
    "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef\u3040-\u30ff\u31f0-\u31ff"
    "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\uff00-\uffef\u3000-\u303f]"
)
# Astral code points outside the CJK extensions, which count 2.0.
_OTHER_ASTRAL = re.compile("[\U00010000-\U0001ffff\U0002ebf0-\U0010ffff]")


def estimate_tokens(text: str | None) -> int:
    """Estimated tokens of ``text``: the weighted code-point sum, rounded up."""
    if not text:
        return 0
    if text.isascii():
        return math.ceil(len(text) / 4)
    return -(-_quarters(text) // 4)


def quarter_tokens(text: str) -> int:
    """The weighted code-point sum of ``text`` in quarter tokens (exact integer arithmetic: 1
    per code point, 6 for CJK and 8 for other astral ones). It adds up over concatenation,
    so the estimate of a text built from parts is ``-(-sum // 4)`` of theirs, without
    building it: ``estimate_tokens(a + b) == -(-(quarter_tokens(a) + quarter_tokens(b)) // 4)``."""
    return len(text) if text.isascii() else _quarters(text)


# UTF-8 lead bytes of every code point that weighs more than 0.25 (U+1100 and up, see _CJK and
# _OTHER_ASTRAL), and of some lighter ones beside them: E1 (U+1000 to U+1FFF), E3 to EF
# (U+3000 to U+FFFF) and F0 to F4 (astral). Lead bytes never occur inside another code point's
# encoding, so a text none of whose UTF-8 bytes is one of them has no heavy code point.
_LIGHT_BYTES: Final = bytes(b for b in range(256) if not (b == 0xE1 or 0xE3 <= b <= 0xF4))
# Up to this many code points that may be heavy are weighed one by one; more (CJK text) are
# counted by two regex scans.
_FEW_SUSPECTS: Final = 64


def _quarters(text: str) -> int:
    """The weighted sum of a non-ASCII ``text`` in quarter tokens, without a Python loop over
    its code points (issue 36: the regex scans were most of a small APPEND near a section's
    bound, and of every merge once the Key Facts sentinel, whose emoji carries a variation
    selector, stood in the section).

    A text all below U+0100 (accented Latin: most European text) is stored one byte a code
    point, and its Latin-1 encoding is a plain copy: nothing in it is heavy. Otherwise the
    lead bytes in its UTF-8 encoding that may start a heavy code point are few (an emoji, a
    sign) or none (dashes, arrows, quotes, Greek, Cyrillic...), and only those code points
    are weighed."""
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        pass
    else:
        return len(text)
    utf8 = text.encode("utf-8", "surrogatepass")
    suspects = utf8.translate(None, _LIGHT_BYTES)
    if len(suspects) > _FEW_SUSPECTS:
        return len(text) + 5 * len(_CJK.findall(text)) + 7 * len(_OTHER_ASTRAL.findall(text))
    extra = 0
    for lead in set(suspects):
        size = 4 if lead >= 0xF0 else 3
        position = utf8.find(lead)
        while position != -1:
            char = utf8[position : position + size].decode("utf-8", "surrogatepass")
            extra += 5 if _CJK.match(char) else 7 if _OTHER_ASTRAL.match(char) else 0
            position = utf8.find(lead, position + size)
    return len(text) + extra


def _none_heavy(text: str) -> bool:
    """Whether ``text`` surely has no code point that weighs more than 0.25 (see
    ``_quarters``); False means "maybe"."""
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return not text.encode("utf-8", "surrogatepass").translate(None, _LIGHT_BYTES)
    return True


def exceeds_tokens(text: str, limit: int) -> bool:
    """Whether ``estimate_tokens(text) > limit`` (the size thresholds are strict).

    Bounds settle most checks without weighing every code point: each weighs at least 0.25,
    and the heavy ones (U+1100 and above) take 3 bytes or more in UTF-8, so the UTF-8 length
    bounds their number. On a non-ASCII 3 KB section that is 5 us instead of 100 us.
    """
    at_least = math.ceil(len(text) / 4)
    if text.isascii() or at_least > limit:
        return at_least > limit
    if tokens_at_most(text) <= limit:
        return False
    return estimate_tokens(text) > limit


def tokens_at_most(text: str) -> int:
    """An upper bound of ``estimate_tokens(text)`` without weighing every code point (see
    ``exceeds_tokens``): exact for a text without heavy code points (``_none_heavy``),
    else from its UTF-8 length, without the two regex scans."""
    if text.isascii() or _none_heavy(text):
        return math.ceil(len(text) / 4)
    heavy_at_most = (len(text.encode("utf-8", "surrogatepass")) - len(text)) // 2
    return math.ceil(len(text) / 4 + 1.75 * heavy_at_most)  # each heavy adds <= 1.75
