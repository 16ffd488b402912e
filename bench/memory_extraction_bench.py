"""Memory extraction benchmark: what the offline extractor keeps, and what it costs per commit.

Run with ``.venv/bin/python bench/memory_extraction_bench.py`` (``--split NAME`` for one
split; since round five every split here is a tuning split, ``dev5`` to ``dev8`` included,
and the untuned figure comes from the sealed splits ``heldout5`` and ``heldout6``, written
blind, measured here and never tuned on; the generalization estimate is
``scripts/train_disclosure_weights.py --loso``, see ``memory_extraction_sets``; ``--show`` to list
misses and extras, ``--quality-only`` to skip the timings, ``--commits N`` to change the number
of server commits). It prints figures and asserts nothing. Three tables:

0. quality, per split of ``bench/memory_extraction/`` (see ``memory_extraction_sets`` for the
   file format and the matching rule: same type and every key term, words compared by their
   first five letters, dates by prefix, one-to-one maximum matching): precision and recall
   per memory type, memories per 1,000 turns, and the offline step's cost per conversation
   (the provider's answer, reading it back and the guards, as one commit runs them); for
   each sealed split, the same table for a second human reader's memories (the ceiling the
   annotation itself allows, see ``memory_extraction_sets``);

1. the extraction step alone, in process: the offline provider's answer, reading it back
   (``parse_memory_ops``) and the guards (``guard_memory_ops``) against 20 existing memories,
   for archives of 20, 80 and 320 messages (a quarter of the user messages state something
   worth remembering, the rest is ordinary work talk); median and p95 milliseconds;
2. end to end on a real server (SQLite file, offline provider, one session per user): ms per
   commit with extraction on and with ``WM_MEMORY_EXTRACTION=false``, measured from Commit to
   its terminal event; the difference is what extraction adds to a commit (the similar-memory
   search, the call, the plan and its writes with their full-text index, in the completion's
   transaction).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
from memory_extraction_sets import SEALED, SPLITS, Score, load, score, second_reader

from support import builders as b
from wm_core import (
    MemoryRecord,
    MemoryType,
    Message,
    Role,
    TextPart,
    archive_text,
    guard_memory_ops,
    message_tokens,
    parse_memory_ops,
)
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import start_application
from wm_server.config import Settings
from wm_server.llm.offline import OfflineProvider
from wm_server.llm.port import MemoryRequest

STATEMENTS = (
    "I prefer {x} over {y} for the {z} module.",
    "We decided to move the {z} store to {x} because {y} locks under load.",
    "The {z} cut-over is scheduled for 2026-12-{d:02d}.",
    "Let's go with {x} for the {z} cache since {y} is already deployed.",
    "The {z} lives in a service called {x}d.",
    "My name is Dana {x}. I'm the platform lead at {y} Traders.",
)
WORK = (
    "Can you run the tests for the {z} module again?",
    "The failure is in {z}/handlers.py line {d}, an off-by-one in the pager.",
    "Please rename {x}Client to {y}Client everywhere in {z}.",
    "What does the {z} job do when the queue is empty?",
)
NAMES = ("Postgres", "Redis", "Kafka", "Ruff", "Black", "Rust", "Go", "Nginx", "Envoy", "Vault")
TOPICS = ("ledger", "billing", "auth", "search", "export", "payments", "reports", "inbox")


def _text(template: str, i: int) -> str:
    return template.format(
        x=NAMES[i % len(NAMES)],
        y=NAMES[(i * 3 + 1) % len(NAMES)],
        z=TOPICS[i % len(TOPICS)],
        d=1 + i % 28,
    )


def archive(size: int, offset: int = 0) -> list[Message]:
    messages: list[Message] = []
    for i in range(size // 2):
        n = offset + i
        template = STATEMENTS[n % len(STATEMENTS)] if n % 4 == 0 else WORK[n % len(WORK)]
        for role, text in ((Role.USER, _text(template, n)), (Role.ASSISTANT, "Done; see diff.")):
            parts = (TextPart(text),)
            messages.append(Message(f"m{n}-{role.value}", role, parts, message_tokens(parts)))
    return messages


def existing_memories() -> list[MemoryRecord]:
    return [
        MemoryRecord(
            f"mem_{i:020x}",
            MemoryType.PREFERENCE if i % 2 else MemoryType.DECISION,
            _text(STATEMENTS[i % 2], i).replace("I prefer", "User prefers"),
        )
        for i in range(20)
    ]


async def quality_figures(split: str, show: bool) -> None:
    """Table 0 for one split."""
    provider = OfflineProvider()
    scores: dict[str, Score] = {}
    turns = 0
    times: list[float] = []
    for conversation in load(split):
        turns += len(conversation.messages)
        started = time.perf_counter()
        request = MemoryRequest(conversation.messages, message_dates=conversation.dates)
        reply = await provider.extract_memories(request)
        text = archive_text(conversation.messages)
        plan = guard_memory_ops(parse_memory_ops(reply.tool_input).ops, [], text)
        times.append((time.perf_counter() - started) * 1000)
        missed, extra = score(conversation, plan.ops, scores)
        if show and (missed or extra):
            print(f"-- {conversation.id}")
            for e in missed:
                print(f"   missed {e.type}: {' | '.join(e.terms)}")
            for op in extra:
                print(f"   extra  {op.type}: {op.text} {op.event_time or ''}")
    print(f"quality, split {split}: {len(load(split))} conversations, {turns} turns")
    print_scores(scores)
    made = scores["all"].extracted if "all" in scores else 0
    times.sort()
    print(
        f"memories per 1,000 turns: {made * 1000 / max(turns, 1):.0f}; offline step per "
        f"conversation: median {statistics.median(times):.2f} ms, max {times[-1]:.2f} ms"
    )


def print_scores(scores: dict[str, Score]) -> None:
    """Precision and recall per memory type, then over all types."""
    print(f"{'type':>11} {'expected':>9} {'extracted':>10} {'precision':>10} {'recall':>7}")
    for kind in [*(k for k in sorted(scores) if k != "all"), "all"]:
        s = scores[kind]
        print(f"{kind:>11} {s.expected:>9} {s.extracted:>10} {s.precision:>10.2f} {s.recall:>7.2f}")


def second_reader_figures(split: str) -> None:
    """Table 0 for a second human reader of a sealed split (``memory_extraction_sets``)."""
    conversations = load(split)
    made = second_reader(split)
    scores: dict[str, Score] = {}
    for conversation in conversations:
        score(conversation, made.get(conversation.id, []), scores)
    print(f"second human reader, split {split}: {len(conversations)} conversations")
    print_scores(scores)


async def step_figures(rounds: int) -> None:
    provider = OfflineProvider()
    existing = existing_memories()
    print("extraction step alone (offline answer + read + guards, 20 existing memories)")
    print(f"{'messages':>9} {'ops':>5} {'median ms':>10} {'p95 ms':>8}")
    for size in (20, 80, 320):
        messages = archive(size)
        text = archive_text(messages)
        times: list[float] = []
        ops = 0
        for _ in range(rounds):
            started = time.perf_counter()
            reply = await provider.extract_memories(MemoryRequest(messages, existing))
            plan = guard_memory_ops(parse_memory_ops(reply.tool_input).ops, existing, text)
            times.append((time.perf_counter() - started) * 1000)
            ops = len(plan.decisions)
        times.sort()
        p95 = times[int(len(times) * 0.95) - 1]
        print(f"{size:>9} {ops:>5} {statistics.median(times):>10.2f} {p95:>8.2f}")


async def server_figure(commits: int, extraction: bool) -> tuple[float, int]:
    """Median ms from Commit to its terminal event, and the memories made in all."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            address="127.0.0.1:0",
            data_dir=Path(tmp),
            llm_provider="offline",
            memory_extraction=extraction,
            log_level="warning",
        )
        app = await start_application(settings)
        times: list[float] = []
        created = 0
        try:
            async with grpc.aio.insecure_channel(app.address) as channel:
                stub = service_grpc.WorkingMemoryServiceStub(channel)
                for n in range(commits):
                    session = f"s{n % 10}"
                    if n < 10:
                        await stub.CreateSession(
                            api.CreateSessionRequest(
                                session_id=session, session=pb.Session(user_id=f"u{n}")
                            )
                        )
                    messages = [
                        b.user(m.text()) if m.role is Role.USER else b.assistant(m.text())
                        for m in archive(40, n * 20)
                    ]
                    await stub.AddMessages(
                        api.AddMessagesRequest(parent="sessions/" + session, messages=messages)
                    )
                    started = time.perf_counter()
                    commit = await stub.CreateCommit(
                        api.CreateCommitRequest(parent="sessions/" + session, keep_recent_count=0)
                    )
                    call = stub.WatchCommit(api.WatchCommitRequest(name=commit.name), timeout=60)
                    async for event in call:
                        if event.stage == pb.COMMIT_STAGE_MEMORIES_EXTRACTED:
                            created += len(event.memories_extracted.created_memories)
                        if event.terminal:
                            break
                    times.append((time.perf_counter() - started) * 1000)
        finally:
            await app.stop(grace=1.0)
    return statistics.median(times), created


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--commits", type=int, default=40)
    parser.add_argument("--split", choices=(*SPLITS, *SEALED, "all"), default="all")
    parser.add_argument("--show", action="store_true", help="list misses and extras")
    parser.add_argument("--quality-only", action="store_true")
    args = parser.parse_args()
    for split in (*SPLITS, *SEALED) if args.split == "all" else (args.split,):
        await quality_figures(split, args.show)
        print()
        if split in SEALED:
            second_reader_figures(split)
            print()
    if args.quality_only:
        return
    await step_figures(args.rounds)
    print()
    print(f"end to end, SQLite, offline, {args.commits} commits of 40 messages, 10 users")
    on, made = await server_figure(args.commits, True)
    off, _ = await server_figure(args.commits, False)
    print(f"{'extraction':>11} {'ms/commit':>10} {'memories':>9}")
    print(f"{'on':>11} {on:>10.2f} {made:>9}")
    print(f"{'off':>11} {off:>10.2f} {0:>9}")
    print(f"extraction adds {on - off:.2f} ms per commit (median)")


if __name__ == "__main__":
    asyncio.run(main())
