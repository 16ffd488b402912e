"""The inspector's long-term memory pages: an owner's memories, one memory, forgetting one.

Read through the gRPC API with the caller's key, like every page; forgetting is a DeleteMemory
call under that key (so the tenant and key rules are the API's own, and the call is in the
access log and metrics like any other), made only from a confirmation page's form that carries
a token of :class:`~wm_server.inspector.csrf.FormGuard`. The form's request id is fixed when the
confirmation page is drawn, so a double submit is one delete.
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import parse_qsl, urlencode

from aiohttp import web

from wm_client.client import WmClient
from wm_client.describe import when
from wm_client.names import owner_name, session_id, short_id
from wm_proto.v1 import resources_pb2 as pb
from wm_server.inspector.csrf import FIELD, FormGuard
from wm_server.inspector.layout import escape as _e
from wm_server.inspector.layout import page, presented_key
from wm_server.inspector.params import query_choice

GUARD = web.AppKey("form_guard", FormGuard)
# Memories an owner page lists at most (newest first; the rest: the API or `wm memories`).
LISTED = 1000
_OWNER_KEYS = ("user", "agent", "session")
_STATES = {
    "active": pb.MEMORY_STATE_ACTIVE,
    "superseded": pb.MEMORY_STATE_SUPERSEDED,
    "retired": pb.MEMORY_STATE_RETIRED,
}


def type_name(value: pb.MemoryType.ValueType) -> str:
    return pb.MemoryType.Name(value).removeprefix("MEMORY_TYPE_").lower()


def state_label(value: pb.MemoryState.ValueType) -> str:
    return pb.MemoryState.Name(value).removeprefix("MEMORY_STATE_").lower()


def owner_of(query: web.Request) -> tuple[str, str]:
    """The owner's name from the query string (``user``, ``agent`` or ``session``) and its
    label; 400 when none or several are given."""
    given = [
        (k, query.query[k].strip()) for k in ("user", "agent", "session") if query.query.get(k)
    ]
    if len(given) != 1 or not given[0][1]:
        raise web.HTTPBadRequest(text="name exactly one owner: ?user=, ?agent= or ?session=")
    kind, value = given[0]
    field = {"user": "user_id", "agent": "agent_id", "session": "session"}[kind]
    return owner_name(**{field: value}), f"{kind} {value}"


def owner_link(memory: pb.Memory) -> str:
    query = _owner_query(memory.owner)
    kind, value = next(iter(query.items()), ("owner", memory.owner))
    return f'<a href="/memories?{urlencode(query)}">{kind} {_e(value)}</a>'


def sources_html(memory: pb.Memory) -> str:
    """Where it was learned: each source links to the session page, at its archive and
    messages (the anchors the session page puts on every message)."""
    rows = []
    for source in memory.sources:
        sid = session_id(source.session)
        base = f"/sessions/{_e(sid)}"
        messages = ", ".join(
            f'<a href="{base}#msg-{_e(short_id(m))}" class="mono">{_e(short_id(m))}</a>'
            for m in source.messages
        )
        archive = short_id(source.archive) or "(stored by a call)"
        rows.append(f'<li><a href="{base}">{_e(sid)}</a> {_e(archive)} {messages}</li>')
    return f"<ul class=sources>{''.join(rows)}</ul>" if rows else "<p>no source recorded</p>"


def _validity(memory: pb.Memory) -> str:
    """When the memory held, what replaced it or what it replaced, and when it expires."""
    since = when(memory.valid_from) if memory.HasField("valid_from") else "its recording"
    until = when(memory.valid_until) if memory.HasField("valid_until") else "now"
    parts = [f"from {_e(since)} until {_e(until)}"]
    if memory.superseded_by:
        link = short_id(memory.superseded_by)
        parts.append(f'superseded by <a href="/memories/{_e(link)}" class=mono>{_e(link)}</a>')
    if memory.supersedes:
        older = ", ".join(
            f'<a href="/memories/{_e(m)}" class=mono>{_e(m)}</a>'
            for m in map(short_id, memory.supersedes)
        )
        parts.append(f"replaces {older}")
    if memory.HasField("expire_time"):
        parts.append(f"expires {_e(when(memory.expire_time))}")
    return "; ".join(parts)


async def memories_page(request: web.Request, client: WmClient) -> str:
    owner, label = owner_of(request)
    state_arg = query_choice(request, "state", (*_STATES, "all"), "active")
    states = list(_STATES.values()) if state_arg == "all" else [_STATES[state_arg]]
    memories: list[pb.Memory] = []
    for state in states:
        token = ""
        while len(memories) < LISTED:
            answer = await client.list_memories(
                owner=owner, state=state, page_size=LISTED, page_token=token
            )
            memories.extend(answer.memories)
            token = answer.next_page_token
            if not token:
                break
    rows = "".join(
        f'<tr class="memory state-{_e(state_label(m.state))}">'
        f'<td><a href="/memories/{_e(short_id(m.name))}" class="mono">{_e(short_id(m.name))}</a></td>'
        f"<td>{_e(type_name(m.type))}</td><td>{_e(state_label(m.state))}"
        f"{' — ' + _e(m.retire_reason) if m.retire_reason else ''}</td>"
        f"<td>{_e(m.text)}</td>"
        f"<td>{_e(when(m.event_time)) if m.HasField('event_time') else '-'}</td>"
        f"<td>{_e(when(m.record_time))}</td><td class=n>v{m.version}</td>"
        f"<td class=n>{sum(len(s.messages) for s in m.sources)}</td></tr>"
        for m in memories[:LISTED]
    )
    tabs = " · ".join(
        f"<b>{name}</b>"
        if name == state_arg
        else f'<a href="/memories?{urlencode({**_owner_query(owner), "state": name})}">{name}</a>'
        for name in (*_STATES, "all")
    )
    table = (
        "<table id=memories><tr><th>memory</th><th>type</th><th>state</th><th>text</th>"
        "<th>event time (UTC)</th><th>learned (UTC)</th><th>version</th><th>sources</th></tr>"
        f"{rows}</table>"
        if rows
        else "<p>no memories</p>"
    )
    notice = "<p class=notice>forgotten.</p>" if request.query.get("forgotten") else ""
    return page(
        f"memories of {label}",
        f"<h2>memories of {_e(label)}</h2>{notice}<p>{tabs}</p>{table}",
    )


def _owner_query(owner: str) -> dict[str, str]:
    """The query string of an owner's page (``users/ana`` -> ``{"user": "ana"}``)."""
    kind, _, value = owner.partition("/")
    key = {"users": "user", "agents": "agent", "sessions": "session"}.get(kind)
    return {key: value} if key and value else {}


async def memory_page(request: web.Request, client: WmClient) -> str:
    memory = await client.get_memory(request.match_info["memory"])
    mid = short_id(memory.name)
    fields = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in sorted(memory.fields.items())
    )
    history = "".join(
        f"<tr><td class=n>v{v.version}</td><td>{_e(type_name(v.type))}</td><td>{_e(v.text)}</td>"
        f"<td>{_e(v.reason)}</td><td>{_e(when(v.supersede_time))}</td></tr>"
        for v in memory.history
    )
    facts = (
        "<table id=memory-facts>"
        f"<tr><th>owner</th><td>{owner_link(memory)}</td></tr>"
        f"<tr><th>type</th><td>{_e(type_name(memory.type))}</td></tr>"
        f"<tr><th>state</th><td>{_e(state_label(memory.state))}"
        f"{' — ' + _e(memory.retire_reason) if memory.retire_reason else ''}</td></tr>"
        f"<tr><th>version</th><td>v{memory.version}</td></tr>"
        f"<tr><th>valid</th><td id=validity>{_validity(memory)}</td></tr>"
        f"<tr><th>event time (UTC)</th><td>{_e(when(memory.event_time)) if memory.HasField('event_time') else '-'}</td></tr>"
        f"<tr><th>learned (UTC)</th><td>{_e(when(memory.record_time))}</td></tr>"
        f"<tr><th>changed (UTC)</th><td>{_e(when(memory.update_time))}</td></tr></table>"
    )
    body = (
        f"<h2>memory <span class=mono>{_e(mid)}</span></h2>"
        f"<blockquote id=memory-text>{_e(memory.text)}</blockquote>{facts}"
        f"<h3>fields</h3>{'<table>' + fields + '</table>' if fields else '<p>none</p>'}"
        f"<h3>where it was learned</h3>{sources_html(memory)}"
        "<h3>history (the decisions that shaped it)</h3>"
        + (
            "<table id=memory-history><tr><th>version</th><th>type</th><th>text then</th>"
            f"<th>why it changed</th><th>when (UTC)</th></tr>{history}</table>"
            if history
            else "<p>unchanged since it was learned</p>"
        )
        + "<p>"
        + (
            f'<a class=danger href="/memories/{_e(mid)}/retire">retire…</a> · '
            if memory.state == pb.MEMORY_STATE_ACTIVE
            else ""
        )
        + f'<a class=danger href="/memories/{_e(mid)}/forget">forget…</a></p>'
    )
    return page(f"memory {mid}", body)


def _confirmation(request: web.Request, memory: pb.Memory, action: str, inputs: str) -> str:
    """The form of a confirmation page: posts to this page's own path, with the cross-site
    token of the caller's key for it, a request id fixed now (a double submit is one call),
    and the owner to return to."""
    token = request.app[GUARD].token(presented_key(request), request.path)
    mid = short_id(memory.name)
    return (
        f'<form method="post" action="/memories/{_e(mid)}/{action}">{inputs}'
        f'<input type="hidden" name="{FIELD}" value="{_e(token)}">'
        f'<input type="hidden" name="request_id" value="inspector-{secrets.token_hex(12)}">'
        f'<input type="hidden" name="back" value="{_e(urlencode(_owner_query(memory.owner)))}">'
        f"<button class=danger id=confirm-{action}>{action} it</button> "
        f'<a href="/memories/{_e(mid)}">cancel</a></form>'
    )


async def forget_page(request: web.Request, client: WmClient) -> str:
    """The confirmation page: what will be erased, and the form that erases it."""
    memory = await client.get_memory(request.match_info["memory"])
    mid = short_id(memory.name)
    body = (
        f"<h2>forget memory <span class=mono>{_e(mid)}</span>?</h2>"
        f"<blockquote>{_e(memory.text)}</blockquote>"
        "<p>Its text, history and index entries are erased; this cannot be undone.</p>"
        + _confirmation(request, memory, "forget", "")
    )
    return page("forget a memory", body)


async def retire_page(request: web.Request, client: WmClient) -> str:
    """The confirmation page of retiring: the reason is asked for (never retired silently)."""
    memory = await client.get_memory(request.match_info["memory"])
    mid = short_id(memory.name)
    body = (
        f"<h2>retire memory <span class=mono>{_e(mid)}</span>?</h2>"
        f"<blockquote>{_e(memory.text)}</blockquote>"
        "<p>It stays readable here with your reason, and is no longer recalled.</p>"
        + _confirmation(
            request,
            memory,
            "retire",
            '<p><label>why it no longer holds <input name="reason" required maxlength="500"'
            ' size="60"></label></p>',
        )
    )
    return page("retire a memory", body)


async def forget(request: web.Request, client: WmClient) -> str:
    """POST: check the form, delete (idempotent by the form's request id: a second submit is
    the same delete), go back to the owner's list."""
    form = await _checked_form(request)
    await client.delete_memory(request.match_info["memory"], request_id=_request_id(form))
    back = {k: v for k, v in parse_qsl(str(form.get("back", ""))) if k in _OWNER_KEYS}
    raise web.HTTPSeeOther(f"/memories?{urlencode({**back, 'forgotten': '1'})}")


async def retire(request: web.Request, client: WmClient) -> str:
    """POST: check the form, retire with the reason given, back to the memory's page."""
    form = await _checked_form(request)
    memory_id = request.match_info["memory"]
    reason = str(form.get("reason", ""))
    await client.retire_memory(memory_id, reason, request_id=_request_id(form))
    raise web.HTTPSeeOther(f"/memories/{memory_id}")


async def _checked_form(request: web.Request) -> Any:
    form = await request.post()
    request.app[GUARD].check(request, presented_key(request), str(form.get(FIELD, "")))
    return form


def _request_id(form: Any) -> str | None:
    return str(form.get("request_id", "")) or None
