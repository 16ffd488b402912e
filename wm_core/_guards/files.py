"""Files & Context no-regression: a rewrite may annotate references, never lose them.

The reference rejects a rewrite that drops a path and keeps only the lines of brand-new paths,
so status edits to existing entries are lost. Here the rewrite is kept as written and the old
lines whose references vanished are put back after it: both the annotations and the paths
survive, and the rule holds on every round (not once, as for Open Issues).

Only a token that disappeared can take a reference with it, so old tokens still present in the
rewrite are skipped without classification (a line kept verbatim with one set test); when the
rewrite keeps its paths verbatim nothing is classified at all. The old body is walked once,
line by line: a rewrite that drops lines restores them after looking at their first tokens.
"""

from __future__ import annotations

from wm_core._document.paths import is_plain_path, might_reference, token_references
from wm_core._guards.verdict import Verdict
from wm_core._ops.section_ops import OpKind, SectionOp


def guard_files(op: SectionOp, old: str) -> Verdict | None:
    if op.kind is not OpKind.UPDATE:
        return None
    new = op.content.strip()
    new_tokens = set(new.split())
    if 2 * len(new) >= len(old) and not any(
        might_reference(token) for token in set(old.split()).difference(new_tokens)
    ):
        # A rewrite about as long as the body usually keeps its paths: one set difference
        # lets it through without looking at a line. A much shorter one has usually dropped
        # lines, which the walk below finds from their first tokens without this set.
        return None
    new_refs: set[str] | None = None
    restored: list[str] = []
    lost: dict[str, None] = {}  # an ordered set: one vanished reference per restored line
    for line in old.split("\n"):
        if line.startswith("- "):
            # The usual dropped line, "- <path> ...": its path decides, the rest unsplit. (A
            # path ending at another kind of space is no plain path: the walk below decides.)
            end = line.find(" ", 2)
            token = line[2:] if end == -1 else line[2:end]
            if token not in new_tokens and "www." not in token and is_plain_path(token):
                if new_refs is None:
                    new_refs = _references(new_tokens)
                if token not in new_refs:
                    restored.append(line.strip())
                    lost[token] = None
                    continue
        tokens = line.split()
        if new_tokens.issuperset(tokens):
            continue  # a line kept verbatim (in its tokens) loses nothing
        for token in tokens:
            # Only a token gone from the rewrite and shaped like a path can take a reference.
            if token in new_tokens or not might_reference(token):
                continue
            refs = token_references(token)
            if not refs:
                continue
            if new_refs is None:
                new_refs = _references(new_tokens)
            vanished = next((ref for ref in refs if ref not in new_refs), None)
            if vanished is not None:
                restored.append(line.strip())
                lost[vanished] = None
                break
    if not restored:
        return None
    listed = ", ".join(list(lost)[:10]) + (", ..." if len(lost) > 10 else "")
    return Verdict(
        SectionOp(OpKind.UPDATE, content=new + "\n" + "\n".join(restored)),
        f"the UPDATE lost references ({listed}); {len(restored)} old line(s) re-appended",
        restored=tuple(restored),
    )


def _references(tokens: set[str]) -> set[str]:
    found: set[str] = set()
    for token in tokens:
        if might_reference(token):
            found.update(token_references(token))
    return found
