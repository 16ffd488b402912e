"""Log lines for machines off a terminal and for people on one, and the first line a person
sees: where the server listens and what to try."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.server_process import ServerProcess, free_port
from wm_server.telemetry.observability import resolve_format

HINT = "; try `.venv/bin/wm demo` in a second terminal"


def test_auto_means_console_on_a_terminal_and_json_elsewhere() -> None:
    assert resolve_format("auto", terminal=True) == "console"
    assert resolve_format("auto", terminal=False) == "json"
    assert resolve_format("json", terminal=True) == "json"
    assert resolve_format("console", terminal=False) == "console"


def test_off_a_terminal_every_line_is_json_with_the_listening_line(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path).start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and HINT not in server.log_path.read_text():
            time.sleep(0.05)
    finally:
        server.terminate()
    lines = [x for x in server.log_path.read_text().splitlines() if x.strip()]
    events = [json.loads(line) for line in lines]  # every line parses
    [listening] = [e for e in events if HINT in str(e["event"])]
    assert listening["event"] == f"listening on {server.address}{HINT}"
    assert listening["address"] == server.address


def test_console_format_is_readable(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, WM_LOG_FORMAT="console").start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and HINT not in server.log_path.read_text():
            time.sleep(0.05)
    finally:
        server.terminate()
    text = server.log_path.read_text()
    [line] = [x for x in text.splitlines() if HINT in x]
    assert f"listening on {server.address}{HINT}" in line and not line.startswith("{")
    assert "\x1b[" not in text  # no colour codes in a file
    assert not any(x.startswith("{") for x in text.splitlines())


def test_on_a_terminal_lines_are_coloured_console_lines(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WM_", "ANTHROPIC_"))}
    env.update(WM_ADDRESS=f"127.0.0.1:{port}", WM_DATA_DIR=str(tmp_path), WM_LLM_PROVIDER="offline")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "wm_server"], stderr=slave, stdout=slave, env=env
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while HINT.encode() not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                seen += os.read(master, 65536)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        os.close(master)
    text = seen.decode(errors="replace")
    assert f"listening on 127.0.0.1:{port}" in text
    assert "\x1b[" in text  # coloured
    assert not any(line.lstrip().startswith("{") for line in text.splitlines())
