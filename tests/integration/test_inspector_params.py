"""Every query parameter of the inspector a page cannot use answers 400 naming it, never 500.

A real server with its inspector on loopback, read over HTTP. Numbers past what Python's int()
converts (4,300 digits) answered 500 before they were checked by length first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from integration.conftest import make_settings

from wm_server.app import start_application
from wm_server.inspector.params import MAX_INT64, MAX_VERSION

HUGE = "9" * 5_000  # fits a request line; more digits than int() converts

BAD = [
    ("/sessions/s/memory?version=" + HUGE, "version"),
    ("/sessions/s/memory?against=" + "1" * 4_400, "against"),
    (f"/sessions/s/memory?version={MAX_INT64 + 1}", "version"),
    (f"/sessions/s/memory?version={MAX_VERSION + 1}", "version"),  # more than a name spells
    (f"/sessions/s/memory?against={MAX_VERSION + 1}", "against"),
    ("/sessions/s/memory?against=-1", "against"),
    ("/sessions/s/memory?version=1e3", "version"),
    ("/sessions/s/memory?version=%D9%A3", "version"),  # an Arabic-Indic digit
    ("/sessions/s/commits/c/events?after=" + HUGE, "after"),
    ("/sessions/s/commits/c/events?after=-1", "after"),
    (f"/sessions/s/commits/c/events?after={MAX_INT64 + 1}", "after"),
    ("/recall?q=x&session=s&min_score=nan", "min_score"),
    ("/recall?q=x&session=s&min_score=-0.5", "min_score"),
    ("/recall?q=x&session=s&min_score=" + HUGE, "min_score"),
    ("/recall?q=x&session=s&min_score=abc", "min_score"),
    ("/recall?q=x&session=s&scope=everything", "scope"),
    ("/memories?user=u&state=" + HUGE, "state"),
]


@pytest.fixture
async def inspector(tmp_path: Path) -> AsyncIterator[str]:
    settings = make_settings(tmp_path, inspector_address="127.0.0.1:0")
    app = await start_application(settings)
    assert app.inspector is not None
    yield f"http://127.0.0.1:{app.inspector.port}"
    await app.stop(grace=0.5)


async def test_bad_query_parameters_are_400_naming_the_parameter(inspector: str) -> None:
    async with aiohttp.ClientSession() as http:
        for path, name in BAD:
            async with http.get(inspector + path) as answer:
                text = await answer.text()
                assert answer.status == 400, (path[:80], answer.status, text[:200])
                assert text.startswith(f"{name} must be"), (path[:80], text[:200])
        resumed = {"Last-Event-ID": HUGE}
        async with http.get(f"{inspector}/sessions/s/commits/c/events", headers=resumed) as bad:
            assert bad.status == 400 and (await bad.text()).startswith("Last-Event-ID must be")


async def test_the_largest_numbers_the_api_carries_reach_it(inspector: str) -> None:
    """In range is not the caller's mistake: the API answers (here: nothing of that number)."""
    async with aiohttp.ClientSession() as http:
        for path in (
            f"/sessions/s/memory?version={MAX_VERSION}",  # 18 digits: workingMemories/{version}
            f"/sessions/s/memory?against=000{MAX_VERSION}",  # leading zeros: the same number
            f"/sessions/s/commits/c/events?after={MAX_INT64}",
        ):
            async with http.get(inspector + path) as answer:
                assert answer.status == 404, (path, answer.status, await answer.text())
