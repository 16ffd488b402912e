"""Run the real server as a child process (``python -m wm_server``), for kill and restart tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A ``wm-server`` child on a fixed loopback port, with its log captured to a file."""

    def __init__(
        self, data_dir: Path, port: int | None = None, *, python: str = sys.executable, **env: str
    ) -> None:
        """``python``: the interpreter that runs the server (a benchmark's other checkout)."""
        self.python = python
        self.data_dir = data_dir
        self._chosen = not port  # a port of our choosing may be chosen again (``start``)
        self._use(port or free_port())
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def _use(self, port: int) -> None:
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.log_path = self.data_dir / f"server-{port}.log"

    def start(self, timeout: float = 90.0) -> ServerProcess:
        """Start the server and wait until it accepts connections. The bound is generous: it
        only turns a server that never starts into a failure, and on a loaded CI machine (the
        tiers side by side) importing the server alone has taken over 10 s. A free port can
        be taken between the probe and the server's bind (the other tiers open connections
        meanwhile): one of our choosing is chosen again, up to five times."""
        for attempt in range(1, 6):
            try:
                return self._start(timeout)
            except RuntimeError as error:
                taken = "WM_ADDRESS: cannot listen" in str(error)
                if not (self._chosen and taken) or attempt == 5:
                    raise
                self._use(free_port())
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> ServerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WM_", "ANTHROPIC_"))}
        env.update(
            WM_ADDRESS=self.address,
            WM_DATA_DIR=str(self.data_dir),
            WM_LLM_PROVIDER="offline",
            WM_SHUTDOWN_GRACE_SECONDS="2",
        )
        env.update(self.env)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [self.python, "-m", "wm_server"], env=env, stdout=log, stderr=log
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log_path.read_text()}")
            if self._accepting():
                return self
            time.sleep(0.05)
        raise TimeoutError(f"server did not start:\n{self.log_path.read_text()}")

    def _accepting(self) -> bool:
        """Whether this server accepts connections on its port: one connects, and the socket
        listening there is this process's. Two tests can both find a port free and give it
        to their servers: the second server cannot bind it, but a connection alone would
        reach the first one and take it for the second (seen once: the test then waited for
        a server that had exited)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        return self._listens_here()

    def _listens_here(self) -> bool:
        """Whether one of this process's sockets listens on the port (Linux's /proc: the
        listening sockets of /proc/net/tcp and tcp6 by inode, against the process's open
        sockets); True where /proc cannot tell (another system)."""
        assert self.proc is not None
        try:
            fds = os.listdir(f"/proc/{self.proc.pid}/fd")
            tables = [Path(f"/proc/net/{t}").read_text() for t in ("tcp", "tcp6")]
        except OSError:
            return not Path("/proc/self/fd").exists()  # /proc: the process has gone
        own: set[str] = set()
        for fd in fds:
            with contextlib.suppress(OSError):  # closed meanwhile
                target = os.readlink(f"/proc/{self.proc.pid}/fd/{fd}")
                if target.startswith("socket:["):
                    own.add(target[len("socket:[") : -1])
        for table in tables:
            for row in table.splitlines()[1:]:
                fields = row.split()
                port = int(fields[1].rsplit(":", 1)[1], 16)
                if fields[3] == "0A" and port == self.port and fields[9] in own:  # 0A: LISTEN
                    return True
        return False

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def log_events(self) -> list[dict[str, object]]:
        events: list[dict[str, object]] = []
        if not self.log_path.exists():
            return events
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                events.append(value)
        return events

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: the graceful path."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)
