"""The tenant's overview and the recall playground.

The overview reads the tenant's sessions and the commits of the most recently active ones
(at most :data:`SESSIONS_READ`, newest activity first: the page says when it read fewer than
exist), and draws commits and failures per day. The recall playground runs the same ranked
searches an agent's recall tools run (SearchArchives over a session or an owner's sessions,
SearchMemories over an owner's memories) and shows each hit's score, so a person can see why
a hit came first, and which did not make the cut.
"""

from __future__ import annotations

import datetime
from collections import Counter
from urllib.parse import urlencode

from aiohttp import web

from wm_client import history
from wm_client.client import WmClient
from wm_client.names import owner_name, session_id, short_id
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_server.inspector.charts import daily_bars
from wm_server.inspector.layout import escape as _e
from wm_server.inspector.layout import page
from wm_server.inspector.memories import type_name
from wm_server.inspector.params import query_choice, query_fraction

# Sessions whose commits the overview reads (the most recently active first).
SESSIONS_READ = 200
# Days the overview draws, ending today (UTC).
DAYS = 30
# Hits the playground asks for (the API's maximum for both searches).
PLAYGROUND_HITS = 50


def _day(stamp: object) -> str:
    seconds = getattr(stamp, "seconds", 0)
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).date().isoformat()


async def overview_page(request: web.Request, client: WmClient) -> str:
    sessions = [s async for s in client.iter_sessions(page_size=1000)]
    sessions.sort(key=lambda s: (s.update_time.seconds, s.update_time.nanos), reverse=True)
    read = sessions[:SESSIONS_READ]
    per_day: Counter[str] = Counter()
    failed_per_day: Counter[str] = Counter()
    failing: list[tuple[str, pb.Commit]] = []
    for session in read:
        for commit in await history.all_commits(client, session.name):
            if not commit.archive:
                continue
            day = _day(commit.create_time)
            per_day[day] += 1
            if commit.state == pb.COMMIT_STATE_FAILED:
                failed_per_day[day] += 1
                failing.append((short_id(session.name), commit))
    today = datetime.datetime.now(datetime.UTC).date()
    days = [(today - datetime.timedelta(days=n)).isoformat() for n in range(DAYS - 1, -1, -1)]
    bars = daily_bars(
        [(d, per_day[d], failed_per_day[d]) for d in days], element_id="commits-per-day"
    )
    users = Counter(s.user_id for s in sessions if s.user_id)
    agents = Counter(s.agent_id for s in sessions if s.agent_id)
    owners = "".join(
        f'<li><a href="/memories?{urlencode({kind: name})}">{kind} {_e(name)}</a>'
        f" — {count} session(s)</li>"
        for kind, counted in (("user", users), ("agent", agents))
        for name, count in sorted(counted.items())
    )
    failures = "".join(
        f'<li><a href="/sessions/{_e(sid)}/commits/{_e(short_id(c.name))}">{_e(sid)} ·'
        f" {_e(short_id(c.name))}</a> — {_e(c.error.message)}</li>"
        for sid, c in failing[:50]
    )
    partial = (
        f"<p>commits read for the {SESSIONS_READ} most recently active of {len(sessions):,}"
        " sessions.</p>"
        if len(sessions) > SESSIONS_READ
        else ""
    )
    facts = (
        "<table id=overview-facts>"
        f"<tr><th>sessions</th><td>{len(sessions):,}</td></tr>"
        f"<tr><th>live messages</th><td>{sum(s.message_count for s in sessions):,}</td></tr>"
        f"<tr><th>all messages</th><td>{sum(s.total_message_count for s in sessions):,}</td></tr>"
        f"<tr><th>commits (last {DAYS} days)</th><td>{sum(per_day[d] for d in days):,}</td></tr>"
        f"<tr><th>failed commits (all read)</th><td>{len(failing):,}</td></tr></table>"
    )
    body = (
        f"<h2>overview</h2>{facts}{partial}<h3>commits per day (failures in red)</h3>{bars}"
        f"<h3>failed commits</h3>{'<ul id=failures>' + failures + '</ul>' if failures else '<p>none</p>'}"
        f"<h3>memory owners</h3>{'<ul id=owners>' + owners + '</ul>' if owners else '<p>none</p>'}"
    )
    return page("overview", body)


_SCORE_HEADER = "<th>#</th><th>fused</th><th>lexical</th><th>semantic</th>"


def _scores(rank: int, hit: api.SearchHit | api.MemoryHit) -> str:
    """A hit's rank, fused score and the part each signal gave it."""
    return (
        f"<td class=n>{rank}</td><td class='n fused'>{hit.score:.4f}</td>"
        f"<td class='n lexical'>{hit.lexical_score:.4f}</td>"
        f"<td class='n dense'>{hit.dense_score:.4f}</td>"
    )


def _semantic(state: int, unembedded: int) -> str:
    name = api.SemanticRecall.Name(state).removeprefix("SEMANTIC_RECALL_").lower()  # type: ignore[arg-type]
    extra = f" ({unembedded:,} rows not embedded yet: lexical only)" if unembedded else ""
    return f"Semantic recall: <span id=semantic>{_e(name)}</span>{extra}."


async def recall_page(request: web.Request, client: WmClient) -> str:
    query = request.query.get("q", "").strip()
    scope = query_choice(request, "scope", ("archives", "memories"), "archives")
    who = {k: request.query.get(k, "").strip() for k in ("session", "user", "agent")}
    form = (
        '<form method="get" action="/recall" id=recall-form>'
        f'<input name="q" placeholder="ask the past" size="50" value="{_e(query)}"> '
        f'<select name="scope"><option value="archives"{" selected" if scope == "archives" else ""}>'
        f'archives</option><option value="memories"{" selected" if scope == "memories" else ""}>'
        "memories</option></select> "
        + "".join(
            f'<input name="{k}" placeholder="{k} id" value="{_e(v)}"> ' for k, v in who.items()
        )
        + f'<input name="min_score" placeholder="min score (0-1)" size="12"'
        f' value="{_e(request.query.get("min_score", ""))}"> ' + "<button>recall</button></form>"
        "<p>Archives: a session, or every session of a user or agent. Memories: an owner's"
        " (a user, an agent, or a session's owner).</p>"
    )
    if not query:
        return page("recall", f"<h2>recall playground</h2>{form}")
    if not any(who.values()):
        raise web.HTTPBadRequest(text="name a session, a user or an agent")
    min_score = query_fraction(request, "min_score")
    if scope == "archives":
        answer = await client.search_archives(
            query,
            session_id=who["session"],
            user_id=who["user"],
            agent_id=who["agent"],
            all_sessions=not who["session"],
            hybrid=True,
            min_score=min_score,
            page_size=PLAYGROUND_HITS,
        )
        rows = "".join(
            f"<tr class=hit>{_scores(rank, hit)}"
            f'<td><a href="/sessions/{_e(session_id(hit.archive))}#msg-{_e(short_id(hit.message))}">'
            f"{_e(session_id(hit.archive))} · {_e(short_id(hit.archive))} ·"
            f" {_e(short_id(hit.message))}</a></td>"
            f"<td><pre>{_e(hit.snippet)}</pre></td></tr>"
            for rank, hit in enumerate(answer.hits, 1)
        )
        cut = max(answer.total_matches - len(answer.hits), 0)
        header = f"<tr>{_SCORE_HEADER}<th>message</th><th>snippet</th></tr>"
        note = (
            f"<p id=cut>{len(answer.hits)} shown of {answer.total_matches:,} matching messages;"
            f" {cut:,} cut by the hit limit ({PLAYGROUND_HITS})"
            + (f" or scored below min_score {min_score:g}" if min_score else "")
            + f". {_semantic(answer.semantic_recall, answer.unembedded_rows)}</p>"
        )
    else:
        owner = owner_name(user_id=who["user"], agent_id=who["agent"], session=who["session"])
        found = await client.search_memories(query, owner=owner, page_size=PLAYGROUND_HITS)
        kept = [h for h in found.hits if h.score >= min_score]
        rows = "".join(
            f"<tr class=hit>{_scores(rank, hit)}"
            f'<td><a href="/memories/{_e(short_id(hit.memory.name))}">{_e(short_id(hit.memory.name))}</a>'
            f" ({_e(type_name(hit.memory.type))})</td><td>{_e(hit.memory.text)}</td></tr>"
            for rank, hit in enumerate(kept, 1)
        )
        header = f"<tr>{_SCORE_HEADER}<th>memory</th><th>text</th></tr>"
        note = (
            f"<p id=cut>{len(kept)} hit(s); at most {PLAYGROUND_HITS} are asked for"
            + (
                f"; {len(found.hits) - len(kept)} scored below min_score {min_score:g}"
                if min_score
                else ""
            )
            + f". {_semantic(found.semantic_recall, found.unembedded_rows)}</p>"
        )
    table = f"<table id=recall-hits>{header}{rows}</table>" if rows else "<p>no hits</p>"
    return page("recall", f"<h2>recall playground</h2>{form}{note}{table}")
