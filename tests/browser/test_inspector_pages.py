"""The inspector's pages beyond one session's working memory, in a real headless Chromium:
long-term memories (with provenance and forgetting behind a confirmation and a cross-site
token), a running commit's page updating live over server-sent events (and resuming after a
drop), the tenant overview, the recall playground, the readable configuration, the owner and
the pending items, and the pictures.

``INSPECTOR_SCREENSHOTS=docs`` saves the pages as PNGs into that folder (for the README).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from playwright.sync_api import expect

from support import session_feed as feed
from support.providers import SECTION_NAMES
from support.server_process import ServerProcess, free_port
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as rpc

WM = Path(sys.executable).with_name("wm")
KEY = "inspector-pages-" + "7" * 24
AUTH = (("authorization", f"Bearer {KEY}"),)
EVIL = "http://evil.test"
HOSTILE = '</pre><script>document.title="pwned"</script><img src=x onerror="document.title=1">\'"'


def _creation(title: str, *, delay: float = 0.0) -> dict[str, object]:
    bodies = {n: "" for n in SECTION_NAMES} | {
        "Session Title": title,
        "Files & Context": "- app/main.py — entry point",
    }
    answer: dict[str, object] = {"tool_input": bodies}
    if delay:
        answer["delay"] = delay
    return answer


def _keep_all() -> dict[str, object]:
    return {"tool_input": {"sections": {n: {"op": "KEEP"} for n in SECTION_NAMES}}}


def _wm(address: str, *args: str, stdin: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    env.update(WM_ADDRESS=address, WM_API_KEY=KEY, NO_COLOR="1")
    done = subprocess.run(
        [str(WM), *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _turns(prefix: str, n: int) -> str:
    lines = []
    for i in range(n):
        lines.append(json.dumps({"id": f"{prefix}q{i}", "role": "user", "content": f"step {i}"}))
        lines.append(json.dumps({"id": f"{prefix}a{i}", "role": "assistant", "content": "ok"}))
    return "\n".join(lines)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerProcess]]:
    """A server with keys, the inspector, a default config, and: session ``own`` of user
    ``dana`` (one completed commit, two memories learned in it), the second creation answer
    held back 5 s for the live test's commit."""
    data = tmp_path_factory.mktemp("inspector-pages")
    script = data / "script.json"
    script.write_text(
        json.dumps(
            {
                "responses": [
                    _creation("Own work"),
                    _creation("Many commits"),
                    *[_keep_all()] * 6,
                    _creation(HOSTILE),
                    _creation("Client ops"),
                    _creation("Slow one", delay=5.0),
                ]
            }
        )
    )
    port = free_port()
    server = ServerProcess(
        data,
        WM_LLM_PROVIDER="scripted",
        WM_SCRIPTED_RESPONSES=str(script),
        WM_API_KEYS=f"acme:{KEY}",
        WM_INSPECTOR_ADDRESS=f"127.0.0.1:{port}",
        WM_MEMORY_EXTRACTION="false",
        WM_DEFAULT_SESSION_CONFIG=json.dumps({"toolOutputInlineChars": 5000}),
    ).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = rpc.WorkingMemoryServiceStub(channel)
            config = pb.SessionConfig()
            config.auto_commit.pending_token_threshold = 90_000
            stub.CreateSession(
                api.CreateSessionRequest(
                    session_id="own", session=pb.Session(user_id="dana", config=config)
                ),
                metadata=AUTH,
            )
            feed.add(server.address, KEY, "own", _turns("o", 3))
            feed.commit(server.address, KEY, "own")
            for n in range(7):  # session "many": 7 commits, more than a page draws inline
                feed.add(server.address, KEY, "many", _turns(f"m{n}-", 1))
                feed.commit(server.address, KEY, "many")
            hostile = [
                {"id": "h1", "role": "user", "content": HOSTILE},
                {
                    "id": "h2",
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "t1",
                            "name": HOSTILE[:40],
                            "input": {"x": HOSTILE},
                        }
                    ],
                },
                {
                    "id": "h3",
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": HOSTILE}],
                },
            ]
            feed.add(server.address, KEY, "evil", "\n".join(json.dumps(m) for m in hostile))
            feed.commit(server.address, KEY, "evil")
            feed.add(
                server.address,
                KEY,
                "evil",
                json.dumps({"id": "h4", "role": "user", "content": HOSTILE}),
            )
            stub.CreateMemory(
                api.CreateMemoryRequest(
                    owner="sessions/evil",
                    memory=pb.Memory(
                        type=pb.MEMORY_TYPE_ENTITY, text=HOSTILE, fields={"note": HOSTILE}
                    ),
                ),
                metadata=AUTH,
            )
            feed.add(server.address, KEY, "client", _turns("c", 1))
            feed.commit(server.address, KEY, "client")
            stub.ApplyWorkingMemoryOps(  # drops the path: the files guard restores it
                api.ApplyWorkingMemoryOpsRequest(
                    parent="sessions/client",
                    ops=[
                        pb.SectionOp(
                            section="Files & Context",
                            kind=pb.SECTION_OP_KIND_UPDATE,
                            content="- app/other.py — a new file",
                        )
                    ],
                    request_id="apply-1",
                ),
                metadata=AUTH,
            )
            lisbon = stub.CreateMemory(
                api.CreateMemoryRequest(
                    owner="sessions/own",
                    memory=pb.Memory(type=pb.MEMORY_TYPE_PROFILE, text="The user lives in Lisbon"),
                ),
                metadata=AUTH,
            ).memory.name
            stub.CreateMemory(
                api.CreateMemoryRequest(
                    owner="sessions/own",
                    memory=pb.Memory(
                        type=pb.MEMORY_TYPE_PROFILE,
                        text="The user lives in Porto",
                        supersedes=[lisbon],
                    ),
                ),
                metadata=AUTH,
            )
            for text in (
                "The user's name is Dana Whitfield <b>bold</b>",
                "The user prefers tabs over spaces",
                "The user drinks green tea",
            ):
                stub.CreateMemory(
                    api.CreateMemoryRequest(
                        owner="sessions/own",
                        memory=pb.Memory(type=pb.MEMORY_TYPE_PROFILE, text=text),
                    ),
                    metadata=AUTH,
                )
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.terminate()


def _context(browser: object) -> object:
    return browser.new_context(http_credentials={"username": "me", "password": KEY})  # type: ignore[attr-defined]


def _shot(page: object, name: str) -> None:
    folder = os.environ.get("INSPECTOR_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"inspector-{name}.png"), full_page=True)  # type: ignore[attr-defined]


def test_memories_show_owner_provenance_and_escape_their_text(
    site: tuple[str, ServerProcess], browser: object
) -> None:
    base, _ = site
    context = _context(browser)
    page = context.new_page()  # type: ignore[attr-defined]
    page.goto(f"{base}/sessions/own")
    page.click("#owner >> text=user dana")
    rows = page.locator("#memories tr.memory")
    assert rows.count() >= 2
    assert "Dana Whitfield <b>bold</b>" in "".join(rows.all_inner_texts())
    assert page.locator("#memories b").count() == 0  # the text is escaped, not markup
    _shot(page, "memories")
    page.click("text=The user prefers tabs over spaces >> xpath=.. >> a")
    assert "The user prefers tabs over spaces" in page.inner_text("#memory-text")
    assert "profile" in page.inner_text("#memory-facts")
    page.click("ul.sources >> a >> nth=0")  # provenance: back to the session it came from
    assert page.url.endswith("/sessions/own")
    context.close()  # type: ignore[attr-defined]


def test_forgetting_asks_first_then_erases_and_refuses_cross_site_forms(
    site: tuple[str, ServerProcess], browser: object
) -> None:
    base, _ = site
    context = _context(browser)
    page = context.new_page()  # type: ignore[attr-defined]
    page.goto(f"{base}/memories?user=dana")
    page.click("text=The user's name is Dana Whitfield <b>bold</b> >> xpath=.. >> a")
    memory_url = page.url
    memory_id = memory_url.rsplit("/", 1)[1]
    page.click("text=forget…")
    assert "this cannot be undone" in page.inner_text("main")
    token = page.locator("input[name=csrf]").get_attribute("value")
    assert token

    # Cross-site: a page of another site posts the form (the browser adds the inspector's
    # credentials, as it would for a real attack); refused, and nothing is deleted.
    evil = context.new_page()  # type: ignore[attr-defined]
    evil.route(
        f"{EVIL}/**",
        lambda route: route.fulfill(
            content_type="text/html",
            body=(
                f'<form id=f method=post action="{base}/memories/{memory_id}/forget">'
                f'<input name=csrf value="{token}"></form>'
            ),
        ),
    )
    evil.goto(f"{EVIL}/")
    with evil.expect_navigation():
        evil.evaluate("document.getElementById('f').submit()")
    assert "cross-site form refused" in evil.inner_text("body")
    # Same site, but no token or another page's token: refused too.
    assert context.request.post(f"{memory_url}/forget").status == 403  # type: ignore[attr-defined]
    other = context.request.post(  # type: ignore[attr-defined]
        f"{base}/memories/mem_00000000000000000000/forget", form={"csrf": token}
    )
    assert other.status == 403
    assert context.request.get(memory_url).status == 200  # type: ignore[attr-defined]

    _shot(page, "forget")
    page.click("#confirm-forget")
    assert "/memories?user=dana" in page.url and "forgotten." in page.inner_text("main")
    assert "Dana Whitfield" not in page.inner_text("#memories")
    assert context.request.get(memory_url).status == 404  # type: ignore[attr-defined]
    context.close()  # type: ignore[attr-defined]


def test_a_superseded_memory_shows_what_replaced_it_and_when_it_held(
    site: tuple[str, ServerProcess], browser: object
) -> None:
    base, _ = site
    context = _context(browser)
    page = context.new_page()  # type: ignore[attr-defined]
    page.goto(f"{base}/memories?user=dana&state=superseded")
    page.click("text=The user lives in Lisbon >> xpath=.. >> a")
    validity = page.inner_text("#validity")
    assert "superseded by" in validity and "until" in validity and "until now" not in validity
    page.click("#validity a")
    assert "The user lives in Porto" in page.inner_text("#memory-text")
    assert "replaces" in page.inner_text("#validity") and "until now" in page.inner_text(
        "#validity"
    )
    context.close()  # type: ignore[attr-defined]


def test_retiring_asks_for_a_reason_and_keeps_the_memory(
    site: tuple[str, ServerProcess], browser: object
) -> None:
    base, _ = site
    context = _context(browser)
    page = context.new_page()  # type: ignore[attr-defined]
    page.goto(f"{base}/memories?user=dana")
    page.click("text=The user drinks green tea >> xpath=.. >> a")
    memory_url = page.url
    page.click("text=retire…")
    assert "no longer recalled" in page.inner_text("main")
    # No token: refused, nothing changes.
    assert context.request.post(f"{memory_url}/retire", form={"reason": "x"}).status == 403  # type: ignore[attr-defined]
    page.fill("input[name=reason]", "switched to coffee <i>now</i>")
    page.click("#confirm-retire")
    assert page.url == memory_url
    assert "retired — switched to coffee <i>now</i>" in page.inner_text("#memory-facts")
    assert page.locator("text=retire…").count() == 0  # nothing left to retire
    page.goto(f"{base}/memories?user=dana")
    assert "green tea" not in page.inner_text("main")  # active ones by default
    page.goto(f"{base}/memories?user=dana&state=retired")
    assert "switched to coffee" in page.inner_text("#memories")
    page.goto(f"{base}/recall?q=green+tea&scope=memories&user=dana")
    assert "no hits" in page.inner_text("main")  # no longer recalled
    context.close()  # type: ignore[attr-defined]


def test_a_running_commit_updates_live_and_resumes_after_a_drop(
    site: tuple[str, ServerProcess], browser: object
) -> None:
    base, server = site
    _wm(server.address, "add", "slow", "-", stdin=_turns("s", 2))
    started = _wm(server.address, "commit", "slow", "--keep", "0", "--json")  # Phase 1 only
    first = json.loads(started.splitlines()[0])
    commit_id = first["commit"].removeprefix("sessions/slow/commits/")
    context = _context(browser)
    page = context.new_page()  # type: ignore[attr-defined]
    page.goto(f"{base}/sessions/slow/commits/{commit_id}")
    assert page.locator("#events").get_attribute("data-stream")  # still running
    assert "completed" not in page.inner_text("#events")
    # Phase 2 answers after 5 s: the list grows on the page, with no reload.
    expect(page.locator("#events")).to_contain_text("completed", timeout=30_000)
    expect(page.locator("#commit-state")).to_have_text("completed")
    expect(page.locator("#live-status")).to_have_text("finished")
    _shot(page, "commit")
    # A browser that reconnects says what it has (Last-Event-ID): only what follows comes.
    stream = context.request.get(  # type: ignore[attr-defined]
        f"{base}/sessions/slow/commits/{commit_id}/events", headers={"Last-Event-ID": "2"}
    )
    assert stream.headers["content-type"].startswith("text/event-stream")
    ids = [int(line[4:]) for line in stream.text().splitlines() if line.startswith("id: ")]
    assert ids and ids[0] == 3 and ids == sorted(ids)
    assert stream.text().rstrip().endswith("data: {}") and "event: end" in stream.text()
    bad = context.request.get(  # type: ignore[attr-defined]
        f"{base}/sessions/slow/commits/{commit_id}/events", headers={"Last-Event-ID": "x1"}
    )
    assert bad.status == 400
    context.close()  # type: ignore[attr-defined]


def test_session_page_shows_owner_config_sources_pending_and_pictures(
    site: tuple[str, ServerProcess], browser: object
) -> None:
    base, _ = site
    context = _context(browser)
    page = context.new_page()  # type: ignore[attr-defined]
    page.goto(f"{base}/sessions/own")
    config = {
        row[0]: row[1:]
        for row in (
            r.split("\t")
            for r in page.locator("#config tr").all_inner_texts()[1:]  # header skipped
        )
    }
    assert config["auto-commit at pending tokens"] == ["90,000", "set on this session"]
    assert config["tool outputs stored apart above (characters)"] == [
        "5,000",
        "server default (WM_DEFAULT_SESSION_CONFIG)",
    ]
    assert config["long-term memory extraction"][1] == "not set: the server's behaviour"
    assert "off (WM_MEMORY_EXTRACTION=false)" in config["long-term memory extraction"][0]
    assert "none" in page.inner_text("#facts") or "user dana" in page.inner_text("#owner")
    assert page.locator("#tokens-over-time line.commit-mark").count() == 1
    assert page.locator("#tokens-over-time circle.series-working").count() == 1
    assert page.locator("#live .message, .archive .message").count() >= 1
    assert page.locator("[id^=msg-oq0]").count() == 1  # anchors for provenance links
    _shot(page, "session-details")
    page.click("#timeline a >> nth=0")
    assert page.locator("#stage-durations rect.stage-bar").count() >= 3
    context.close()  # type: ignore[attr-defined]


def test_a_long_session_links_its_older_archives_and_commits(
    site: tuple[str, ServerProcess], browser: object
) -> None:
    base, _ = site
    context = _context(browser)
    page = context.new_page()  # type: ignore[attr-defined]
    page.goto(f"{base}/sessions/many")
    assert page.locator("details.archive").count() == 5  # the newest five, inline
    assert page.locator("#timeline details").count() == 5
    assert page.locator("#timeline a:text-is('stages')").count() == 2
    page.click("a[href$='/archives/archive_001']")
    assert page.url.endswith("/sessions/many/archives/archive_001")
    assert "step 0" in page.inner_text("details.archive[open]")
    assert page.locator("[id='msg-m0-q0']").count() == 1
    context.close()  # type: ignore[attr-defined]


def test_hostile_content_stays_text_on_every_page(
    site: tuple[str, ServerProcess], browser: object
) -> None:
    base, _ = site
    context = _context(browser)
    page = context.new_page()  # type: ignore[attr-defined]
    page.goto(f"{base}/memories?session=evil")
    memory = page.locator("#memories a").first.get_attribute("href")
    page.goto(f"{base}/sessions/evil")
    commit = page.locator("#timeline a").first.get_attribute("href")
    quoted = "%3Cscript%3Edocument.title%3D%22pwned%22%3C%2Fscript%3E"
    for path in (
        "/",
        "/overview",
        "/sessions/evil",
        "/sessions/evil/memory?version=1",
        "/sessions/evil/archives/archive_001",
        str(commit),
        "/memories?session=evil",
        str(memory),
        f"{memory}/forget",
        f"/search?q={quoted}",
        f"/recall?q={quoted}&session=evil",
        f"/recall?q={quoted}&scope=memories&session=evil",
    ):
        response = page.goto(f"{base}{path}")
        assert response is not None and response.status == 200, path
        assert page.locator("main script, main img, main [onerror]").count() == 0, path
        assert page.title() != "pwned" and page.title() != "1", path
    # And the text is shown as text where it belongs.
    page.goto(f"{base}{memory}")
    assert 'document.title="pwned"' in page.inner_text("#memory-text")
    context.close()  # type: ignore[attr-defined]


def test_client_applied_ops_show_their_guard_decisions(
    site: tuple[str, ServerProcess], browser: object
) -> None:
    base, _ = site
    context = _context(browser)
    page = context.new_page()  # type: ignore[attr-defined]
    page.goto(f"{base}/sessions/client/memory?version=2")
    decision = page.locator('section[data-section="Files & Context"] .decision').inner_text()
    assert "guard files on Files & Context (client ops (v2))" in decision
    assert "app/main.py" in decision and "restored" in decision
    page.goto(f"{base}/sessions/client/memory?version=2&against=1")
    assert "client ops (v2)" in page.inner_text('section[data-section="Files & Context"]')
    context.close()  # type: ignore[attr-defined]


def test_overview_and_recall_playground(site: tuple[str, ServerProcess], browser: object) -> None:
    base, _ = site
    context = _context(browser)
    page = context.new_page()  # type: ignore[attr-defined]
    page.goto(f"{base}/overview")
    facts = page.inner_text("#overview-facts")
    assert "sessions" in facts
    assert page.locator("#commits-per-day rect.day-commits").count() == 30
    assert "user dana" in page.inner_text("#owners")
    _shot(page, "overview")
    page.goto(f"{base}/recall")
    page.fill("input[name=q]", "step")
    page.fill("input[name=session]", "own")
    page.click("#recall-form button")
    hits = page.locator("#recall-hits tr.hit")
    assert hits.count() >= 1
    rows = [row.split("\t") for row in hits.all_inner_texts()]
    scores = [float(row[1]) for row in rows]
    assert scores == sorted(scores, reverse=True)  # best first, each with its score
    for row in rows:  # the fused score is the sum of the two signals' parts
        assert abs(float(row[1]) - float(row[2]) - float(row[3])) < 2e-4, row
    assert page.locator("#semantic").inner_text() in {"full", "partial", "off", "degraded"}
    page.goto(f"{base}/recall?q=step&session=own&min_score=0.999")
    assert "below min_score 0.999" in page.inner_text("#cut")
    assert context.request.get(f"{base}/recall?q=x&session=own&min_score=2").status == 400  # type: ignore[attr-defined]
    assert "cut by the hit limit" in page.inner_text("#cut")
    page.goto(f"{base}/recall?q=tabs&scope=memories&user=dana")
    assert "tabs over spaces" in page.inner_text("#recall-hits")
    assert context.request.get(f"{base}/recall?q=x&scope=nope").status == 400  # type: ignore[attr-defined]
    assert context.request.get(f"{base}/recall?q=x").status == 400  # type: ignore[attr-defined]
    _shot(page, "recall")
    context.close()  # type: ignore[attr-defined]
