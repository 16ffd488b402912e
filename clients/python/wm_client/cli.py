"""``wm``: the command line of the Working Memory Service.

Why it exists: to look into a running service (sessions, the working memory, archives), to
feed it a recorded conversation, to watch a commit's Phase 2 and its guard decisions live, and
to show in one command what the product does (``wm demo``).

The server is found through ``--address`` or ``WM_ADDRESS`` (the variable the server listens
on; default 127.0.0.1:50051). Exit codes, for scripts:

====  ==========================================================================================
0     success (a skipped commit, nothing to archive, is a success)
1     any other error the server reported (FAILED_PRECONDITION, INTERNAL, ...)
2     usage: bad command line, unreadable or invalid input file, INVALID_ARGUMENT, a request
      too large for the server, or a deletion not confirmed
3     the server cannot be reached (down, wrong address, UNAVAILABLE, DEADLINE_EXCEEDED)
4     not found: the session, commit, archive or working memory does not exist
5     the commit failed (its Phase 2 ended FAILED; the previous working memory stays current)
6     UNAUTHENTICATED or PERMISSION_DENIED
130   interrupted (Ctrl-C); a commit's Phase 2 goes on on the server
141   the output pipe was closed early (``wm ... | head``), as for a tool killed by SIGPIPE
====  ==========================================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from enum import IntEnum

import grpc
from rich.console import Console

from wm_client import _rules, commands, demo
from wm_client.channel import ADDRESS_VARIABLE, default_address
from wm_client.client import WmClient
from wm_client.errors import WmError
from wm_client.jsonl import JsonlError

API_KEY_VARIABLE = "WM_API_KEY"
_TOO_LARGE = "larger than max"  # gRPC's own refusal of an oversized message


class ExitCode(IntEnum):
    """The exit codes of ``wm`` (see the module docstring)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    UNREACHABLE = 3
    NOT_FOUND = 4
    COMMIT_FAILED = 5
    DENIED = 6
    INTERRUPTED = 130
    BROKEN_PIPE = 141


_CODE_EXIT = {
    grpc.StatusCode.NOT_FOUND: ExitCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT: ExitCode.USAGE,
    grpc.StatusCode.OUT_OF_RANGE: ExitCode.USAGE,
    grpc.StatusCode.UNAVAILABLE: ExitCode.UNREACHABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: ExitCode.UNREACHABLE,
    grpc.StatusCode.UNAUTHENTICATED: ExitCode.DENIED,
    grpc.StatusCode.PERMISSION_DENIED: ExitCode.DENIED,
}


def _common_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Connection options, accepted before or after the command name."""
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--address",
        default=default,
        help=f"host:port of the server (default: ${ADDRESS_VARIABLE} or 127.0.0.1:50051)",
    )
    parser.add_argument(
        "--api-key",
        default=default,
        help=f"API key, sent as 'authorization: Bearer <key>' (default: ${API_KEY_VARIABLE})",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=default,
        metavar="SECONDS",
        help="wait this long for the server, also while it refuses connections (default: give up at a refused connection, else after 5)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (exposed for the documentation and the tests)."""
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common, suppress=True)
    parser = argparse.ArgumentParser(
        prog="wm",
        description="Command line of the Working Memory Service.",
        epilog="Exit codes: 0 ok, 1 error, 2 usage/invalid input, 3 server unreachable, "
        "4 not found, 5 commit failed, 6 not authorized, 130 interrupted.",
    )
    _common_options(parser, suppress=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sessions = sub.add_parser(
        "sessions", help="create, list, show or delete sessions", parents=[common]
    )
    sessions_sub = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = sessions_sub.add_parser("list", help="list sessions, newest first", parents=[common])
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(handler=commands.sessions_list)
    p = sessions_sub.add_parser(
        "create", help="create a session, with its owner and config", parents=[common]
    )
    p.add_argument("session", nargs="?", default="", help="its id (default: the server makes one)")
    p.add_argument("--user-id", default="", help="the user who owns its long-term memories")
    p.add_argument("--agent-id", default="", help="the agent it runs")
    p.add_argument(
        "--config",
        default="",
        metavar="JSON",
        help="SessionConfig as proto JSON, or @file, e.g. '{\"memoryExtraction\": false}'",
    )
    p.add_argument("--json", action="store_true", help="print the session as JSON")
    p.set_defaults(handler=commands.sessions_create)
    p = sessions_sub.add_parser(
        "show", help="a session, its commits and archives", parents=[common]
    )
    p.add_argument("session")
    p.add_argument("--json", action="store_true", help="print the session as JSON")
    p.set_defaults(handler=commands.sessions_show)
    p = sessions_sub.add_parser("delete", help="delete a session and all of it", parents=[common])
    p.add_argument("session")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (needed off a terminal)")
    p.set_defaults(handler=commands.sessions_delete)

    p = sub.add_parser("add", help="add messages from a JSONL file", parents=[common])
    p.add_argument("session")
    p.add_argument("file", help="JSONL file, one message per line ('-' reads standard input)")
    p.add_argument("--no-create", action="store_true", help="fail when the session does not exist")
    p.set_defaults(handler=commands.add)

    p = sub.add_parser(
        "commit", help="archive old messages and update the working memory", parents=[common]
    )
    p.add_argument("session")
    p.add_argument(
        "--keep",
        type=int,
        default=10,
        metavar="N",
        help="newest messages to keep live (default 10)",
    )
    p.add_argument("--follow", action="store_true", help="show Phase 2 live until the commit ends")
    p.add_argument("--json", action="store_true", help="print events as JSON lines")
    p.set_defaults(handler=commands.commit)

    commits = sub.add_parser("commits", help="list, show, watch or retry commits", parents=[common])
    commits_sub = commits.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = commits_sub.add_parser("list", help="a session's commits, newest first", parents=[common])
    p.add_argument("session")
    p.add_argument("--limit", type=int, default=1000, help="at most this many (default 1000)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(handler=commands.commits_list)
    p = commits_sub.add_parser(
        "show",
        help="a commit: stages with durations, tokens, cache use, guard decisions, diff, error",
        parents=[common],
    )
    p.add_argument("session")
    p.add_argument("commit")
    p.add_argument("--json", action="store_true", help="print the commit and its events as JSON")
    p.set_defaults(handler=commands.commits_show)
    p = commits_sub.add_parser(
        "watch", help="re-attach to a commit and follow it to its end", parents=[common]
    )
    p.add_argument("session")
    p.add_argument("commit")
    p.add_argument(
        "--after", type=int, default=0, metavar="SEQ", help="only events after this sequence"
    )
    p.add_argument("--json", action="store_true", help="print events as JSON lines")
    p.set_defaults(handler=commands.commits_watch)
    p = commits_sub.add_parser(
        "retry", help="run a FAILED commit's Phase 2 again", parents=[common]
    )
    p.add_argument("session")
    p.add_argument("commit")
    p.add_argument("--follow", action="store_true", help="follow the new run until it ends")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=commands.commits_retry)

    p = sub.add_parser(
        "compact",
        help="archive every live message and follow Phase 2 to its end",
        parents=[common],
    )
    p.add_argument("session")
    p.add_argument("--json", action="store_true", help="print events as JSON lines")
    p.set_defaults(handler=commands.compact)

    memory = sub.add_parser("memory", help="the working memory", parents=[common])
    memory_sub = memory.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = memory_sub.add_parser(
        "show", help="render the working memory as Markdown", parents=[common]
    )
    p.add_argument("session")
    p.add_argument("--version", type=int, default=0, help="a version (default: the latest)")
    p.add_argument("--raw", action="store_true", help="print the Markdown document as is")
    p.add_argument("--json", action="store_true", help="print the working memory as JSON")
    p.set_defaults(handler=commands.memory_show)
    p = memory_sub.add_parser(
        "history", help="every working-memory version and what it changed", parents=[common]
    )
    p.add_argument("session")
    p.add_argument("--json", action="store_true", help="one JSON object per version")
    p.set_defaults(handler=commands.memory_history)
    p = memory_sub.add_parser(
        "diff",
        help="per-section diff of two versions, with the guard decisions on each section",
        parents=[common],
    )
    p.add_argument("session")
    p.add_argument("old", type=int, metavar="V1")
    p.add_argument("new", type=int, nargs="?", default=None, metavar="V2", help="default: latest")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.set_defaults(handler=commands.memory_diff)

    p = sub.add_parser(
        "search", help="search archived messages (literal, case-insensitive)", parents=[common]
    )
    p.add_argument("query")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--session", help="search this session")
    scope.add_argument("--all", action="store_true", help="search every session")
    p.add_argument("--archive", default="", help="only this archive (e.g. archive_002)")
    p.add_argument("--max-hits", type=int, default=0, help="at most this many hits (default 12)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--ranked", action="store_true", help="rank by the query's words (BM25)")
    how.add_argument(
        "--hybrid", action="store_true", help="rank by the query's words and meaning, fused"
    )
    p.add_argument("--json", action="store_true", help="print the response as JSON")
    p.set_defaults(handler=commands.search)

    memories = sub.add_parser(
        "memories",
        help="search, list, show, add, expire, retire or forget long-term memories",
        parents=[common],
    )
    memories_sub = memories.add_subparsers(dest="action", required=True, metavar="ACTION")

    def owner_group(p: argparse.ArgumentParser) -> None:
        who = p.add_mutually_exclusive_group(required=True)
        who.add_argument("--user", help="a user's memories")
        who.add_argument("--agent", help="an agent's memories")
        who.add_argument("--session", help="the memories of this session's owner")

    def owner_options(p: argparse.ArgumentParser) -> None:
        owner_group(p)
        p.add_argument(
            "--type", action="append", default=[], choices=commands.MEMORY_TYPE_NAMES,
            help="only this type (repeatable)",
        )  # fmt: skip
        p.add_argument("--json", action="store_true", help="one JSON object per line")

    p = memories_sub.add_parser("search", help="ranked search of memories", parents=[common])
    p.add_argument("query")
    owner_options(p)
    p.add_argument(
        "--limit", type=int, default=0,
        help=f"at most this many (default 10, max {_rules.MAX_MEMORY_HITS})",
    )  # fmt: skip
    p.add_argument(
        "--include-superseded", action="store_true",
        help="also memories newer ones replaced (ranked below the current ones)",
    )  # fmt: skip
    p.set_defaults(handler=commands.memories_search)
    p = memories_sub.add_parser("list", help="memories, newest first", parents=[common])
    owner_options(p)
    state = p.add_mutually_exclusive_group()
    state.add_argument("--retired", action="store_true", help="the retired ones instead")
    state.add_argument(
        "--superseded", action="store_true", help="the ones newer memories replaced instead"
    )
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p.set_defaults(handler=commands.memories_list)
    p = memories_sub.add_parser("show", help="a memory with its history", parents=[common])
    p.add_argument("memory")
    p.add_argument("--json", action="store_true", help="print the memory as JSON")
    p.set_defaults(handler=commands.memories_show)
    p = memories_sub.add_parser(
        "forget", help="delete a memory (store, index, history)", parents=[common]
    )
    p.add_argument("memory")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (needed off a terminal)")
    p.set_defaults(handler=commands.memories_forget)
    p = memories_sub.add_parser(
        "preview",
        help="what extraction would keep from a session (dry run: writes nothing)",
        parents=[common],
    )
    p.add_argument("session")
    p.add_argument(
        "--archive", action="append", default=[], help="this archive instead of the live messages"
    )
    p.add_argument("--json", action="store_true", help="print the response as JSON")
    p.set_defaults(handler=commands.memories_preview)
    p = memories_sub.add_parser(
        "retire", help="a memory no longer holds: kept, no longer recalled", parents=[common]
    )
    p.add_argument("memory")
    p.add_argument("--reason", required=True, help="why it no longer holds (1-500 characters)")
    p.set_defaults(handler=commands.memories_retire)
    p = memories_sub.add_parser(
        "add", help="store a memory (optionally replacing older ones)", parents=[common]
    )
    p.add_argument("text")
    owner_group(p)
    p.add_argument(
        "--type", dest="memory_type", required=True, choices=commands.MEMORY_TYPE_NAMES,
        help="the memory's type",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the response as JSON")
    p.add_argument(
        "--supersedes", action="append", default=[], metavar="MEMORY",
        help="an active memory of the owner it replaces (repeatable)",
    )  # fmt: skip
    p.add_argument("--expires", help="when to forget it: ISO 8601 date or date-time (UTC)")
    p.set_defaults(handler=commands.memories_add)
    p = memories_sub.add_parser("expire", help="set when a memory is forgotten", parents=[common])
    p.add_argument("memory")
    p.add_argument("--at", required=True, help="ISO 8601 date or date-time (UTC)")
    p.set_defaults(handler=commands.memories_expire)

    p = sub.add_parser(
        "purge-user",
        help="forget a user: their memories and sessions (messages, archives, tool outputs)",
        parents=[common],
    )
    p.add_argument("user")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (needed off a terminal)")
    p.add_argument("--json", action="store_true", help="print the response as JSON")
    p.set_defaults(handler=commands.purge_user)

    p = sub.add_parser(
        "assemble", help="the next model context within a token budget", parents=[common]
    )
    p.add_argument("session")
    p.add_argument("--budget", type=int, required=True, help="the context window, in tokens")
    p.add_argument("--system-prompt", default="", help="the runtime's own system prompt")
    p.add_argument(
        "--json", action="store_true", help="print the response as JSON (with Anthropic messages)"
    )
    p.set_defaults(handler=commands.assemble)

    p = sub.add_parser(
        "demo",
        help="replay a bundled coding-agent session and show the working memory",
        parents=[common],
    )
    p.add_argument("--session", default="", help="session id (default: demo-<random>)")
    p.add_argument(
        "--budget",
        type=int,
        default=2000,
        help="token budget of the replayed runtime (default 2000)",
    )
    p.add_argument(
        "--ratio",
        type=float,
        default=0.5,
        help="commit when pending ≥ budget × ratio (default 0.5)",
    )
    p.add_argument(
        "--keep", type=int, default=6, help="messages kept live by each commit (default 6)"
    )
    p.add_argument("--file", default="", help="replay this JSONL file instead of the bundled one")
    p.set_defaults(handler=demo.run_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``wm`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # Off a terminal, lines are written whole: a pipe has no width to wrap to.
    stdout = Console(highlight=False, soft_wrap=not sys.stdout.isatty())
    stderr = Console(stderr=True, highlight=False, soft_wrap=not sys.stderr.isatty())
    try:
        return int(asyncio.run(_run(args, stdout)))
    except BrokenPipeError:
        # The reader went away (``wm ... | head``): stop quietly, as a killed-by-SIGPIPE tool.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE
    except KeyboardInterrupt:
        stderr.print("wm: interrupted; a running commit goes on on the server")
        return ExitCode.INTERRUPTED
    except commands.Unreachable as exc:
        stderr.print(
            f"wm: cannot reach the Working Memory Service at {exc.address}: is wm-server running?"
            f" (set --address or {ADDRESS_VARIABLE})",
            markup=False,
        )
        return ExitCode.UNREACHABLE
    except WmError as exc:
        stderr.print(f"wm: {describe_error(exc, args)}", markup=False)
        if exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED and _TOO_LARGE in exc.message:
            return ExitCode.USAGE  # our request, not the server's capacity
        return _CODE_EXIT.get(exc.code, ExitCode.ERROR)
    except (JsonlError, OSError, ValueError, commands.Refused) as exc:
        stderr.print(f"wm: {exc}", markup=False)
        return ExitCode.USAGE


async def _run(args: argparse.Namespace, out: Console) -> int:
    address = getattr(args, "address", None) or default_address()
    api_key = getattr(args, "api_key", None) or os.environ.get(API_KEY_VARIABLE) or None
    connect_timeout = getattr(args, "connect_timeout", None)
    async with WmClient(address, api_key=api_key) as client:
        # Without --connect-timeout a refused connection is reported at once; with it, the
        # command waits that long for a server that is still starting (refusing connections).
        timeout = 5.0 if connect_timeout is None else connect_timeout
        if not await client.wait_ready(timeout, fail_fast=connect_timeout is None):
            raise commands.Unreachable(client.address)
        code: int = await args.handler(client, args, out)
        return code


def describe_error(error: WmError, args: argparse.Namespace) -> str:
    """A sentence for a person, from the code and the ErrorInfo reason."""
    session = getattr(args, "session", None) or error.metadata.get("session_id", "")
    if error.reason == "SESSION_NOT_FOUND":
        return f"session {session!r} not found (see `wm sessions list`)"
    if error.reason == "WORKING_MEMORY_NOT_FOUND" and error.metadata.get("version", "0") != "0":
        return f"{error.message} (see `wm memory history {session}`)"
    if error.reason == "WORKING_MEMORY_NOT_FOUND":
        return (
            f"session {session!r} has no working memory yet"
            f" (run `wm commit {session} --follow` first)"
        )
    if error.code == grpc.StatusCode.INVALID_ARGUMENT and error.field_violations:
        fields = "; ".join(f"{v.field}: {v.description}" for v in error.field_violations)
        return f"invalid request: {fields}"
    if error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and _TOO_LARGE in error.message:
        return f"a request was larger than the server accepts: {error.message}"
    if error.code == grpc.StatusCode.UNAVAILABLE:
        return f"the server is unavailable: {error.message}"
    if error.code == grpc.StatusCode.UNAUTHENTICATED:
        return f"not authenticated: {error.message} (give --api-key or {API_KEY_VARIABLE})"
    return str(error)


if __name__ == "__main__":
    sys.exit(main())
