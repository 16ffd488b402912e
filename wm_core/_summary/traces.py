"""What tool traffic and texts show: the paths they name (and how each was used) and the
decisive lines of failures and reported errors, for the Files & Context and Errors &
Corrections sections of the offline summarizer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from wm_core._document.paths import references
from wm_core._summary.text import clip

# A listing tool output can name hundreds of files; only the first ones are worth keeping.
MAX_PATHS_PER_TOOL_RESULT: Final = 20
MAX_FAILED_LINES: Final = 5

_EXCEPTION_LINE = re.compile(
    r"^\s*(?:E\s+)?((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failure|Exit|Interrupt)\b.*)$"
)
_SUMMARY_LINE = re.compile(r"^\s*((?:FAILED|ERROR)\b.*)$")
_TOOL_ERROR_LINE = re.compile(
    r"^\s*((?:[\w./-]+: )*(?:error|fatal|panic)(?:\[[\w-]+\])?: .*)$", re.IGNORECASE
)
# An error or correction the agent (or the user) writes down itself: "Error: …", "Correction: …".
_NOTED_ERROR = re.compile(
    r"^\s*(?:[-*]\s+)?((?:error|correction|mistake|wrong assumption)s?\b[^:\n]{0,40}:\s*\S.*)$",
    re.IGNORECASE,
)
_EXIT_LINE = re.compile(r"^\s*(?:exit (?:status|code) \d+|process exited.*)$", re.IGNORECASE)
# Paths the engine's reference finder does not treat as files (home and absolute paths
# without a known extension, such as ~/.local/share/app/data.db or /var/log/syslog).
_EXTRA_PATH = re.compile(
    r"(?<![\w.~/\\:-])(?:~|\.{1,2})?/(?:[\w.@+-]+/)*[\w.@+-]*[A-Za-z][\w.@+-]*"
)
_PATH_TRAILING = ".,;:!?)]}'\"`"


def strings(value: Any) -> Iterator[tuple[str, str]]:
    """(key, string) for every string inside a decoded JSON value."""
    if isinstance(value, str):
        yield "", value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            for inner_key, text in strings(item):
                yield (inner_key or str(key)), text
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def find_paths(text: str) -> list[str]:
    """Paths and URLs in ``text``, in order of appearance, without duplicates."""
    found = references(text)
    for match in _EXTRA_PATH.finditer(text):
        path = match.group().rstrip(_PATH_TRAILING)
        if path.count("/") >= 2 or path.startswith("~/"):
            found.add(path)
    # order by first position so the Files section reads in the order things happened
    return sorted(found, key=lambda p: (text.find(p) if p in text else len(text), p))


@dataclass
class Files:
    order: list[str] = field(default_factory=list)
    uses: dict[str, list[str]] = field(default_factory=dict)

    def add(self, path: str, use: str) -> None:
        if path not in self.uses:
            self.order.append(path)
            self.uses[path] = []
        if use not in self.uses[path]:
            self.uses[path].append(use)

    def items(self) -> list[str]:
        return [f"{path} — {', '.join(self.uses[path])}" for path in self.order]


def failure_lines(content: str) -> list[str]:
    """The decisive lines of a failed tool output: test summaries, else the last exception."""
    lines = content.splitlines()
    summaries = [m.group(1).strip() for line in lines if (m := _SUMMARY_LINE.match(line))]
    if summaries:
        return summaries[:MAX_FAILED_LINES]
    for pattern in (_EXCEPTION_LINE, _TOOL_ERROR_LINE):
        matches = [m.group(1).strip() for line in lines if (m := pattern.match(line))]
        if matches:
            return [matches[-1]]
    meaningful = [line.strip() for line in lines if line.strip() and not _EXIT_LINE.match(line)]
    return [meaningful[-1]] if meaningful else ["(no output)"]


def error_lines(content: str) -> list[str]:
    """Error lines in an output or a text that did not fail as a whole."""
    found: list[str] = []
    for line in content.splitlines():
        for pattern in (_SUMMARY_LINE, _EXCEPTION_LINE, _NOTED_ERROR):
            match = pattern.match(line)
            if match:
                found.append(match.group(1).strip())
                break
    return found


_PATH_KEYS: Final = frozenset({"path", "file_path", "filepath", "filename", "file", "target"})
_TOOL_VERBS: Final = (
    (("read", "view", "open", "cat", "show", "get"), "read"),
    (("write", "create", "new"), "written"),
    (("edit", "replace", "patch", "update", "insert", "modify"), "edited"),
    (("delete", "remove", "rm"), "deleted"),
)


def use_label(tool: str, key: str) -> str:
    """How a path in a tool input was used: "read", "edited", … or "in <tool> command"."""
    if key.lower() in _PATH_KEYS:
        lowered = tool.lower()
        for verbs, label in _TOOL_VERBS:
            if any(verb in lowered for verb in verbs):
                return label
        return f"{tool} target"
    return f"in {tool} {key}" if key else f"in {tool} input"


def call_summary(name: str, input_json: str) -> str:
    try:
        value = json.loads(input_json) if input_json.strip() else {}
    except ValueError:
        return clip(input_json, 120)
    if isinstance(value, Mapping):
        for key in ("command", "cmd", "path", "file_path", "filename", "query", "url"):
            if isinstance(value.get(key), str):
                return clip(value[key], 120)
    return clip(json.dumps(value, ensure_ascii=False), 120) if value else name
