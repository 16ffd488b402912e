"""The ready line `make run` prints names every door a person can open: gRPC, the HTTP door
and the inspector, each with the port it really got."""

from __future__ import annotations

import json
import time
from pathlib import Path

from support.server_process import ServerProcess, free_port

HINT = "; try `.venv/bin/wm demo` in a second terminal"


def test_the_ready_line_names_the_grpc_http_and_inspector_addresses(tmp_path: Path) -> None:
    http, inspector = free_port(), free_port()
    server = ServerProcess(
        tmp_path,
        WM_HTTP_ADDRESS=f"127.0.0.1:{http}",
        WM_INSPECTOR_ADDRESS=f"127.0.0.1:{inspector}",
        WM_LOG_FORMAT="json",
    ).start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and HINT not in server.log_path.read_text():
            time.sleep(0.05)
    finally:
        server.terminate()
    lines = server.log_path.read_text().splitlines()
    [ready] = [json.loads(x) for x in lines if HINT in x]
    assert ready["event"] == (
        f"listening on {server.address}; HTTP/JSON on http://127.0.0.1:{http};"
        f" inspector on http://127.0.0.1:{inspector}{HINT}"
    )
    assert ready["http_address"] == f"http://127.0.0.1:{http}"
    assert ready["inspector_address"] == f"http://127.0.0.1:{inspector}"
