"""A commit's page, and its progress as it happens: server-sent events over WatchCommit.

The page draws every stored event (it is complete without any script); for a commit still
running, ``/static/live.js`` opens an ``EventSource`` on :func:`commit_events`, which re-attaches
to WatchCommit after the last sequence the page (or the browser, through ``Last-Event-ID`` when
it reconnects after a drop) already has, and forwards each event as one SSE message whose id is
its sequence. The stream ends with an ``end`` message after the terminal event, so the browser
does not reconnect to a finished commit.
"""

from __future__ import annotations

import json
from importlib import resources

from aiohttp import web

from wm_client import history
from wm_client.client import WmClient
from wm_client.describe import (
    event_detail,
    is_failure,
    memory_diff_text,
    stage_name,
    state_name,
    when,
)
from wm_client.errors import WmError
from wm_client.names import short_id
from wm_proto.v1 import resources_pb2 as pb
from wm_server.inspector.charts import stage_bars
from wm_server.inspector.layout import escape as _e
from wm_server.inspector.layout import page
from wm_server.inspector.params import query_number, whole_number

_TERMINAL = (pb.COMMIT_STATE_COMPLETED, pb.COMMIT_STATE_FAILED, pb.COMMIT_STATE_SKIPPED)


def event_item(event: pb.CommitEvent, took_ms: int | None) -> str:
    """One event as the list item both the page and the script draw (the script builds the
    same markup from :func:`event_json`)."""
    cls = "failure" if is_failure(event) else ""
    took = f" <small>+{took_ms:,} ms</small>" if took_ms is not None else ""
    return (
        f'<li class="{cls}" data-sequence="{event.sequence}">{_e(stage_name(event.stage))}'
        f"{took} {_e(event_detail(event))}</li>"
    )


def event_json(event: pb.CommitEvent) -> str:
    return json.dumps(
        {
            "sequence": event.sequence,
            "stage": stage_name(event.stage),
            "detail": event_detail(event),
            "state": state_name(event.state),
            "terminal": event.terminal,
            "failure": is_failure(event),
        }
    )


async def commit_page(request: web.Request, client: WmClient) -> str:
    sid, cid = request.match_info["session"], request.match_info["commit"]
    commit = await client.get_commit(sid, cid)
    events = await history.stored_events(client, commit)
    durations = history.stage_durations(commit, events)
    running = commit.state not in _TERMINAL
    items = "".join(event_item(e, d) for e, d in zip(events, durations, strict=True))
    stream = (
        f' data-stream="/sessions/{_e(sid)}/commits/{_e(cid)}/events"'
        f' data-after="{commit.last_sequence}"'
        if running
        else ""
    )
    decisions = "".join(
        f"<li>{_e(d.section)}: {_e(d.guard)} — {_e(d.reason)}</li>" for d in commit.decisions
    )
    memory = (
        f"<p>{_e(memory_diff_text(commit.memory_diff))}</p>"
        if commit.HasField("memory_diff")
        else ""
    )
    took = history.duration_ms(commit)
    facts = (
        "<table id=commit-facts>"
        f"<tr><th>state</th><td id=commit-state>{_e(state_name(commit.state))}</td></tr>"
        f"<tr><th>archive</th><td>{_e(short_id(commit.archive) or '-')}</td></tr>"
        f"<tr><th>archived</th><td>{commit.archived_message_count:,} messages,"
        f" {commit.archived_tokens:,} tokens</td></tr>"
        f"<tr><th>started (UTC)</th><td>{_e(when(commit.create_time))}</td></tr>"
        f"<tr><th>took</th><td>{'-' if took is None else f'{took:,} ms'}</td></tr>"
        f"<tr><th>attempts</th><td>{commit.attempt_count}</td></tr>"
        + (
            f"<tr><th>error</th><td class=failure>{_e(commit.error.message)}</td></tr>"
            if commit.error.message
            else ""
        )
        + "</table>"
    )
    body = (
        f'<h2>commit <span class=mono>{_e(cid)}</span> · <a href="/sessions/{_e(sid)}">'
        f"{_e(sid)}</a></h2>{facts}"
        f"<h3>stage durations</h3>{stage_bars(events, durations)}"
        f"<h3>events{' <small id=live-status>live</small>' if running else ''}</h3>"
        f"<ol id=events{stream}>{items}</ol>"
        f"<h3>guard decisions</h3>{'<ul>' + decisions + '</ul>' if decisions else '<p>none</p>'}"
        f"{'<h3>long-term memories</h3>' + memory if memory else ''}"
    )
    return page(f"commit {cid}", body, live=running)


def _after(request: web.Request) -> int:
    """Where to resume: the browser's ``Last-Event-ID`` (a reconnect) wins over ``?after=``."""
    resumed = request.headers.get("Last-Event-ID", "")
    return whole_number(resumed, "Last-Event-ID") if resumed else query_number(request, "after")


async def commit_events(request: web.Request, client: WmClient) -> web.StreamResponse:
    sid, cid = request.match_info["session"], request.match_info["commit"]
    after = _after(request)
    await client.get_commit(sid, cid)  # an unknown commit is a 404 before the stream opens
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    stream = client.watch_commit(sid, cid, after_sequence=after, heartbeats=True)
    try:
        async for event in stream:
            if event.stage == pb.COMMIT_STAGE_HEARTBEAT:
                await response.write(b": heartbeat\n\n")
                continue
            frame = f"id: {event.sequence}\nevent: commit\ndata: {event_json(event)}\n\n"
            await response.write(frame.encode())
            if event.terminal:
                break
        await response.write(b"event: end\ndata: {}\n\n")
    except WmError as exc:
        message = json.dumps({"message": exc.message})
        await response.write(f"event: failure\ndata: {message}\n\n".encode())
    except (ConnectionResetError, RuntimeError):  # the browser went away
        pass
    finally:
        await stream.aclose()
    return response


async def script(request: web.Request) -> web.Response:
    text = (resources.files("wm_server.inspector") / "live.js").read_text("utf-8")
    return web.Response(text=text, content_type="text/javascript")
