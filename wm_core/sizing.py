"""Size checks against token thresholds, without estimating more than needed.

The exact estimate walks every code point of non-ASCII text in Python; a threshold check
usually does not need it. UTF-8 length bounds how many heavy (CJK, astral) code points there
can be, which settles most checks in C and keeps the guards fast on real documents.
"""

from __future__ import annotations

import math

from wm_core.text import latin1_bytes
from wm_core.tokens import estimate_tokens

# Extra weight of the heaviest code point over the base 0.25 (astral: 2.0).
_MAX_EXTRA = 1.75


class TokenSize:
    """The token estimate of one text, computed exactly only if a comparison needs it."""

    __slots__ = ("_exact", "_high", "_low", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._exact: int | None = None
        length = len(text)
        self._low = math.ceil(length / 4)  # every code point weighs at least 0.25
        if text.isascii() or latin1_bytes(text) is not None:
            self._high = self._exact = self._low  # nothing below U+1100 weighs more than 0.25
        else:
            # Code points heavier than 0.25 (U+1100 and above) take at least 3 UTF-8 bytes.
            heavy_at_most = (len(text.encode("utf-8", "surrogatepass")) - length) // 2
            self._high = math.ceil(length / 4 + _MAX_EXTRA * heavy_at_most)

    def exceeds(self, limit: int) -> bool:
        """Whether ``estimate_tokens(text) > limit``."""
        if self._low > limit:
            return True
        if self._high <= limit:
            return False
        if self._exact is None:
            self._exact = estimate_tokens(self._text)
        return self._exact > limit


def exceeds_tokens(text: str, limit: int) -> bool:
    """Whether ``estimate_tokens(text) > limit``, computed cheaply when the answer is clear."""
    return TokenSize(text).exceeds(limit)
