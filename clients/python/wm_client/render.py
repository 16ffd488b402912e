"""Terminal rendering of the service's resources, with rich.

Why one module: the CLI's commands only fetch and decide; how a session, a working memory, a
commit event or a search hit looks is defined here once, so the progress display, ``memory
show`` and ``demo`` agree. Everything returns rich renderables; nothing prints. The words
themselves (names, times, token counts, an event's detail) come from ``describe``, which the
server's inspector shares without ``rich``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

from wm_client.describe import (
    commit_usage,
    decision_change,
    decision_counts,
    event_detail,
    is_failure,
    message_text,
    stage_name,
    state_name,
    when,
)
from wm_client.jsonl import role_name
from wm_client.names import session_id, short_id
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api


def _row(table: Table, *cells: str | RenderableType) -> None:
    """Add a row whose strings are shown as they are: data from the server (ids, message
    text like "[tool_result ...]") must never be read as rich markup."""
    table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))


# --- sessions -------------------------------------------------------------------------------------
def sessions_table(sessions: Sequence[pb.Session]) -> Table:
    table = Table(title=f"{len(sessions)} session(s)", title_justify="left")
    for header, justify in (
        ("session", "left"),
        ("live msgs", "right"),
        ("total msgs", "right"),
        ("pending tok", "right"),
        ("live tok", "right"),
        ("archives", "right"),
        ("WM version", "right"),
        ("updated (UTC)", "left"),
    ):
        table.add_column(header, justify=justify, no_wrap=header == "session")  # type: ignore[arg-type]
    for s in sessions:
        _row(
            table,
            short_id(s.name),
            f"{s.message_count:,}",
            f"{s.total_message_count:,}",
            f"{s.pending_tokens:,}",
            f"{s.live_tokens:,}",
            str(s.archive_count),
            str(s.working_memory_version or "-"),
            when(s.update_time),
        )
    return table


def session_details(
    session: pb.Session, commits: Sequence[pb.Commit], archives: Sequence[pb.Archive]
) -> RenderableType:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for label, value in (
        ("session", short_id(session.name)),
        ("created (UTC)", when(session.create_time)),
        ("updated (UTC)", when(session.update_time)),
        ("live messages", f"{session.message_count:,} ({session.live_tokens:,} tokens)"),
        ("all messages", f"{session.total_message_count:,}"),
        ("pending tokens", f"{session.pending_tokens:,} (keep window {session.keep_recent_count})"),
        ("archives", str(session.archive_count)),
        (
            "working memory",
            f"v{session.working_memory_version}" if session.working_memory_version else "none yet",
        ),
    ):
        _row(facts, label, value)
    parts: list[RenderableType] = [facts]
    if commits:
        table = Table(title="recent commits", title_justify="left")
        for header in (
            "commit",
            "state",
            "archive",
            "archived",
            "kept",
            "WM",
            "attempts",
            "tokens",
            "created (UTC)",
        ):
            table.add_column(header)
        for c in commits:
            _row(
                table,
                short_id(c.name),
                state_name(c.state),
                short_id(c.archive) or "-",
                str(c.archived_message_count),
                str(c.kept_message_count),
                f"v{c.working_memory_version}" if c.working_memory_version else "-",
                str(c.attempt_count),
                commit_usage(c.token_usage),
                when(c.create_time),
            )
        parts.append(table)
    if archives:
        table = Table(title="archives", title_justify="left")
        for header in ("archive", "state", "messages", "tokens", "abstract"):
            table.add_column(header)
        for a in archives:
            _row(
                table,
                short_id(a.name),
                state_name(a.state),
                str(a.message_count),
                f"{a.estimated_tokens:,}",
                a.abstract or "-",
            )
        parts.append(table)
    return Group(*parts)


# --- working memory -------------------------------------------------------------------------------
def working_memory(memory: pb.WorkingMemory) -> RenderableType:
    """The 7 sections as Markdown under a one-line header."""
    header = Text.assemble(
        ("Working memory ", "bold"),
        (f"v{memory.version}", "bold cyan"),
        f" · session {session_id(memory.name)} · {memory.estimated_tokens:,} tokens",
        f" · from {short_id(memory.archive)}" if memory.archive else " · from client ops",
        f" · {when(memory.create_time)} UTC",
    )
    parts: list[RenderableType] = [header, Text("")]
    for section in memory.sections:
        parts.append(Text(f"## {section.name}", style="bold magenta"))
        body = section.body.strip()
        parts.append(Markdown(body) if body else Text("(empty)", style="dim"))
        parts.append(Text(""))
    if memory.pending_items:
        parts.append(pending_items(memory))
    return Group(*parts)


def pending_items(memory: pb.WorkingMemory) -> RenderableType:
    """What a guard refused and the working memory does not hold yet (latest version)."""
    count = len(memory.pending_items)
    table = Table(
        title=f"Pending items: {count} of at most {memory.pending_item_limit}"
        " (refused, offered to the model in the next update)",
        title_justify="left",
        box=None,
    )
    for column in ("section", "item", "refused by", "commit"):
        table.add_column(column, overflow="fold")
    for item in memory.pending_items:
        table.add_row(
            item.section or "(several)", item.text, item.source, short_id(item.commit) or "-"
        )
    return table


# --- commit events --------------------------------------------------------------------------------
def decision_text(d: pb.GuardDecision) -> Text:
    """One guard intervention on one line (the words of ``describe.decision_summary``, coloured)."""
    text = Text.assemble(("guard ", "yellow"), (d.guard, "bold yellow"), decision_change(d))
    counts = decision_counts(d)
    if counts:
        text.append(f" ({counts})", style="dim")
    return text


def event_line(event: pb.CommitEvent) -> Text:
    """``[  3] llm_request_sent      create call to offline (offline)``."""
    style = "green" if event.stage == pb.COMMIT_STAGE_COMPLETED else ""
    if is_failure(event):
        style = "bold red"
    if event.stage == pb.COMMIT_STAGE_GUARD_DECISION:
        return Text.assemble(f"[{event.sequence:>3}] ", decision_text(event.guard_decision))
    return Text.assemble(
        f"[{event.sequence:>3}] ",
        (f"{stage_name(event.stage):<24}", style or "cyan"),
        event_detail(event),
    )


# --- context and search ---------------------------------------------------------------------------


def assembled_context(result: api.AssembleContextResponse, budget: int) -> RenderableType:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for label, value in (
        ("budget", f"{budget:,} tokens ({result.reply_reserve_tokens:,} reserved for the reply)"),
        ("estimated", f"{result.estimated_tokens:,} tokens"),
        (
            "working memory",
            f"v{result.working_memory_version} ({result.working_memory_tokens:,} tokens)"
            if result.working_memory_version
            else "none",
        ),
        (
            "messages",
            f"{len(result.messages)} (from {result.included_message_count} source messages, {result.dropped_message_count} dropped)",
        ),
        ("uncovered archives", ", ".join(map(short_id, result.uncovered_archives)) or "none"),
        ("trimmed items", str(len(result.trimmed_items))),
        *(
            (
                f"  {api.ContextPart.Name(p.part).removeprefix('CONTEXT_PART_').lower()}",
                f"{p.kept_tokens:,} of {p.needed_tokens:,} tokens"
                + (f", {p.dropped_items} dropped" if p.dropped_items else ""),
            )
            for p in result.parts
        ),
        ("unused", f"{result.usable_tokens - _used(result):,} of {result.usable_tokens:,} tokens"),
    ):
        _row(facts, label, value)
    table = Table(title="context", title_justify="left", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("role")
    table.add_column("tokens", justify="right")
    table.add_column("content", overflow="fold")
    for index, message in enumerate(result.messages, start=1):
        _row(
            table,
            str(index),
            role_name(message.role),
            str(message.estimated_tokens),
            message_text(message),
        )
    return Group(facts, table)


def _used(result: api.AssembleContextResponse) -> int:
    """Tokens of the usable share the parts took (the recalled memories sit in the
    instructions, outside it)."""
    return sum(p.kept_tokens for p in result.parts if p.part != api.CONTEXT_PART_RECALLED_MEMORIES)


def search_hits(result: api.SearchArchivesResponse, query: str) -> RenderableType:
    if not result.hits:
        return Text(f"no match for {query!r}")
    parts: list[RenderableType] = [
        Text(
            f"{len(result.hits)} hit(s) of {result.total_matches} matching message(s) for {query!r}"
        )
    ]
    for hit in result.hits:
        parts.append(
            Text.assemble(
                (
                    f"{session_id(hit.archive)} {short_id(hit.archive)} {short_id(hit.message)}",
                    "bold cyan",
                ),
                f" ({role_name(hit.role)})",
            )
        )
        parts.append(_highlight(hit.snippet, query))
        parts.append(Text(""))
    return Group(*parts)


def _highlight(snippet: str, query: str) -> Text:
    text = Text(snippet)
    text.highlight_words([query], style="bold reverse", case_sensitive=False)
    return text


# --- commits and working-memory history -----------------------------------------------------------
def _ms(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value:,} ms" if value < 10_000 else f"{value / 1000:,.1f} s"


def commits_table(commits: Sequence[pb.Commit]) -> Table:
    """A session's commits, newest first; ids are never cut (the column does not wrap)."""
    from wm_client.history import duration_ms

    table = Table(title=f"{len(commits)} commit(s)", title_justify="left")
    for header in (
        "commit",
        "state",
        "archive",
        "archived",
        "kept",
        "WM",
        "attempts",
        "decisions",
        "tokens",
        "took",
        "created (UTC)",
    ):
        table.add_column(header, no_wrap=header in ("commit", "archive", "created (UTC)"))
    for c in commits:
        _row(
            table,
            short_id(c.name),
            state_name(c.state),
            short_id(c.archive) or "-",
            str(c.archived_message_count),
            str(c.kept_message_count),
            f"v{c.working_memory_version}" if c.working_memory_version else "-",
            str(c.attempt_count),
            str(len(c.decisions)),
            commit_usage(c.token_usage),
            _ms(duration_ms(c)),
            when(c.create_time),
        )
    return table


def commit_details(
    commit: pb.Commit,
    events: Sequence[pb.CommitEvent],
    durations: Sequence[int],
    diff: Sequence[SectionDiffLike] | None,
) -> RenderableType:
    """One commit: its facts, every stored stage with the time it took, the guard decisions,
    the error of a failed commit, and the memory diff it made."""
    from wm_client.history import duration_ms

    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    usage = commit.token_usage
    rows = [
        ("commit", short_id(commit.name)),
        ("session", session_id(commit.name)),
        ("state", state_name(commit.state)),
        ("archive", short_id(commit.archive) or "-"),
        (
            "messages",
            f"{commit.archived_message_count} archived ({commit.archived_tokens:,} tokens),"
            f" {commit.kept_message_count} kept (keep {commit.keep_recent_count})",
        ),
        ("attempts", str(commit.attempt_count)),
        (
            "working memory",
            f"v{commit.working_memory_version}" if commit.working_memory_version else "-",
        ),
        ("model calls", str(usage.llm_calls)),
        ("tokens", f"{usage.input_tokens:,} in / {usage.output_tokens:,} out"),
        (
            "prompt cache",
            f"{usage.cache_read_input_tokens:,} read / {usage.cache_creation_input_tokens:,} written",
        ),
        ("created (UTC)", when(commit.create_time)),
        ("ended (UTC)", when(commit.complete_time)),
        ("took", _ms(duration_ms(commit))),
    ]
    if commit.covered_by_commit:
        rows.append(("covered by", short_id(commit.covered_by_commit)))
    if commit.error.message or commit.error.code:
        rows.append(("error", f"{commit.error.message} (code {commit.error.code})"))
    for label, value in rows:
        _row(facts, label, value)
    parts: list[RenderableType] = [facts]
    if events:
        table = Table(title="stages", title_justify="left")
        for header in ("#", "stage", "took", "detail"):
            table.add_column(header, justify="right" if header in ("#", "took") else "left")
        for event, took in zip(events, durations, strict=True):
            stage = Text(stage_name(event.stage), style="bold red" if is_failure(event) else "")
            _row(table, str(event.sequence), stage, _ms(took), event_detail(event))
        parts.append(table)
    if commit.decisions:
        parts.append(Text(f"guard decisions ({len(commit.decisions)}):", style="bold"))
        parts.extend(decision_text(d) for d in commit.decisions)
    else:
        parts.append(Text("no guard decisions"))
    if diff is not None:
        parts.append(Text(""))
        parts.append(memory_diff(diff))
    return Group(*parts)


class SectionDiffLike(Protocol):
    """What :func:`memory_diff` reads of a section's diff (``history.SectionDiff``)."""

    name: str
    lines: list[str]
    decisions: list[tuple[str, pb.GuardDecision]]


def memory_diff(diffs: Sequence[SectionDiffLike]) -> RenderableType:
    """A unified diff per section (additions green, removals red, hunks cyan: colour shows only
    on a terminal), each followed by the guard decisions that touched the section."""
    parts: list[RenderableType] = []
    unchanged: list[str] = []
    for section in diffs:
        if not section.lines and not section.decisions:
            unchanged.append(section.name)
            continue
        parts.append(Text(f"## {section.name}", style="bold magenta"))
        for line in section.lines:
            style = ""
            if line.startswith("+"):
                style = "green"
            elif line.startswith("-"):
                style = "red"
            elif line.startswith("@@"):
                style = "cyan"
            parts.append(Text(line, style=style))
        if not section.lines:
            parts.append(Text("(unchanged)", style="dim"))
        for commit_id, decision in section.decisions:
            parts.append(Text.assemble(f"  {commit_id}: ", decision_text(decision)))
    if unchanged:
        parts.append(Text(f"unchanged: {', '.join(unchanged)}", style="dim"))
    if not parts:
        parts.append(Text("no difference"))
    return Group(*parts)


def memory_history(
    versions: Sequence[pb.WorkingMemory],
    made_by: dict[int, pb.Commit],
    changed: dict[int, list[str]],
) -> Table:
    """Every working-memory version: its size, where it came from, what it changed."""
    table = Table(title=f"{len(versions)} version(s)", title_justify="left")
    for header in (
        "version",
        "tokens",
        "archive",
        "commit",
        "decisions",
        "changed",
        "stored (UTC)",
    ):
        table.add_column(header, no_wrap=header in ("commit", "archive", "stored (UTC)"))
    for memory in versions:
        commit = made_by.get(memory.version)
        _row(
            table,
            f"v{memory.version}",
            f"{memory.estimated_tokens:,}",
            short_id(memory.archive) or "(client ops)",
            short_id(commit.name) if commit is not None else "-",
            str(len(commit.decisions)) if commit is not None else str(len(memory.decisions)),
            ", ".join(changed.get(memory.version, [])) or "-",
            when(memory.create_time),
        )
    return table
