"""The HTTP door for browser pages and hand-written JSON, on a real server: cross-origin calls
for the configured origins only (preflight included), and a malformed JSON body answered
with what is wrong in it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from support.production import settings_for
from support.providers import ProgrammableProvider
from wm_server.app import Application, start_application
from wm_server.config import Settings

PATH = "/wm.v1.WorkingMemoryService/CreateSession"
APP = "https://app.example.com"
PREFLIGHT = {
    "Origin": APP,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type, connect-protocol-version, authorization",
}


async def _start(tmp_path: Path, **overrides: object) -> Application:
    settings = settings_for(tmp_path, http_address="127.0.0.1:0", **overrides)
    return await start_application(settings, provider=ProgrammableProvider())


@pytest.fixture
async def cors_app(tmp_path: Path) -> AsyncIterator[Application]:
    app = await _start(tmp_path, http_cors_origins=f"{APP}, http://localhost:5173")
    yield app
    await app.stop(grace=0.5)


def _base(app: Application) -> str:
    assert app.http is not None
    return f"http://127.0.0.1:{app.http.port}"


async def test_an_allowed_origin_passes_the_preflight_and_reads_the_answer(
    cors_app: Application,
) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.options(_base(cors_app) + PATH, headers=PREFLIGHT) as pre:
            assert pre.status == 204
            assert pre.headers["Access-Control-Allow-Origin"] == APP
            assert pre.headers["Access-Control-Allow-Methods"] == "POST"
            allowed = {h.strip() for h in pre.headers["Access-Control-Allow-Headers"].split(",")}
            assert {"content-type", "connect-protocol-version", "authorization"} <= allowed
        async with http.post(
            _base(cors_app) + PATH, json={"session_id": "web"}, headers={"Origin": APP}
        ) as call:
            assert call.status == 200
            assert call.headers["Access-Control-Allow-Origin"] == APP
            assert "x-request-id" in call.headers["Access-Control-Expose-Headers"]
            assert (await call.json())["name"] == "sessions/web"


async def test_another_origin_is_refused_its_preflight_and_gets_no_header(
    cors_app: Application,
) -> None:
    other = {**PREFLIGHT, "Origin": "https://evil.example"}
    async with aiohttp.ClientSession() as http:
        async with http.options(_base(cors_app) + PATH, headers=other) as pre:
            assert pre.status == 403
            assert "Access-Control-Allow-Origin" not in pre.headers
        async with http.post(
            _base(cors_app) + PATH, json={}, headers={"Origin": "https://evil.example"}
        ) as call:
            assert "Access-Control-Allow-Origin" not in call.headers


async def test_streams_carry_the_header_too(cors_app: Application) -> None:
    """A Connect stream's answer starts before its body: the header is there all the same."""
    envelope = b"\x00\x00\x00\x00\x02{}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            _base(cors_app) + "/wm.v1.WorkingMemoryService/WatchCommit",
            data=envelope,
            headers={"Origin": APP, "content-type": "application/connect+json"},
        ) as call,
    ):
        assert call.status == 200
        assert call.headers["Access-Control-Allow-Origin"] == APP
        assert b"invalid_argument" in await call.read()


async def test_cors_is_off_by_default(tmp_path: Path) -> None:
    app = await _start(tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.options(_base(app) + PATH, headers=PREFLIGHT) as pre:
                assert pre.status == 405  # no preflight handling: a Connect call is a POST
                assert "Access-Control-Allow-Origin" not in pre.headers
            async with http.post(_base(app) + PATH, json={}, headers={"Origin": APP}) as call:
                assert call.status == 200
                assert "Access-Control-Allow-Origin" not in call.headers
    finally:
        await app.stop(grace=0.5)


def test_a_malformed_origin_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an origin"):
        Settings(data_dir=tmp_path, http_cors_origins="app.example.com")


async def test_a_malformed_json_body_says_what_is_wrong(cors_app: Application) -> None:
    url = _base(cors_app) + "/wm.v1.WorkingMemoryService/AssembleContext"
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=b'{"name": ', headers=headers) as broken:
            assert broken.status == 400
            body = await broken.json()
        assert body["code"] == "invalid_argument"
        assert "not this method's request message in JSON" in body["message"]
        assert "Failed to load JSON" in body["message"]
        assert "protobuf" not in body["message"]
        wrong = b'{"name": "sessions/s", "token_budget": "lots"}'
        async with http.post(url, data=wrong, headers=headers) as typed:
            assert typed.status == 400
            message = (await typed.json())["message"]
        assert "tokenBudget" in message or "token_budget" in message
        async with http.post(
            url, data=b"\xff\xff", headers={"content-type": "application/proto"}
        ) as binary:  # binary bytes keep the one fixed message
            assert "not the protobuf message" in (await binary.json())["message"]
