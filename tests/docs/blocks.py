"""The fenced code blocks of README.md and docs/**/*.md, and how each one is run.

Every block is run by tests/docs/test_code_blocks.py unless the line right before its fence is
an HTML comment ``<!-- not-run: REASON -->`` (a reason is required). Which runner depends on
the fence's language: ``python`` with the project's interpreter (top-level ``await`` allowed, as
``python -m asyncio`` would), ``typescript``/``ts`` compiled with the TypeScript client's own
``tsc`` against the built client and run by Node, ``javascript``/``js`` by Node, ``sh``/``bash``/
``shell`` by bash with ``-e``. A block in any other language (or none) must be marked: a
block nobody runs is a block that can rot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNNABLE = {
    "python": "python",
    "py": "python",
    "typescript": "typescript",
    "ts": "typescript",
    "javascript": "javascript",
    "js": "javascript",
    "sh": "shell",
    "bash": "shell",
    "shell": "shell",
}
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block: where it is, its language, its text, and why it is not run (if so)."""

    path: Path
    line: int  # of the opening fence, from 1
    language: str
    code: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}-{self.language or 'plain'}"

    @property
    def runner(self) -> str | None:
        return RUNNABLE.get(self.language)


def documents() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence = opening["fence"]
        language = opening["info"].strip().split(" ")[0].lower() if opening["info"] else ""
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        previous = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        mark = _NOT_RUN.match(previous)
        reason = mark["reason"] if mark else None
        out.append(
            Block(path, index + 1, language, "\n".join(lines[index + 1 : end]) + "\n", reason)
        )
        index = end + 1
    return out


def all_blocks() -> list[Block]:
    return [block for path in documents() for block in blocks_of(path)]
