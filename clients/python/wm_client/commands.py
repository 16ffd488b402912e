"""The commands of ``wm``: each fetches through :class:`WmClient`, renders, returns an exit code.

Errors are not handled here: a :class:`WmError` propagates to ``cli.main``, which turns it into
a message and an exit code, the same way for every command.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from rich.console import Console, RenderableType
from rich.markdown import Markdown

from wm_client import render
from wm_client.client import WmClient
from wm_client.jsonl import read_jsonl
from wm_client.progress import CommitProgress
from wm_client.stream import CommitStream
from wm_proto.v1 import resources_pb2 as pb

MAX_BATCH = 1000  # messages per AddMessages call (the contract's limit)
COMMIT_FAILED = 5


class Unreachable(Exception):
    """The channel did not become ready in time: no server at that address."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.address = address


def show(out: Console, renderable: RenderableType) -> None:
    """Print a renderable; off a terminal, without the padding rich adds up to the console
    width, so piped output has no trailing spaces."""
    if out.is_terminal:
        out.print(renderable)
        return
    with out.capture() as captured:
        out.print(renderable)
    for line in captured.get().splitlines():
        print(line.rstrip())


def as_json(message: Message) -> str:
    """A protobuf message as one line of JSON, with the proto field names."""
    value: dict[str, Any] = MessageToDict(message, preserving_proto_field_name=True)
    return json.dumps(value, ensure_ascii=False)


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


async def sessions_show(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    session = await client.get_session(args.session)
    if args.json:
        print(as_json(session))
        return 0
    commits = (await client.list_commits(args.session, page_size=5)).commits
    archives = (await client.list_archives(args.session, page_size=1000)).archives
    show(out, render.session_details(session, commits, archives))
    return 0


async def sessions_delete(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    await client.get_session(args.session)  # a clear NOT_FOUND before deleting
    await client.delete_session(args.session)
    out.print(f"deleted session {args.session}", markup=False)
    return 0


# --- messages and commits -------------------------------------------------------------------------
async def add(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    """Add a JSONL file in batches of 1000 (each batch atomic; ids make a re-run safe)."""
    messages = read_jsonl(sys.stdin if args.file == "-" else args.file)
    if not messages:
        raise ValueError(f"{args.file}: no messages")
    added = duplicates = 0
    reply = None
    for start in range(0, len(messages), MAX_BATCH):
        reply = await client.add_messages(
            args.session,
            messages[start : start + MAX_BATCH],
            create_session_if_missing=not args.no_create,
        )
        added += len(reply.added_message_ids)
        duplicates += len(reply.duplicate_message_ids)
    assert reply is not None
    created = " (session created)" if reply.session_created else ""
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
            f"commit {c.commit_id} completed: working memory v{c.working_memory_version},"
            f" {c.archived_message_count} message(s) archived into {c.archive_id},"
            f" {len(c.decisions)} guard decision(s); tokens: {render.commit_usage(c.token_usage)}"
        )
    if terminal.stage == pb.COMMIT_STAGE_FAILED:
        c = terminal.failed
        return (
            f"commit {c.commit_id} FAILED after {c.attempt_count} attempt(s):"
            f" {c.error.message or 'unknown error'}; the previous working memory stays current"
        )
    return f"commit {terminal.commit_id} skipped: {terminal.phase1.message}"


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
            f"commit {first.commit_id}: {first.phase1.message};"
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
        max_hits=args.max_hits,
        all_sessions=args.all,
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
        include_anthropic_json=args.json,
    )
    if args.json:
        print(as_json(result))
        return 0
    show(out, render.assembled_context(result, args.budget))
    if result.system_prompt_addition:
        out.print("[bold]system prompt addition:[/bold]")
        show(out, Markdown(result.system_prompt_addition))
    return 0
