"""Run :class:`support.fake_anthropic.FakeAnthropic` as a process, for tests in other languages.

Why: the TypeScript agent example is tested with the real ``@anthropic-ai/sdk`` against the
same local Messages API the Python tests use. This entry point starts it on loopback with the
replies of a script file, prints its base URL as the first line of stdout, and when stdin
closes writes every request it received (path, headers, JSON body) to a file and exits.

Usage: python tests/support/fake_anthropic_server.py SCRIPT.json REQUESTS.json

The script is a JSON list; each reply is ``{"text": "..."}`` (an answer that ends the turn)
or ``{"tool_use": {"name": "...", "input": {...}}, "text": "..."}`` (a tool call, the text
optional), answered in order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.fake_anthropic import FakeAnthropic, Reply, text_only, tool_use


def reply_of(entry: dict[str, Any]) -> Reply:
    """One scripted reply of the script file."""
    call = entry.get("tool_use")
    if isinstance(call, dict):
        return tool_use(call.get("input", {}), name=str(call["name"]), text=entry.get("text"))
    return text_only(str(entry.get("text", "")))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    script, out = Path(argv[0]), Path(argv[1])
    with FakeAnthropic() as fake:
        fake.enqueue(*(reply_of(entry) for entry in json.loads(script.read_text("utf-8"))))
        print(fake.base_url, flush=True)
        sys.stdin.read()  # until the test closes our stdin
        recorded = [
            {"path": r.path, "headers": dict(r.headers), "body": r.body} for r in fake.requests
        ]
    out.write_text(json.dumps(recorded, indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
