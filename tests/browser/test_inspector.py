"""The web inspector in a real headless Chromium (Debian's ``chromium``, driven by Playwright):
pages load from the server alone, a planted change shows in the side-by-side diff, the guard
decision is shown on its section, and API keys are enforced.

``INSPECTOR_SCREENSHOTS=docs`` saves the main pages as PNGs into that folder (for the README).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import session_feed as feed
from support.providers import SECTION_NAMES
from support.server_process import ServerProcess, free_port

KEY = "inspector-key-" + "9" * 24
FILES = "- app/db.py — the schema, do not touch\n- app/cli.py — entry point"
PLANTED = "- app/cli.py — the planted change"


def _keep(**sections: dict[str, str]) -> dict[str, object]:
    return {"tool_input": {"sections": {n: {"op": "KEEP"} for n in SECTION_NAMES} | sections}}


def _creation() -> dict[str, object]:
    bodies = {n: "" for n in SECTION_NAMES} | {
        "Session Title": "Fix the CLI",
        "Files & Context": FILES,
    }
    return {"tool_input": bodies}


def _pair(n: int) -> str:
    return "\n".join(
        json.dumps(m)
        for m in (
            {"id": f"q{n}", "role": "user", "content": f"Fix app/cli.py, step {n}"},
            {
                "id": f"a{n}",
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"t{n}", "name": "bash", "input": {"cmd": "ls"}}
                ],
            },
            {
                "id": f"r{n}",
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{n}", "content": "SECRET-OUTPUT"}
                ],
            },
            {"id": f"d{n}", "role": "assistant", "content": f"Done with step {n}."},
        )
    )


@pytest.fixture(scope="module")
def inspector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerProcess]]:
    """A server with keys and the inspector on, holding one session with two commits: the
    second one's model dropped a path, which the files guard restored."""
    data = tmp_path_factory.mktemp("inspector")
    script = data / "script.json"
    answers = [
        _creation(),
        _keep(**{"Files & Context": {"op": "UPDATE", "content": PLANTED}}),
    ]
    script.write_text(json.dumps({"responses": answers}))
    port = free_port()
    server = ServerProcess(
        data,
        WM_LLM_PROVIDER="scripted",
        WM_SCRIPTED_RESPONSES=str(script),
        WM_API_KEYS=f"acme:{KEY}",
        WM_INSPECTOR_ADDRESS=f"127.0.0.1:{port}",
    ).start()
    try:
        for n in (1, 2):
            feed.add(server.address, KEY, "ins", _pair(n))
            feed.commit(server.address, KEY, "ins")
        feed.add(server.address, KEY, "ins", _pair(3))  # live: not committed
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.terminate()


def _shot(page: object, name: str) -> None:
    folder = os.environ.get("INSPECTOR_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"inspector-{name}.png"), full_page=True)  # type: ignore[attr-defined]


def test_pages_load_show_the_planted_diff_and_the_decision(
    inspector: tuple[str, ServerProcess], browser: object
) -> None:
    base, _ = inspector
    context = browser.new_context(http_credentials={"username": "me", "password": KEY})  # type: ignore[attr-defined]
    requests: list[str] = []
    context.on("request", lambda r: requests.append(r.url))
    page = context.new_page()

    page.goto(f"{base}/")
    assert page.locator("#sessions").inner_text().count("ins") >= 1
    assert "Working Memory inspector" in page.title() or "sessions" in page.title()
    _shot(page, "sessions")
    page.goto(f"{base}/?q=nomatch")
    assert "no sessions" in page.inner_text("main")

    page.goto(f"{base}/sessions/ins")
    timeline = page.locator("#timeline").inner_text()
    assert timeline.count("completed") == 2 and "archive_002" in timeline
    assert page.locator("#plot polyline.wm-tokens").count() == 1
    assert page.locator("#plot polyline.pending-tokens").count() == 1
    output = page.locator("details.tool-output").first
    assert not output.locator("pre").is_visible()  # tool outputs collapsed
    page.locator("details.archive").first.locator(":scope > summary").click()
    output.locator("summary").click()
    assert output.locator("pre").inner_text() == "SECRET-OUTPUT"
    live = page.locator("#live")
    assert "Fix app/cli.py, step 3" in live.inner_text() and "step 1" not in live.inner_text()
    assert not live.locator("details.tool-output pre").first.is_visible()  # collapsed too
    _shot(page, "session")

    page.click("text=diff v1→v2")
    files = page.locator('section[data-section="Files & Context"]')
    assert "(changed)" in files.locator("h3").inner_text()
    diff = files.locator("table.diff").inner_text().replace("\xa0", " ")
    assert "the planted change" in diff and "app/db.py" in diff
    decision = files.locator(".decision").inner_text()
    assert "guard files on Files & Context" in decision and "restored" in decision
    title = page.locator('section[data-section="Session Title"]')
    assert title.locator(".decision").count() == 0
    assert title.locator("table.diff").count() == 0 and "Fix the CLI" in title.inner_text()
    assert page.locator("select[name=against] option").all_inner_texts() == ["(none)", "v1"]
    _shot(page, "diff")

    page.goto(f"{base}/search?q=SECRET-OUTPUT")
    assert "ins" in page.locator(".hit").first.inner_text()
    _shot(page, "search")
    # Nothing was fetched from anywhere but the server itself.
    assert requests and all(url.startswith(base) for url in requests)
    context.close()


def test_keys_are_enforced(inspector: tuple[str, ServerProcess], browser: object) -> None:
    base, _ = inspector
    anonymous = browser.new_context()  # type: ignore[attr-defined]
    refused = anonymous.request.get(f"{base}/sessions/ins")
    assert refused.status == 401 and "Basic" in refused.headers["www-authenticate"]
    assert "SECRET-OUTPUT" not in refused.text()
    page = anonymous.new_page()  # a browser without credentials gets no page at all
    with pytest.raises(Exception, match=r"ERR_INVALID_AUTH_CREDENTIALS|401"):
        page.goto(f"{base}/")
    anonymous.close()
    wrong = browser.new_context(http_credentials={"username": "x", "password": "w" * 30})  # type: ignore[attr-defined]
    denied = wrong.request.get(f"{base}/")
    assert denied.status == 401 and "/sessions/ins" not in denied.text()
    wrong.close()
    other = browser.new_context(  # type: ignore[attr-defined]
        extra_http_headers={"Authorization": f"Bearer {KEY}"}
    )
    page = other.new_page()
    response = page.goto(f"{base}/sessions/ins/memory?version=2")
    assert response is not None and response.status == 200
    assert "working memory v2" in page.inner_text("h2")
    missing = other.request.get(f"{base}/sessions/ghost")
    assert missing.status == 404
    other.close()


SECURITY = {
    "content-security-policy": "default-src 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}


def _secured(headers: dict[str, str]) -> None:
    for name, value in SECURITY.items():
        assert value in headers.get(name, ""), (name, headers)
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    policy = headers["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe" not in policy  # no inline script


def test_every_answer_sends_the_security_headers_and_the_pages_still_render(
    inspector: tuple[str, ServerProcess], browser: object
) -> None:
    base, _ = inspector
    context = browser.new_context(http_credentials={"username": "me", "password": KEY})  # type: ignore[attr-defined]
    console: list[str] = []
    page = context.new_page()
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    for path in (
        "/",
        "/sessions/ins",
        "/sessions/ins/memory?version=2&against=1",
        "/search?q=step",
        "/static/inspector.css",
    ):
        response = page.goto(f"{base}{path}")
        assert response is not None and response.status == 200, path
        _secured(response.headers)
    page.goto(f"{base}/sessions/ins")
    # The stylesheet is applied under the policy (a CSP refusal would leave the default font).
    family = page.evaluate("getComputedStyle(document.body).fontFamily")
    assert family and family != "Times New Roman", family
    assert not [line for line in console if "Content Security Policy" in line], console
    # Errors carry the headers too: 401 without a key, 404 for an unknown session.
    anonymous = browser.new_context()  # type: ignore[attr-defined]
    _secured(anonymous.request.get(f"{base}/").headers)
    anonymous.close()
    _secured(context.request.get(f"{base}/sessions/ghost").headers)
    context.close()


@pytest.mark.parametrize(
    "query",
    [
        "version=99999999999999999999",
        "against=99999999999999999999",
        "version=-1",
        "version=1e3",
        "version=%D9%A3",  # an Arabic-Indic digit: isdigit() but not a version
        "version=abc",
    ],
)
def test_out_of_range_versions_are_400_naming_the_parameter(
    inspector: tuple[str, ServerProcess], browser: object, query: str
) -> None:
    base, _ = inspector
    context = browser.new_context(http_credentials={"username": "me", "password": KEY})  # type: ignore[attr-defined]
    answer = context.request.get(f"{base}/sessions/ins/memory?{query}")
    assert answer.status == 400, (query, answer.status, answer.text())
    assert query.split("=")[0] in answer.text()
    _secured(answer.headers)
    # The largest version a working memory's name spells is not a server error either: the
    # version is unknown; one more digit is the caller's mistake, named.
    top = context.request.get(f"{base}/sessions/ins/memory?version={10**18 - 1}")
    assert top.status == 404, top.text()
    past = context.request.get(f"{base}/sessions/ins/memory?version={2**63 - 1}")
    assert past.status == 400 and "version" in past.text(), past.text()
    context.close()
