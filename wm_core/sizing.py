"""Size checks against token thresholds, without estimating more than needed.

The exact estimate walks every code point of non-ASCII text in Python; a threshold check
usually does not need it. UTF-8 length bounds how many heavy (CJK, astral) code points there
can be, which settles most checks in C and keeps the guards fast on real documents.
"""

from __future__ import annotations

import math

from wm_core.tokens import estimate_tokens

# Extra weight of the heaviest code point over the base 0.25 (astral: 2.0).
_MAX_EXTRA = 1.75


def exceeds_tokens(text: str, limit: int) -> bool:
    """Whether ``estimate_tokens(text) > limit``, computed cheaply when the answer is clear."""
    length = len(text)
    if math.ceil(length / 4) > limit:
        return True  # every code point weighs at least 0.25
    if text.isascii():
        return False  # the lower bound above is then exact
    # Code points that weigh more than 0.25 (U+1100 and above) take at least 3 UTF-8 bytes.
    heavy_at_most = (len(text.encode("utf-8", "surrogatepass")) - length) // 2
    if math.ceil(length / 4 + _MAX_EXTRA * heavy_at_most) <= limit:
        return False
    return estimate_tokens(text) > limit
