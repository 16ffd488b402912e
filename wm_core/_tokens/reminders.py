"""Size reminders shown to the model before it updates the working memory.

Only Key Facts has a server-side enforcement path; for the other sections the reminder is the
only pressure towards consolidation, so it is emitted for every oversized canonical section
except the append-only one (asking to consolidate a history would invite losing it). The
format is the reference's, so prompts written for it keep working.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from wm_core._document.items import count_items
from wm_core._document.markdown import parse_document
from wm_core._document.sections import APPEND_ONLY_SECTIONS
from wm_core._tokens.estimate import estimate_tokens, exceeds_tokens
from wm_core._tokens.limits import BULLET_THRESHOLD, TOKEN_THRESHOLD

OPEN_TAG: Final = "<section_size_warnings>"
CLOSE_TAG: Final = "</section_size_warnings>"

_INSTRUCTION: Final = (
    "This section MUST be consolidated via UPDATE in this round: group related facts by topic "
    "into summary bullets, keep every name, date and exact value, and fold repeated events "
    "into one pattern."
)


def section_reminders(document: str | None, *, bodies: Mapping[str, str] | None = None) -> str:
    """The ``<section_size_warnings>`` block for ``document``, or "" when nothing is too big.
    ``bodies``: the caller's ``parse_document(document)``, when it has it."""
    warnings: list[str] = []
    for name, body in (parse_document(document) if bodies is None else bodies).items():
        if name in APPEND_ONLY_SECTIONS:
            continue
        count = count_items(body)
        if count <= BULLET_THRESHOLD and not exceeds_tokens(body, TOKEN_THRESHOLD):
            continue
        warnings.append(
            f'WARNING: "{name}" has {count} bullets (~{estimate_tokens(body)} tokens).\n'
            f"{_INSTRUCTION}\n"
            f"Target: <={BULLET_THRESHOLD} bullets, <={TOKEN_THRESHOLD} tokens."
        )
    if not warnings:
        return ""
    return OPEN_TAG + "\n" + "\n\n".join(warnings) + "\n" + CLOSE_TAG
