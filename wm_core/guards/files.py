"""Files & Context no-regression: a rewrite may annotate references, never lose them.

The reference rejects a rewrite that drops a path and keeps only the lines of brand-new paths,
so status edits to existing entries are lost. Here the rewrite is kept as written and the old
lines whose references vanished are put back after it: both the annotations and the paths
survive, and the rule holds on every round (not once, as for Open Issues).

Only tokens that disappeared can take a reference with them, so the check starts from the
token sets of both bodies and classifies few tokens when the rewrite keeps its paths verbatim.
"""

from __future__ import annotations

from wm_core.guards.verdict import Verdict
from wm_core.ops import OpKind, SectionOp
from wm_core.paths import might_reference, token_references


def _references(tokens: set[str], known: dict[str, list[str]]) -> set[str]:
    found: set[str] = set()
    for token in tokens:
        if might_reference(token):
            refs = known.get(token)
            if refs is None:
                refs = known[token] = token_references(token)
            found.update(refs)
    return found


def guard_files(op: SectionOp, old: str) -> Verdict | None:
    if op.kind != OpKind.UPDATE:
        return None
    new = op.content.strip()
    old_tokens = set(old.split())
    new_tokens = set(new.split())
    known: dict[str, list[str]] = {}
    gone = old_tokens - new_tokens
    missing = _references(gone, known)
    if missing:
        missing -= _references(new_tokens - old_tokens, known)
    if missing:
        missing -= _references(old_tokens & new_tokens, known)
    if not missing:
        return None
    carriers = {token for token in gone if not missing.isdisjoint(known.get(token, ()))}
    restored = tuple(
        line.strip() for line in old.split("\n") if not carriers.isdisjoint(line.split())
    )
    listed = ", ".join(sorted(missing)[:10]) + (", ..." if len(missing) > 10 else "")
    return Verdict(
        SectionOp(OpKind.UPDATE, content=new + "\n" + "\n".join(restored)),
        f"UPDATE dropped {len(missing)} reference(s) ({listed}); their old lines were re-appended",
        restored=restored,
    )
