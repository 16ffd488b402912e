"""The reference thresholds, in one place.

They are kept identical to the reference system so that a working memory behaves the same under
either engine; changing one is a product decision, not a tuning knob.
"""

from __future__ import annotations

from typing import Final

# A section is oversized above either threshold (strictly greater).
BULLET_THRESHOLD: Final = 25
TOKEN_THRESHOLD: Final = 1500

# Key Facts is at the emergency level above twice the thresholds.
EMERGENCY_FACTOR: Final = 2
EMERGENCY_BULLETS: Final = BULLET_THRESHOLD * EMERGENCY_FACTOR
EMERGENCY_TOKENS: Final = TOKEN_THRESHOLD * EMERGENCY_FACTOR

# How many fresh facts an oversized Key Facts section accepts per APPEND.
OVERSIZED_APPEND_CAP: Final = 5

# A Key Facts consolidation must keep this share of bullets and of lexical anchors.
MIN_BULLET_RATIO: Final = 0.15
MIN_ANCHOR_COVERAGE: Final = 0.70

# Open Issues compares the first characters of an old item with the new content.
OPEN_ISSUE_SNIPPET_CHARS: Final = 40
