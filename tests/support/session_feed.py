"""Turns added and committed through the Python client in this process: the data a test sets
up before it looks at something else (the inspector's pages), as `wm add SESSION -` and
`wm commit SESSION --keep 0 --follow` would, without a `wm` process per step (each costs about
0.45 CPU s of imports). The CLI itself is tested in tests/clients."""

from __future__ import annotations

import asyncio

from wm_client import WmClient
from wm_client.jsonl import parse_lines
from wm_proto.v1 import resources_pb2 as pb


def add(address: str, api_key: str, session: str, jsonl: str) -> None:
    """The JSONL lines' messages added to ``session`` (created if missing), ids as the CLI
    gives them."""

    async def run() -> None:
        async with WmClient(address, api_key=api_key) as wm:
            messages = list(parse_lines(jsonl.splitlines()))
            await wm.add_messages(session, messages, create_session_if_missing=True)

    asyncio.run(run())


def commit(address: str, api_key: str, session: str) -> pb.CommitEvent:
    """A commit of every live message, followed to its terminal event, which must not be a
    failure."""

    async def run() -> pb.CommitEvent:
        async with WmClient(address, api_key=api_key) as wm:
            return await wm.commit(session, 0).wait()

    terminal = asyncio.run(run())
    assert terminal.stage != pb.COMMIT_STAGE_FAILED, terminal
    return terminal
