"""The test support's server process is ready only when it is the one listening on its port.

Two tests can both find a port free and give it to their servers; the second cannot bind it.
A connection alone would then reach the first and report the second ready (it happened once
in a full fast tier: the test waited for a server that had exited). Here a plain socket holds
the port given to the server.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from support.server_process import ServerProcess


def test_a_port_another_process_listens_on_is_not_taken_for_the_servers(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        server = ServerProcess(tmp_path, port=port)
        with pytest.raises(RuntimeError, match="cannot listen"):
            server.start(timeout=60)
        assert server.proc is not None and server.proc.poll() is not None


def test_the_server_is_ready_on_its_own_socket(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path).start()
    try:
        assert server._listens_here()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5):
            pass
    finally:
        server.terminate()
    assert not server._listens_here()
