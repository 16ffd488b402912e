"""Helpers of the client tests: running the installed `wm`, servers with scripted answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from support.conversation import CODING_SESSION
from support.providers import SECTION_NAMES
from support.server_process import ServerProcess

REPO = Path(__file__).resolve().parents[2]
CONVERSATION = CODING_SESSION
WM = Path(sys.executable).with_name("wm")

Run = Callable[..., subprocess.CompletedProcess[str]]


def run_wm(
    address: str | None, *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``wm`` script; the server is given through WM_ADDRESS, as a user would."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    environment.update(COLUMNS="200", NO_COLOR="1", TERM="dumb")
    if address is not None:
        environment["WM_ADDRESS"] = address
    environment.update(env)
    return subprocess.run(
        [str(WM), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )


def scripted_server(
    data_dir: Path, responses: list[dict[str, object]], **env: str
) -> ServerProcess:
    """A server whose model answers are ``responses``, in order."""
    script = data_dir / "script.json"
    script.write_text(json.dumps({"responses": responses}))
    return ServerProcess(
        data_dir,
        WM_LLM_PROVIDER="scripted",
        WM_SCRIPTED_RESPONSES=str(script),
        WM_PHASE2_RETRY_BASE_DELAY="0.05",
        **env,
    )


def creation_input(**bodies: str) -> dict[str, str]:
    """A creation tool input: one body per section (keys with underscores)."""

    def key(name: str) -> str:
        return name.lower().replace(" & ", "_").replace(" ", "_")

    return {name: bodies.get(key(name), "") for name in SECTION_NAMES}
