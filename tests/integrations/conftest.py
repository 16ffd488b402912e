"""The client's framework integrations against a real server on loopback (a ``wm-server``
child process with the offline provider) and the real framework packages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from support.server_process import ServerProcess
from wm_client import WmClient


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("integrations")).start()
    yield process
    process.terminate()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[WmClient]:
    async with WmClient(server.address) as wm:
        yield wm
