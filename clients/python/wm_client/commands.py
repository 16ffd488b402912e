"""The commands of ``wm``: each fetches through :class:`WmClient`, renders, returns an exit code.

Errors are not handled here: a :class:`WmError` propagates to ``cli.main``, which turns it into
a message and an exit code, the same way for every command.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console, RenderableType
from rich.markdown import Markdown

from wm_client import describe, history, names, render
from wm_client.client import WmClient
from wm_client.jsonl import read_jsonl
from wm_client.jsonout import dumps, plain
from wm_client.names import short_id
from wm_client.progress import CommitProgress
from wm_client.stream import CommitStream
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api

MAX_BATCH = 1000  # messages per AddMessages call (the contract's limit)
# Serialized bytes per AddMessages call: under the server's 4 MiB receive limit with room for
# the envelope, so a batch of large messages (each within the message limit) is split in time.
MAX_BATCH_BYTES = 3 * 1024 * 1024
COMMIT_FAILED = 5
PIPE_WIDTH = 4096  # off a terminal nothing is cut or wrapped to fit a window


class Unreachable(Exception):
    """The channel did not become ready in time: no server at that address."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.address = address


class Refused(Exception):
    """The command was not confirmed (``sessions delete`` without ``--yes``): a usage error."""


def show(out: Console, renderable: RenderableType) -> None:
    """Print a renderable. Off a terminal (a pipe, a file) it is laid out on a very wide page,
    so no id is cut and no line is wrapped, and without the padding rich adds up to the page
    width, so no line has trailing spaces."""
    if out.is_terminal:
        out.print(renderable)
        return
    page = Console(
        file=io.StringIO(), width=PIPE_WIDTH, highlight=False, color_system=None, soft_wrap=False
    )
    page.print(renderable)
    text = page.file.getvalue()  # type: ignore[attr-defined]
    for line in text.splitlines():
        print(line.rstrip())


def as_json(message: Message) -> str:
    """A protobuf message as one line of JSON (every field, numbers as numbers)."""
    return dumps(message)


def batches(messages: Sequence[pb.Message]) -> Iterator[Sequence[pb.Message]]:
    """Consecutive batches within the contract's count limit and :data:`MAX_BATCH_BYTES` (a
    message larger than that alone travels alone, and the server judges it)."""
    start = size = 0
    for index, message in enumerate(messages):
        length = message.ByteSize() + 8
        if index > start and (index - start >= MAX_BATCH or size + length > MAX_BATCH_BYTES):
            yield messages[start:index]
            start, size = index, 0
        size += length
    if start < len(messages):
        yield messages[start:]


# --- sessions -------------------------------------------------------------------------------------
async def sessions_list(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    sessions: list[pb.Session] = []
    async for session in client.iter_sessions(page_size=min(max(args.limit, 1), 1000)):
        if len(sessions) >= args.limit:
            break
        sessions.append(session)
    if args.json:
        for session in sessions:
            print(as_json(session))
    elif not sessions:
        out.print("no sessions")
    else:
        show(out, render.sessions_table(sessions))
    return 0


def session_config(text: str) -> pb.SessionConfig:
    """A SessionConfig from its proto JSON (``@path`` reads a file), e.g.
    ``{"autoCommit": {"pendingTokenThreshold": 20000}, "memoryExtraction": false}``."""
    if text.startswith("@"):
        with open(text[1:], encoding="utf-8") as handle:
            text = handle.read()
    try:
        return json_format.Parse(text, pb.SessionConfig())
    except json_format.ParseError as exc:
        raise ValueError(f"--config: not a SessionConfig: {exc}") from None


async def sessions_create(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    config = session_config(args.config) if args.config else None
    session = await client.create_session(
        args.session or "", config=config, user_id=args.user_id, agent_id=args.agent_id
    )
    if args.json:
        print(as_json(session))
    else:
        owner = f" for user {session.user_id}" if session.user_id else ""
        owner = owner or (f" for agent {session.agent_id}" if session.agent_id else "")
        out.print(f"created session {short_id(session.name)}{owner}", markup=False)
    return 0


async def sessions_show(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    session = await client.get_session(args.session)
    if args.json:
        # The human view's content, whole: every commit and every archive, newest first.
        commits = await history.all_commits(client, args.session)
        archives = await history.all_archives(client, args.session)
        print(
            dumps(
                {
                    **plain(session),
                    "commits": [plain(c) for c in commits],
                    "archives": [plain(a) for a in archives],
                }
            )
        )
        return 0
    recent = (await client.list_commits(args.session, page_size=5)).commits
    listed = (await client.list_archives(args.session, page_size=1000)).archives
    show(out, render.session_details(session, recent, listed))
    return 0


def confirm(question: str) -> bool:
    """Ask on the terminal; without one there is nobody to ask, so the answer is no."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


async def sessions_delete(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    session = await client.get_session(args.session)  # a clear NOT_FOUND before asking
    if not args.yes and not confirm(
        f"delete session {args.session} ({session.total_message_count:,} messages,"
        f" {session.archive_count} archives, working memory v{session.working_memory_version})?"
    ):
        raise Refused(f"session {args.session} not deleted: confirm at the prompt, or pass --yes")
    await client.delete_session(args.session)
    out.print(f"deleted session {args.session}", markup=False)
    return 0


# --- messages and commits -------------------------------------------------------------------------
async def add(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    """Add a JSONL file in batches bounded by count and bytes (each batch atomic; ids, given or
    made from the line, make a re-run safe)."""
    messages = read_jsonl(sys.stdin if args.file == "-" else args.file)
    if not messages:
        raise ValueError(f"{args.file}: no messages")
    added = duplicates = 0
    reply = None
    session_created = False
    for batch in batches(messages):
        reply = await client.add_messages(
            args.session, batch, create_session_if_missing=not args.no_create
        )
        added += len(reply.added_message_ids)
        duplicates += len(reply.duplicate_message_ids)
        session_created = session_created or reply.session_created
    assert reply is not None
    created = " (session created)" if session_created else ""
    out.print(
        f"added {added} message(s), {duplicates} duplicate(s) skipped to {args.session}{created};"
        f" {reply.message_count} live, {reply.pending_tokens:,} pending tokens",
        markup=False,
    )
    return 0


async def follow(
    stream: CommitStream, out: Console, *, as_json_lines: bool = False
) -> pb.CommitEvent:
    """Read a commit stream to its terminal event, showing progress as it goes."""
    if as_json_lines:
        async for event in stream:
            print(as_json(event), flush=True)
        return await stream.wait()
    stream.heartbeats = True
    with CommitProgress(out) as progress:
        async for event in stream:
            progress.update(event)
    terminal = await stream.wait()
    out.print(_outcome(terminal), markup=False)
    return terminal


def _outcome(terminal: pb.CommitEvent) -> str:
    if terminal.stage == pb.COMMIT_STAGE_COMPLETED:
        c = terminal.completed
        return (
            f"commit {short_id(c.name)} completed: working memory v{c.working_memory_version},"
            f" {c.archived_message_count} message(s) archived into {short_id(c.archive)},"
            f" {len(c.decisions)} guard decision(s); tokens: {describe.commit_usage(c.token_usage)}"
        )
    if terminal.stage == pb.COMMIT_STAGE_FAILED:
        c = terminal.failed
        return (
            f"commit {short_id(c.name)} FAILED after {c.attempt_count} attempt(s):"
            f" {c.error.message or 'unknown error'}; the previous working memory stays current"
        )
    return f"commit {short_id(terminal.commit)} skipped: {terminal.phase1.message}"


async def commit(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    if args.keep < 0:
        raise ValueError("--keep must not be negative")
    stream = client.commit(args.session, args.keep)
    if args.follow:
        terminal = await follow(stream, out, as_json_lines=args.json)
        return COMMIT_FAILED if terminal.stage == pb.COMMIT_STAGE_FAILED else 0
    first = await stream.phase1()
    await stream.aclose()
    if args.json:
        print(as_json(first))
    elif first.terminal:
        out.print(_outcome(first), markup=False)
    else:
        out.print(
            f"commit {short_id(first.commit)}: {first.phase1.message};"
            " Phase 2 runs in the background (use --follow to watch it)",
            markup=False,
        )
    return 0


# --- working memory, context, search --------------------------------------------------------------
async def memory_show(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    memory = await client.get_working_memory(args.session, version=args.version)
    if args.json:
        print(as_json(memory))
    elif args.raw:
        sys.stdout.write(
            memory.document if memory.document.endswith("\n") else memory.document + "\n"
        )
    else:
        show(out, render.working_memory(memory))
    return 0


async def search(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    result = await client.search_archives(
        args.query,
        session_id=args.session or "",
        archive_id=args.archive,
        page_size=args.max_hits,
        all_sessions=args.all,
        ranked=args.ranked,
        hybrid=args.hybrid,
    )
    if args.json:
        print(as_json(result))
    else:
        show(out, render.search_hits(result, args.query))
    return 0


async def assemble(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    result = await client.assemble_context(
        args.session,
        args.budget,
        system_prompt=args.system_prompt,
        context_format=api.CONTEXT_FORMAT_ANTHROPIC_MESSAGES
        if args.json
        else api.CONTEXT_FORMAT_UNSPECIFIED,
    )
    if args.json:
        print(as_json(result))
        return 0
    show(out, render.assembled_context(result, args.budget))
    if result.system_prompt_addition:
        out.print("[bold]system prompt addition:[/bold]")
        show(out, Markdown(result.system_prompt_addition))
    return 0


# --- commits: list, show, watch, retry; compact ---------------------------------------------------
async def commits_list(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    commits = (await history.all_commits(client, args.session))[: max(args.limit, 0)]
    if args.json:
        for c in commits:
            print(dumps({**plain(c), "duration_ms": history.duration_ms(c)}))
    elif not commits:
        await client.get_session(args.session)  # NOT_FOUND rather than "no commits"
        out.print(f"no commits in {args.session}", markup=False)
    else:
        show(out, render.commits_table(commits))
    return 0


async def _made_diff(
    client: WmClient, session_id: str, version: int, commits: Sequence[pb.Commit]
) -> list[history.SectionDiff]:
    new = await client.get_working_memory(session_id, version=version)
    old = await client.get_working_memory(session_id, version=version - 1) if version > 1 else None
    return history.diff_versions(old, new, commits)


async def commits_show(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    commit = await client.get_commit(args.session, args.commit)
    events = await history.stored_events(client, commit)
    durations = history.stage_durations(commit, events)
    diff = None
    if commit.working_memory_version:
        diff = await _made_diff(client, args.session, commit.working_memory_version, [commit])
    if args.json:
        print(
            dumps(
                {
                    **plain(commit),
                    "duration_ms": history.duration_ms(commit),
                    "events": [
                        {**plain(e), "duration_ms": took}
                        for e, took in zip(events, durations, strict=True)
                    ],
                    "memory_diff": None if diff is None else _diff_json(diff),
                }
            )
        )
    else:
        show(out, render.commit_details(commit, events, durations, diff))
    return COMMIT_FAILED if commit.state == pb.COMMIT_STATE_FAILED else 0


async def commits_watch(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    await client.get_commit(args.session, args.commit)  # NOT_FOUND before streaming
    stream = client.watch_commit(args.session, args.commit, after_sequence=args.after)
    terminal = await follow(stream, out, as_json_lines=args.json)
    return COMMIT_FAILED if terminal.stage == pb.COMMIT_STAGE_FAILED else 0


async def commits_retry(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    commit = await client.retry_commit(args.session, args.commit)
    if not args.follow:
        if args.json:
            print(as_json(commit))
        else:
            out.print(
                f"commit {short_id(commit.name)} queued again ({state_text(commit)});"
                f" watch it with `wm commits watch {args.session} {short_id(commit.name)}"
                f" --after {commit.last_sequence}`",
                markup=False,
            )
        return 0
    stream = client.watch_commit(commit.name, after_sequence=commit.last_sequence)
    terminal = await follow(stream, out, as_json_lines=args.json)
    return COMMIT_FAILED if terminal.stage == pb.COMMIT_STAGE_FAILED else 0


def state_text(commit: pb.Commit) -> str:
    return f"{describe.state_name(commit.state)}, {commit.attempt_count} attempt(s) so far"


async def compact(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    """Archive every live message and follow Phase 2 to its end."""
    before = await client.get_session(args.session)
    terminal = await follow(client.compact(args.session), out, as_json_lines=args.json)
    after = await client.get_session(args.session)
    if not args.json:
        out.print(
            f"live tokens {before.live_tokens:,} → {after.live_tokens:,};"
            f" working memory v{after.working_memory_version or 0}",
            markup=False,
        )
    return COMMIT_FAILED if terminal.stage == pb.COMMIT_STAGE_FAILED else 0


# --- working-memory history and diff --------------------------------------------------------------
def _diff_json(diffs: Sequence[history.SectionDiff]) -> list[dict[str, Any]]:
    return [
        {
            "section": d.name,
            "changed": d.changed,
            "diff": d.lines,
            "decisions": [{"commit_id": cid, **plain(dec)} for cid, dec in d.decisions],
        }
        for d in diffs
    ]


async def memory_history(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    session = await client.get_session(args.session)
    commits = await history.all_commits(client, args.session)
    made_by = {c.working_memory_version: c for c in commits if c.working_memory_version}
    versions = [
        await client.get_working_memory(args.session, version=v)
        for v in range(1, session.working_memory_version + 1)
    ]
    changed: dict[int, list[str]] = {}
    previous: pb.WorkingMemory | None = None
    for memory in versions:
        changed[memory.version] = [
            d.name for d in history.diff_versions(previous, memory) if d.changed
        ]
        previous = memory
    if args.json:
        for memory in versions:
            commit = made_by.get(memory.version)
            print(
                dumps(
                    {
                        "version": memory.version,
                        "estimated_tokens": memory.estimated_tokens,
                        "archive": memory.archive,
                        "commit": commit.name if commit is not None else "",
                        "decision_count": len(
                            commit.decisions if commit is not None else memory.decisions
                        ),
                        "changed_sections": changed[memory.version],
                        "create_time": plain(memory)["create_time"],
                    }
                )
            )
    elif not versions:
        out.print(f"session {args.session} has no working memory yet", markup=False)
    else:
        show(out, render.memory_history(versions, made_by, changed))
    return 0


async def memory_diff(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    if args.old < 1 or (args.new is not None and args.new < 1):
        raise ValueError("versions start at 1")
    old = await client.get_working_memory(args.session, version=args.old)
    new = await client.get_working_memory(args.session, version=args.new or 0)
    commits = await history.all_commits(client, args.session)
    if old.version > new.version:
        old, new = new, old
    diffs = history.diff_versions(old, new, commits)
    if args.json:
        print(
            dumps(
                {
                    "from_version": old.version,
                    "to_version": new.version,
                    "sections": _diff_json(diffs),
                }
            )
        )
        return 0
    out.print(
        f"working memory v{old.version} → v{new.version} · session {args.session}", markup=False
    )
    show(out, render.memory_diff(diffs))
    return 0


# --- long-term memories ---------------------------------------------------------------------------
_TYPES = {
    name.removeprefix("MEMORY_TYPE_").lower(): number
    for name, number in pb.MemoryType.items()
    if number != pb.MEMORY_TYPE_UNSPECIFIED
}
MEMORY_TYPE_NAMES = tuple(_TYPES)


def _owner(args: argparse.Namespace) -> str:
    return names.owner_name(
        user_id=args.user or "", agent_id=args.agent or "", session=args.session or ""
    )


def _type_name(number: int) -> str:
    return next((name for name, value in _TYPES.items() if value == number), "?")


def _memory_line(memory: pb.Memory) -> str:
    state = ""
    if memory.state == pb.MEMORY_STATE_SUPERSEDED:
        state = f" (superseded by {short_id(memory.superseded_by)})"
    elif memory.state != pb.MEMORY_STATE_ACTIVE:
        state = " (retired)"
    return f"{short_id(memory.name)}  [{_type_name(memory.type)}]{state}  {memory.text}"


def _moment(value: str, option: str) -> datetime:
    """An ISO 8601 date or date-time given on the command line (UTC when it names no zone)."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as error:
        raise Refused(f"{option}: not an ISO 8601 date or date-time: {value!r}") from error
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


async def memories_search(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    reply = await client.search_memories(
        args.query, owner=_owner(args), types=[_TYPES[t] for t in args.type], page_size=args.limit,
        include_superseded=args.include_superseded,
    )  # fmt: skip
    if args.json:
        print(as_json(reply))
        return 0
    if not reply.hits:
        out.print(f"no memory matches {args.query!r}", markup=False)
    for hit in reply.hits:
        out.print(f"{hit.score:7.3f}  {_memory_line(hit.memory)}", markup=False)
    return 0


async def memories_list(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    state = pb.MEMORY_STATE_ACTIVE
    if args.retired:
        state = pb.MEMORY_STATE_RETIRED
    elif args.superseded:
        state = pb.MEMORY_STATE_SUPERSEDED
    shown, token = 0, ""
    while shown < args.limit:
        page = await client.list_memories(
            owner=_owner(args), types=[_TYPES[t] for t in args.type], state=state,
            page_size=min(1000, args.limit - shown), page_token=token,
        )  # fmt: skip
        for memory in page.memories:
            if args.json:
                print(as_json(memory))
            else:
                out.print(_memory_line(memory), markup=False)
            shown += 1
        token = page.next_page_token
        if not token:
            break
    return 0


async def memories_show(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    memory = await client.get_memory(args.memory)
    if args.json:
        print(as_json(memory))
        return 0
    out.print(_memory_line(memory), markup=False)
    out.print(f"owner {names.owner_label(memory.owner)}, version {memory.version}", markup=False)
    if memory.supersedes:
        out.print(f"  replaces {' '.join(map(short_id, memory.supersedes))}", markup=False)
    if memory.HasField("valid_until"):
        out.print(f"  held until {describe.when(memory.valid_until)}", markup=False)
    if memory.HasField("expire_time"):
        out.print(f"  expires {describe.when(memory.expire_time)}", markup=False)
    for key, value in sorted(memory.fields.items()):
        out.print(f"  {key}: {value}", markup=False)
    for source in memory.sources:
        where = " ".join(filter(None, [short_id(source.session), short_id(source.archive)]))
        said = " ".join(map(short_id, source.messages))
        out.print(f"  from {where} {said}".rstrip(), markup=False)
    for version in memory.history:
        out.print(f"  v{version.version} ({version.reason}): {version.text}", markup=False)
    return 0


_VERDICTS = {
    pb.MEMORY_OP_VERDICT_ACCEPTED: "keep",
    pb.MEMORY_OP_VERDICT_REFUSED: "refused",
    pb.MEMORY_OP_VERDICT_DEDUPLICATED: "duplicate",
}


async def memories_preview(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    reply = await client.preview_memory_extraction(args.session, archive_ids=args.archive)
    if args.json:
        print(as_json(reply))
        return 0
    for op in reply.ops:
        kind = pb.MemoryOpKind.Name(op.kind).removeprefix("MEMORY_OP_KIND_").lower()
        memory_type = pb.MemoryType.Name(op.type).removeprefix("MEMORY_TYPE_").lower()
        line = f"{_VERDICTS.get(op.verdict, '?'):>9}  {kind} {memory_type}: {op.text}"
        if op.verdict != pb.MEMORY_OP_VERDICT_ACCEPTED:
            line += f"  ({op.verdict_reason})"
        out.print(line, markup=False)
        for old in op.supersedes:
            out.print(f"{'':>11}supersedes {short_id(old.memory)}: {old.text}", markup=False)
    if reply.empty_reason:
        why = pb.MemoryExtractionEmptyReason.Name(reply.empty_reason)
        detail = f": {reply.message}" if reply.message else ""
        out.print(
            f"nothing would be kept from {reply.message_count} messages "
            f"({why.removeprefix('MEMORY_EXTRACTION_EMPTY_REASON_').lower()}{detail})",
            markup=False,
        )
    return 0


async def memories_forget(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    memory = await client.get_memory(args.memory)  # a clear NOT_FOUND before asking
    if not args.yes and not confirm(f"forget {short_id(memory.name)} ({memory.text[:60]!r})?"):
        raise Refused(f"memory {args.memory} not forgotten: confirm at the prompt, or pass --yes")
    await client.delete_memory(args.memory)
    out.print(f"forgot {args.memory}", markup=False)
    return 0


async def memories_add(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    expires = _moment(args.expires, "--expires") if args.expires else None
    reply = await client.create_memory(
        _owner(args), _TYPES[args.memory_type], args.text, supersedes=args.supersedes,
        expire_time=expires,
    )  # fmt: skip
    if args.json:
        print(as_json(reply))
        return 0
    memory = reply.memory
    verb = "already known as" if reply.deduplicated else "stored as"
    out.print(f"{verb} {short_id(memory.name)}", markup=False)
    for old in memory.supersedes:
        out.print(f"  supersedes {short_id(old)}", markup=False)
    return 0


async def memories_expire(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    memory = await client.update_memory(args.memory, expire_time=_moment(args.at, "--at"))
    out.print(f"{short_id(memory.name)} expires {describe.when(memory.expire_time)}", markup=False)
    return 0


async def purge_user(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    if not args.yes and not confirm(
        f"forget user {args.user}: every memory they own and every session of theirs?"
    ):
        raise Refused(f"user {args.user} not forgotten: confirm at the prompt, or pass --yes")
    reply = await client.purge_user_data(args.user)
    if args.json:
        print(as_json(reply))
        return 0
    out.print(
        f"forgot user {args.user}: {reply.purged_memory_count} memories,"
        f" {reply.purged_session_count} sessions",
        markup=False,
    )
    return 0


async def memories_retire(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    memory = await client.retire_memory(args.memory, args.reason)
    out.print(f"retired {short_id(memory.name)}: {memory.retire_reason}", markup=False)
    return 0
