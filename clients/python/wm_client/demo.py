"""``wm demo``: replay a recorded coding-agent session through a running server.

Why: one command that shows the product working end to end, the way a runtime would drive it.
The bundled conversation (``data/coding_session.jsonl``: a bug fix with file reads, a failing
test run, corrections and open questions) is fed turn by turn through
:meth:`ContextEngine.after_turn` with a small context budget, so commits start in the
background whenever the pending tokens reach the threshold, exactly as in an agent. Then a last
commit is followed live, and the resulting working memory and the next context are shown.
"""

from __future__ import annotations

import argparse
import uuid

from rich.console import Console
from rich.rule import Rule

from wm_client import render
from wm_client.client import WmClient
from wm_client.commands import COMMIT_FAILED, follow, show
from wm_client.data import DEMO_CONVERSATION_FILE, packaged
from wm_client.engine import ContextEngine
from wm_client.jsonl import parse_lines, read_jsonl, split_turns
from wm_proto.v1 import resources_pb2 as pb


def bundled_conversation() -> list[pb.Message]:
    """The conversation shipped with the package."""
    text = packaged(DEMO_CONVERSATION_FILE).read_text("utf-8")
    return list(parse_lines(text.splitlines()))


def _first_text(turn: list[pb.Message]) -> str:
    for message in turn:
        for part in message.parts:
            if part.WhichOneof("kind") == "text":
                line = " ".join(part.text.split())
                return line if len(line) <= 70 else line[:69] + "…"
    return ""


async def run_demo(client: WmClient, args: argparse.Namespace, out: Console) -> int:
    """Replay, commit, show; exit 5 when the last commit fails."""
    messages = read_jsonl(args.file) if args.file else bundled_conversation()
    if args.budget <= 0 or not 0 <= args.ratio <= 1 or args.keep < 0:
        raise ValueError("--budget must be positive, --ratio 0-1, --keep ≥ 0")
    session = args.session or f"demo-{uuid.uuid4().hex[:8]}"
    turns = split_turns(messages)
    threshold = int(args.budget * args.ratio)
    out.print(Rule(f"wm demo · session {session}"))
    out.print(
        f"replaying {len(messages)} messages in {len(turns)} turns into {client.address};"
        f" a commit starts when pending tokens reach {threshold:,}"
        f" ({args.ratio:g} × budget {args.budget:,}), keeping the newest {args.keep}",
        markup=False,
    )
    engine = ContextEngine(client)
    started = 0
    for number, turn in enumerate(turns, start=1):
        result = await engine.after_turn(session, turn, args.budget, args.ratio, args.keep)
        out.print(
            f"turn {number:>2}/{len(turns)}  +{len(result.added_message_ids)} messages"
            f"  pending {result.pending_tokens or 0:,}/{threshold:,} tokens  {_first_text(turn)}",
            markup=False,
            overflow="ellipsis",
            no_wrap=True,
        )
        if result.commit is not None:
            started += 1
            event = await result.commit.phase1()
            out.print(
                f"         → background commit {started}: {event.phase1.message}", markup=False
            )
    for outcome in await engine.wait_idle():
        if isinstance(outcome, BaseException):
            out.print(f"background commit error: {outcome}", markup=False)
    out.print(f"{started} background commit(s) finished")
    out.print(Rule("last commit, live"))
    terminal = await follow(client.commit(session, args.keep), out)
    out.print(Rule("working memory"))
    session_info = await client.get_session(session)
    if session_info.working_memory_version:
        show(out, render.working_memory(await client.get_working_memory(session)))
    else:
        out.print("no working memory yet")
    context = await engine.assemble(session, max(args.budget, 1000))
    out.print(Rule(f"next context within {max(args.budget, 1000):,} tokens"))
    show(out, render.assembled_context(context.response, max(args.budget, 1000)))
    out.print(
        f"\nexplore: wm memory show {session} · wm sessions show {session}"
        f" · wm search pytest --session {session} · wm assemble {session} --budget 8000",
        markup=False,
    )
    return COMMIT_FAILED if terminal.stage == pb.COMMIT_STAGE_FAILED else 0
