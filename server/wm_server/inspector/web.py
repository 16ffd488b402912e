"""The inspector's HTTP side (aiohttp): pages rendered on the server, no network.

Why it reads through the gRPC API of the server it runs in (over loopback, with the caller's
own key): validation, tenant scoping, paging and the API keys are then enforced in exactly
the place they already are, and the inspector cannot show what an RPC would refuse. Every page
is plain HTML and one stylesheet served from here, so it works offline and needs no build step;
one small script (``live.js``, served from here too) makes a running commit's page update as it
happens, and every page works without it. The one state-changing action, forgetting a memory,
is a POST from a confirmation page whose form carries a cross-site token (``csrf.py``) and runs
as the caller's DeleteMemory. Every answer carries the security headers a browser needs (a
policy allowing the inspector's own stylesheet and script and nothing else).
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import grpc
from aiohttp import web

from wm_client import history
from wm_client.channel import open_channel
from wm_client.client import WmClient
from wm_client.describe import commit_usage, state_name, when
from wm_client.errors import WmError
from wm_client.jsonl import role_name
from wm_client.names import session_id, short_id
from wm_proto.v1 import resources_pb2 as pb
from wm_server.inspector import live, memories, overview
from wm_server.inspector.charts import session_series, tokens_over_time
from wm_server.inspector.config_view import ConfigDefaults, config_table
from wm_server.inspector.csrf import FormGuard
from wm_server.inspector.layout import REALM, page, presented_key
from wm_server.inspector.layout import escape as _e
from wm_server.inspector.params import MAX_VERSION, query_number

Handler = Callable[[web.Request, WmClient], Awaitable[str | web.StreamResponse]]
CONFIG_DEFAULTS = web.AppKey("config_defaults", ConfigDefaults)
_CLIENT = web.AppKey("client_factory", object)


# Newest commits (their stages) and archives (their messages) a session page draws inline;
# the older ones have their own pages.
INLINE = 5
# Live messages a session page shows at most (the rest: wm or the API).
LIVE_SHOWN = 500


# Sent with every answer: nothing loads but the inspector's own stylesheet and script
# (the pages have no script and no inline style), no page may frame the inspector, links out
# carry no referrer, and a browser never sniffs a type other than the one declared.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


@web.middleware
async def security_headers(request: web.Request, handler: Any) -> web.StreamResponse:
    """Add :data:`SECURITY_HEADERS` to every answer, errors (raised ``HTTPException``) too."""
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        exc.headers.update(SECURITY_HEADERS)
        raise
    response.headers.update(SECURITY_HEADERS)
    return response


def _state(state: int) -> str:
    name = state_name(state)
    return f'<span class="state-{_e(name)}">{_e(name)}</span>'


# --- pages ----------------------------------------------------------------------------------------
async def sessions_page(request: web.Request, client: WmClient) -> str:
    query = request.query.get("q", "").strip()
    rows = []
    async for s in client.iter_sessions(page_size=1000):
        sid = short_id(s.name)
        if query and query.lower() not in sid.lower():
            continue
        owner = (s.user_id and f"user {s.user_id}") or (s.agent_id and f"agent {s.agent_id}") or ""
        rows.append(
            f'<tr><td><a href="/sessions/{_e(sid)}">{_e(sid)}</a></td>'
            f'<td class="n">{s.message_count:,}</td><td class="n">{s.total_message_count:,}</td>'
            f'<td class="n">{s.pending_tokens:,}</td><td class="n">{s.live_tokens:,}</td>'
            f'<td class="n">{s.archive_count}</td>'
            f'<td class="n">{"v" + str(s.working_memory_version) if s.working_memory_version else "-"}</td>'
            f"<td>{_e(when(s.update_time))}</td><td>{_e(owner)}</td></tr>"
        )
    table = (
        "<table id=sessions><tr><th>session</th><th>live msgs</th><th>total msgs</th>"
        "<th>pending tok</th><th>live tok</th><th>archives</th><th>WM</th>"
        "<th>last activity (UTC)</th><th>owner</th></tr>" + "".join(rows) + "</table>"
        if rows
        else "<p>no sessions</p>"
    )
    form = (
        '<form method="get" action="/"><input name="q" placeholder="session id" '
        f'value="{_e(query)}"> <button>search</button></form>'
    )
    return page("sessions", f"<h2>{len(rows)} session(s)</h2>{form}{table}")


def plot(commits: list[pb.Commit], versions: dict[int, pb.WorkingMemory]) -> str:
    """Inline SVG: WM tokens after each commit and the pending tokens each commit archived."""
    points = [c for c in reversed(commits) if c.archive]
    if not points:
        return "<p>no commits to plot</p>"
    wm = [
        versions[c.working_memory_version].estimated_tokens
        if c.working_memory_version in versions
        else 0
        for c in points
    ]
    pending = [c.archived_tokens for c in points]
    top = max([*wm, *pending, 1])
    width, height, pad = 640, 200, 30
    step = (width - 2 * pad) / max(len(points) - 1, 1)

    def line(values: list[int], colour: str, name: str) -> str:
        xy = " ".join(
            f"{pad + i * step:.1f},{height - pad - v / top * (height - 2 * pad):.1f}"
            for i, v in enumerate(values)
        )
        dots = "".join(
            f'<circle cx="{pad + i * step:.1f}" cy="{height - pad - v / top * (height - 2 * pad):.1f}" r="3" fill="{colour}"><title>{name} {v:,}</title></circle>'
            for i, v in enumerate(values)
        )
        return f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{xy}" class="{name}"/>{dots}'

    return (
        f'<svg id="plot" width="{width}" height="{height}" role="img" '
        'aria-label="working-memory tokens and pending tokens per commit">'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#aaa"/>'
        f'<text x="{pad}" y="14">max {top:,} tokens</text>'
        f'<text x="{pad}" y="{height - 8}">commit 1 … {len(points)}</text>'
        + line(wm, "#2a6fdb", "wm-tokens")
        + line(pending, "#d6a400", "pending-tokens")
        + f'<text x="{width - 220}" y="14" fill="#2a6fdb">— WM tokens</text>'
        f'<text x="{width - 120}" y="14">— pending tokens</text></svg>'
    )


def _message_html(message: pb.Message) -> str:
    parts = []
    for part in message.parts:
        kind = part.WhichOneof("kind")
        if kind == "text":
            parts.append(f"<pre>{_e(part.text)}</pre>")
        elif kind == "tool_use":
            parts.append(
                f"<pre>tool_use {_e(part.tool_use.name)} {_e(part.tool_use.input_json)}</pre>"
            )
        elif kind == "tool_result":
            flag = " (error)" if part.tool_result.is_error else ""
            size = len(part.tool_result.content)
            parts.append(
                f"<details class=tool-output><summary>tool output{flag}, {size:,} characters"
                f"</summary><pre>{_e(part.tool_result.content)}</pre></details>"
            )
    return (
        f'<div class="message" id="msg-{_e(message.id)}"><b>{_e(role_name(message.role))}</b> '
        f'<span class="mono">{_e(message.id)}</span>{"".join(parts)}</div>'
    )


async def _first_messages(client: WmClient, archive: pb.Archive) -> list[pb.Message]:
    """The first page of an archive's messages (ListMessages with the archive as parent)."""
    return list((await client.list_messages(archive.name)).messages)


def _archive_html(
    archive: pb.Archive, messages_of: list[pb.Message], *, open_: bool = False
) -> str:
    messages = "".join(_message_html(m) for m in messages_of)
    return (
        f"<details class=archive{' open' if open_ else ''}><summary>{_e(short_id(archive.name))} ·"
        f" {_state(archive.state)} · {archive.message_count} messages ·"
        f" {_e(archive.abstract or '')}</summary>{messages}</details>"
    )


async def archive_page(request: web.Request, client: WmClient) -> str:
    sid, aid = request.match_info["session"], request.match_info["archive"]
    full = await client.get_archive(sid, aid)
    return page(
        f"{aid} of {sid}",
        f'<h2>{_e(aid)} · <a href="/sessions/{_e(sid)}">{_e(sid)}</a></h2>'
        + _archive_html(full, await _first_messages(client, full), open_=True),
    )


async def session_page(request: web.Request, client: WmClient) -> str:
    sid = request.match_info["session"]
    session = await client.get_session(sid)
    commits, archives = await asyncio.gather(
        history.all_commits(client, sid), history.all_archives(client, sid)
    )
    # Everything the page needs at once (the calls are independent): the versions, and the
    # stages and messages of the newest commits and archives (older ones have their own page:
    # 50 archives inline cost ~170 ms of a 2,000-message session's page).
    numbers = range(1, session.working_memory_version + 1)
    shown = archives[-INLINE:]
    versions_got, logs, full_archives = await asyncio.gather(
        asyncio.gather(*(client.get_working_memory(sid, version=v) for v in numbers)),
        asyncio.gather(*(history.stored_events(client, c) for c in commits[:INLINE])),
        asyncio.gather(*(_first_messages(client, a) for a in shown)),
    )
    versions = dict(zip(numbers, versions_got, strict=True))
    owner = " ".join(
        f'<a href="/memories?{urlencode({kind: value})}">{kind} {_e(value)}</a>'
        for kind, value in (("user", session.user_id), ("agent", session.agent_id))
        if value
    )
    facts = (
        f"<table id=facts><tr><th>session</th><td>{_e(sid)}</td></tr>"
        f"<tr><th>owner</th><td id=owner>{owner or 'none (the session owns its memories)'}</td></tr>"
        f"<tr><th>live messages</th><td>{session.message_count:,} ({session.live_tokens:,} tokens)</td></tr>"
        f"<tr><th>all messages</th><td>{session.total_message_count:,}</td></tr>"
        f"<tr><th>pending tokens</th><td>{session.pending_tokens:,}</td></tr>"
        f"<tr><th>archives</th><td>{session.archive_count}</td></tr>"
        f"<tr><th>working memory</th><td>{'v' + str(session.working_memory_version) if session.working_memory_version else 'none yet'}</td></tr>"
        f"<tr><th>last activity (UTC)</th><td>{_e(when(session.update_time))}</td></tr></table>"
    )
    pending = await client.get_working_memory(sid) if session.working_memory_version else None
    pending_html = (
        "<table id=pending><tr><th>section</th><th>refused text</th><th>why</th><th>commit</th></tr>"
        + "".join(
            f"<tr><td>{_e(p.section or '(overflow)')}</td><td>{_e(p.text)}</td>"
            f"<td>{_e(p.source)}</td><td class=mono>{_e(short_id(p.commit) or '-')}</td></tr>"
            for p in pending.pending_items
        )
        + "</table>"
        if pending is not None and pending.pending_items
        else "<p>none: the working memory holds everything the guards refused</p>"
    )
    timeline = []
    for index, commit in enumerate(commits):
        cid = short_id(commit.name)
        commit_url = f"/sessions/{_e(sid)}/commits/{_e(cid)}"
        if index < len(logs):
            events = logs[index]
            durations = history.stage_durations(commit, events)
            stages = (
                "<details><summary>stages</summary><ol>"
                + "".join(
                    live.event_item(e, took) for e, took in zip(events, durations, strict=True)
                )
                + "</ol></details>"
            )
        else:
            stages = f'<a href="{commit_url}">stages</a>'
        trigger = pb.CommitTrigger.Name(commit.trigger).removeprefix("COMMIT_TRIGGER_").lower()
        took = history.duration_ms(commit)
        error = (
            f'<div class="failure">error: {_e(commit.error.message)}</div>'
            if commit.error.message
            else ""
        )
        version = commit.working_memory_version
        link = (
            f' <a href="/sessions/{_e(sid)}/memory?version={version}&against={version - 1}">diff v{version - 1}→v{version}</a>'
            if version > 1
            else ""
        )
        timeline.append(
            f'<tr class="commit" id="{_e(cid)}"><td class="mono">'
            f'<a href="{commit_url}">{_e(cid)}</a></td>'
            f"<td>{_e(trigger)}</td><td>{_state(commit.state)}</td><td>{_e(short_id(commit.archive) or '-')}</td>"
            f'<td class="n">{commit.attempt_count}</td>'
            f"<td>{_e(commit_usage(commit.token_usage))}</td>"
            f'<td class="n">{"-" if took is None else f"{took:,} ms"}</td>'
            f"<td>{len(commit.decisions)}{link}</td></tr>"
            f"<tr><td colspan=8>{stages}{error}</td></tr>"
        )
    timeline_html = (
        "<table id=timeline><tr><th>commit</th><th>trigger</th><th>outcome</th><th>archive</th>"
        "<th>attempts</th><th>tokens</th><th>took</th><th>decisions</th></tr>"
        + "".join(timeline)
        + "</table>"
        if timeline
        else "<p>no commits</p>"
    )
    archive_html = []
    older = archives[: len(archives) - len(shown)]
    if older:
        archive_html.append(
            "<p>older archives: "
            + " ".join(
                f'<a href="/sessions/{_e(sid)}/archives/{_e(aid)}">{_e(aid)}</a>'
                for aid in (short_id(a.name) for a in older)
            )
            + "</p>"
        )
    for archive, messages in zip(shown, full_archives, strict=True):
        archive_html.append(_archive_html(archive, messages))
    live_messages: list[pb.Message] = []
    token = ""
    while True:  # a page holds at most 8 MiB: the page itself stays bounded by the session
        page_ = await client.list_messages(sid, page_token=token)
        live_messages.extend(page_.messages)
        token = page_.next_page_token
        if not token or len(live_messages) >= LIVE_SHOWN:
            break
    live_html = (
        f"<div id=live>{''.join(_message_html(m) for m in live_messages[:LIVE_SHOWN])}</div>"
        + (
            f"<p><small>the first {LIVE_SHOWN} shown</small></p>"
            if len(live_messages) > LIVE_SHOWN
            else ""
        )
        if live_messages
        else ""
    )
    marks = [
        (c.create_time.seconds + c.create_time.nanos / 1e9, short_id(c.name))
        for c in commits
        if c.archive
    ]
    memory_links = " ".join(
        f'<a href="/sessions/{_e(sid)}/memory?version={v}">v{v}</a>' for v in versions
    )
    body = (
        f"<h2>session {_e(sid)}</h2>{facts}"
        f"<h2>working memory</h2><p>{memory_links or 'none yet'}</p>"
        f"<h2>pending items</h2>{pending_html}"
        f"<h2>configuration</h2>{config_table(session, request.app[CONFIG_DEFAULTS])}"
        f"<h2>tokens over time</h2>{tokens_over_time(session_series(session, commits, versions), marks)}"
        f"<h2>tokens per commit</h2>{plot(commits, versions)}"
        f"<h2>commit timeline</h2>{timeline_html}"
        f"<h2>archived messages</h2>{''.join(archive_html) or '<p>none</p>'}"
        f"<h2>live messages</h2>{live_html or '<p>none</p>'}"
    )
    return page(f"session {sid}", body)


async def memory_page(request: web.Request, client: WmClient) -> str:
    sid = request.match_info["session"]
    version = query_number(request, "version", MAX_VERSION)
    against = query_number(request, "against", MAX_VERSION)
    memory = await client.get_working_memory(sid, version=version)
    commits = await history.all_commits(client, sid)
    old = await client.get_working_memory(sid, version=against) if against else None
    diffs = {d.name: d for d in history.diff_versions(old, memory, commits)}
    before = {s.name: s.body for s in old.sections} if old is not None else {}
    made = history.decisions_between(commits, memory.version - 1, memory.version, (memory,))
    own = {d.name: [(cid, x) for cid, x in made if x.section == d.name] for d in diffs.values()}
    sections = []
    for section in memory.sections:
        decisions = diffs[section.name].decisions if old is not None else own.get(section.name, [])
        notes = "".join(_decision_html(cid, d) for cid, d in decisions)
        if old is not None and diffs[section.name].changed:
            table = difflib.HtmlDiff(wrapcolumn=70).make_table(
                before.get(section.name, "").splitlines(),
                section.body.splitlines(),
                f"v{old.version}",
                f"v{memory.version}",
            )
            content = table.replace('class="diff"', 'class="diff" rules="groups"', 1)
        else:
            content = f"<pre>{_e(section.body) or '(empty)'}</pre>"
        changed = " (changed)" if old is not None and diffs[section.name].changed else ""
        sections.append(
            f'<section class="wm-section" data-section="{_e(section.name)}">'
            f"<h3>{_e(section.name)}{changed}</h3>{notes}{content}</section>"
        )
    latest = (await client.get_session(sid)).working_memory_version
    options = "".join(
        f'<option value="{v}"{" selected" if v == against else ""}>v{v}</option>'
        for v in range(1, latest + 1)
        if v != memory.version
    )
    form = (
        f'<form method="get"><input type="hidden" name="version" value="{memory.version}">'
        f'compare with <select name="against"><option value="0">(none)</option>{options}</select>'
        " <button>diff</button></form>"
    )
    title = f"working memory v{memory.version}" + (f" against v{old.version}" if old else "")
    return page(
        title,
        f'<h2>{_e(title)} · <a href="/sessions/{_e(sid)}">{_e(sid)}</a></h2>'
        f"<p>{memory.estimated_tokens:,} tokens · from {_e(short_id(memory.archive) or 'client ops')}"
        f" · {_e(when(memory.create_time))} UTC</p>{form}{''.join(sections)}",
    )


def _decision_html(commit_id: str, d: pb.GuardDecision) -> str:
    items = "".join(
        f"<li>{label}: <code>{_e(item)}</code></li>"
        for label, values in (
            ("dropped", d.dropped_items),
            ("restored", d.restored_items),
            ("refused", d.refused_items),
        )
        for item in values
    )
    return (
        f'<div class="decision">guard <b>{_e(d.guard)}</b> on {_e(d.section)} '
        f"({_e(commit_id)}): {_e(d.reason)}<ul>{items}</ul></div>"
    )


async def search_page(request: web.Request, client: WmClient) -> str:
    query = request.query.get("q", "").strip()
    form = (
        '<form method="get" action="/search"><input name="q" placeholder="text in archived '
        f'messages" value="{_e(query)}"> <button>search</button></form>'
    )
    if not query:
        return page("search", f"<h2>search archives</h2>{form}")
    result = await client.search_archives(query, all_sessions=True, page_size=50)
    hits = "".join(
        f'<div class="hit"><a href="/sessions/{_e(session_id(h.archive))}">{_e(session_id(h.archive))}</a> '
        f"{_e(short_id(h.archive))} {_e(short_id(h.message))} ({_e(role_name(h.role))})<pre>{_e(h.snippet)}</pre></div>"
        for h in result.hits
    )
    return page(
        "search",
        f"<h2>search archives</h2>{form}<p>{len(result.hits)} hit(s) of {result.total_matches}"
        f" matching message(s)</p>{hits}",
    )


# --- the server -----------------------------------------------------------------------------------
_STATUS = {
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
}


@dataclass
class Inspector:
    """The running inspector: its HTTP runner and its channel to the gRPC server."""

    runner: web.AppRunner
    channel: grpc.aio.Channel
    port: int

    async def stop(self) -> None:
        await self.runner.cleanup()
        await self.channel.close()


def _route(handler: Handler, channel: grpc.aio.Channel, keys_required: bool) -> Any:
    async def serve(request: web.Request) -> web.StreamResponse:
        key = presented_key(request)
        if keys_required and key is None:
            raise web.HTTPUnauthorized(
                text="an API key is required (give it as the password)",
                headers={"WWW-Authenticate": REALM},
            )
        client = WmClient(channel=channel, api_key=key)
        try:
            answer = await handler(request, client)
        except WmError as exc:
            status = _STATUS.get(exc.code, 500)
            headers = {"WWW-Authenticate": REALM} if status == 401 else None
            return web.Response(
                status=status,
                text=page("error", f"<h2>{status}</h2><p>{_e(exc.message)}</p>"),
                content_type="text/html",
                headers=headers,
            )
        if isinstance(answer, web.StreamResponse):
            return answer
        return web.Response(text=answer, content_type="text/html")

    return serve


async def _stylesheet(request: web.Request) -> web.Response:
    css = (resources.files("wm_server.inspector") / "inspector.css").read_text("utf-8")
    return web.Response(text=css, content_type="text/css")


async def start_inspector(
    address: str,
    grpc_address: str,
    *,
    keys_required: bool,
    config_defaults: ConfigDefaults | None = None,
) -> Inspector:
    """Serve the inspector on ``address`` (host:port; port 0 picks one), reading from the gRPC
    server at ``grpc_address``; ``config_defaults`` says where a session's settings come from."""
    channel = open_channel(grpc_address)
    app = web.Application(middlewares=[security_headers])
    app[CONFIG_DEFAULTS] = config_defaults or ConfigDefaults()
    app[memories.GUARD] = FormGuard()
    for path, handler in (
        ("/", sessions_page),
        ("/overview", overview.overview_page),
        ("/sessions/{session}", session_page),
        ("/sessions/{session}/memory", memory_page),
        ("/sessions/{session}/archives/{archive}", archive_page),
        ("/sessions/{session}/commits/{commit}", live.commit_page),
        ("/sessions/{session}/commits/{commit}/events", live.commit_events),
        ("/memories", memories.memories_page),
        ("/memories/{memory}", memories.memory_page),
        ("/memories/{memory}/forget", memories.forget_page),
        ("/memories/{memory}/retire", memories.retire_page),
        ("/search", search_page),
        ("/recall", overview.recall_page),
    ):
        app.router.add_get(path, _route(handler, channel, keys_required))
    for path, action in (("forget", memories.forget), ("retire", memories.retire)):
        app.router.add_post(f"/memories/{{memory}}/{path}", _route(action, channel, keys_required))
    app.router.add_get("/static/inspector.css", _stylesheet)
    app.router.add_get("/static/live.js", live.script)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = address.rpartition(":")
    site = web.TCPSite(runner, host.strip("[]") or "127.0.0.1", int(port))
    await site.start()
    bound = int(runner.addresses[0][1])  # the port picked when 0 was asked for
    return Inspector(runner, channel, bound)
