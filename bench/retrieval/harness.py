"""Drive a real server with a generated dataset and measure recall of the evidence.

The server runs in-process on a loopback port over a real SQLite file (or the PostgreSQL a
``database_url`` names) with the offline provider, and everything goes through the Python
client, as an application would: AddMessages, Commit (read to its terminal event), then one
search per question and mode. Recall@k of a question is the share of its evidence messages
among the first k distinct messages the mode returns; a mode's figure is the mean over the
questions.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench.retrieval.generator import Dataset, Message, Question
from wm_client import WmClient
from wm_proto.v1 import resources_pb2 as pb
from wm_server.app import start_application
from wm_server.config import LlmProviderName, Settings

KS: Final = (5, 10)
MAX_HITS: Final = 50  # the most one SearchArchives call returns

# Words a literal search gains nothing from: articles, pronouns, auxiliaries, question words.
_STOP: Final = """a an the and or but if of to in on at by for with from about into over as is are was
    were be been being do does did done have has had i me my we us our you your he she it its
    they them their this that these those what which who whom whose when where why how there
    here not no can could should would will shall may might must want wants any some so than
    then too very just also back again ever new"""
STOP_WORDS: Final = frozenset(_STOP.split())
_WORD: Final = re.compile(r"[a-z0-9][a-z0-9.@#-]*[a-z0-9]|[a-z0-9]")

Search = Callable[[WmClient, Question], Awaitable[list[str]]]


def keywords(text: str) -> list[str]:
    """The question's words without stop words, in order, each once."""
    words = [w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]
    return list(dict.fromkeys(words))


def recall_at(ranked: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """The share of ``evidence`` among the first ``k`` distinct ids of ``ranked``."""
    top = list(dict.fromkeys(ranked))[:k]
    return sum(1 for e in evidence if e in top) / len(evidence) if evidence else 0.0


def rank_of(ranked: Sequence[str], evidence: Sequence[str]) -> int | None:
    """The 1-based rank of the first evidence message, or None when it is not returned."""
    for rank, message_id in enumerate(dict.fromkeys(ranked), start=1):
        if message_id in evidence:
            return rank
    return None


# -- modes -------------------------------------------------------------------------------------


async def _archives(
    client: WmClient, question: Question, query: str, *, ranked: bool = False
) -> list[str]:
    """SearchArchives over every session of the question's user."""
    found = await client.search_archives(
        query, all_sessions=True, user_id=question.user, page_size=MAX_HITS, ranked=ranked
    )
    return [hit.message.rsplit("/", 1)[1] for hit in found.hits]


async def literal_question(client: WmClient, question: Question) -> list[str]:
    """Literal SearchArchives with the question as asked (what a tool call would send)."""
    return await _archives(client, question, question.text)


async def literal_keywords(client: WmClient, question: Question) -> list[str]:
    """One literal search per keyword, messages ranked by how many keywords they contain
    (then by the order literal search returns them): the fairest use of a substring search
    for a natural question."""
    matched: dict[str, int] = {}
    for word in keywords(question.text):
        for message_id in await _archives(client, question, word):
            matched[message_id] = matched.get(message_id, 0) + 1
    order = {message_id: n for n, message_id in enumerate(matched)}
    return sorted(matched, key=lambda m: (-matched[m], order[m]))


async def ranked_archives(client: WmClient, question: Question) -> list[str]:
    """Ranked SearchArchives (BM25) with the question as asked."""
    return await _archives(client, question, question.text, ranked=True)


async def memories(client: WmClient, question: Question) -> list[str]:
    """SearchMemories of the question's user with the question as asked; a memory counts
    as the evidence when one of its sources is an evidence message (else it stands for
    itself, by its id)."""
    found = await client.search_memories(
        question.text, owner=f"users/{question.user}", page_size=MAX_HITS
    )
    ranked: list[str] = []
    for hit in found.hits:
        sources = [
            m
            for source in hit.memory.sources
            for m in (n.rsplit("/", 1)[1] for n in source.messages)
        ]
        ranked.append(next((m for m in sources if m in question.evidence), hit.memory.name))
    return ranked


@dataclass(frozen=True, slots=True)
class Mode:
    key: str
    label: str
    search: Search
    note: str


MODES: Final[tuple[Mode, ...]] = (
    Mode(
        "literal",
        "literal SearchArchives, the question as query",
        literal_question,
        "one call over every session of the user; a hit needs the whole question verbatim",
    ),
    Mode(
        "literal_keywords",
        "literal SearchArchives, one call per keyword",
        literal_keywords,
        "stop words dropped; messages ranked by the number of keywords they contain; "
        f"each call returns at most {MAX_HITS} hits",
    ),
    Mode(
        "ranked",
        "ranked SearchArchives, the question as query",
        ranked_archives,
        "SEARCH_MODE_RANKED over every session of the user: SQLite FTS5 bm25, PostgreSQL "
        "ts_rank_cd",
    ),
)
MEMORY_MODE: Final = Mode(
    "memories",
    "SearchMemories, the question as query",
    memories,
    "the user's memories as Phase 2 extracted them from the archives (offline provider); a "
    "hit is the evidence when one of its sources is an evidence message",
)


# -- running -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    """One mode over every question: the rank of each question's evidence (None: missed)."""

    mode: Mode
    ranks: dict[str, int | None] = field(default_factory=dict)
    recalls: dict[int, list[float]] = field(default_factory=dict)
    by_kind: dict[str, dict[int, list[float]]] = field(default_factory=dict)

    def recall(self, k: int, kind: str | None = None) -> float:
        values = self.recalls.get(k, []) if kind is None else self.by_kind.get(kind, {}).get(k, [])
        return sum(values) / len(values) if values else 0.0


def _to_proto(message: Message) -> pb.Message:
    role = pb.ROLE_USER if message.role == "user" else pb.ROLE_ASSISTANT
    if message.tool:
        part = pb.Part(
            tool_use=pb.ToolUse(
                id=message.call_id, name=message.tool, input_json=message.tool_input
            )
        )
    elif message.tool_output:
        part = pb.Part(
            tool_result=pb.ToolResult(tool_use_id=message.call_id, content=message.tool_output)
        )
    else:
        part = pb.Part(text=message.text)
    return pb.Message(id=message.id, role=role, parts=[part])


async def ingest(client: WmClient, dataset: Dataset) -> int:
    """Every session's batches, each added and committed; the number of commits completed."""
    completed = 0
    for session in dataset.sessions:
        await client.create_session(session.id, user_id=session.user)
        for batch in session.batches:
            await client.add_messages(
                session.id, [_to_proto(m) for m in batch], create_session_if_missing=True
            )
            async for event in client.commit(session.id):
                if event.HasField("completed"):
                    completed += 1
                if event.terminal:
                    break
    return completed


async def evaluate(
    client: WmClient, dataset: Dataset, modes: Sequence[Mode] = MODES
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for mode in modes:
        outcome = Outcome(mode)
        for question in dataset.questions:
            ranked = await mode.search(client, question)
            outcome.ranks[question.id] = rank_of(ranked, question.evidence)
            for k in KS:
                value = recall_at(ranked, question.evidence, k)
                outcome.recalls.setdefault(k, []).append(value)
                outcome.by_kind.setdefault(question.kind, {}).setdefault(k, []).append(value)
        outcomes.append(outcome)
    return outcomes


def settings(data_dir: Path, database_url: str | None = None) -> Settings:
    values: dict[str, object] = {
        "address": "127.0.0.1:0",
        "data_dir": data_dir,
        "llm_provider": LlmProviderName.OFFLINE,
        "shutdown_grace_seconds": 0.5,
    }
    if database_url:
        values["database_url"] = database_url
    return Settings(**values)  # type: ignore[arg-type]


async def extracted_memories(client: WmClient, dataset: Dataset) -> tuple[int, int]:
    """How many memories Phase 2 extracted for the dataset's users (none: memory search
    cannot be measured honestly, memories stored by a call would not be extraction), and
    how many questions have their evidence among the sources of one of them: the most
    memory search can find, whatever its ranking."""
    total, sources = 0, set()
    for user in dataset.users():
        listed = await client.list_memories(owner=f"users/{user}", page_size=1000)
        total += len(listed.memories)
        sources.update(
            m
            for memory in listed.memories
            for s in memory.sources
            for m in (n.rsplit("/", 1)[1] for n in s.messages)
        )
    covered = sum(1 for q in dataset.questions if any(e in sources for e in q.evidence))
    return total, covered


@dataclass(slots=True)
class Run:
    engine: str
    commits: int
    outcomes: list[Outcome]
    memories: int = 0  # extracted by Phase 2; memory search is measured only when > 0
    covered: int = 0  # questions whose evidence is a source of an extracted memory


async def run(
    dataset: Dataset, *, database_url: str | None = None, modes: Sequence[Mode] = MODES
) -> Run:
    """Start a server, ingest ``dataset`` through the client, measure every mode."""
    with tempfile.TemporaryDirectory(prefix="wm-retrieval-") as tmp:
        app = await start_application(settings(Path(tmp), database_url))
        try:
            async with WmClient(app.address) as client:
                commits = await ingest(client, dataset)
                extracted, covered = await extracted_memories(client, dataset)
                if extracted and MEMORY_MODE not in modes:
                    modes = (*modes, MEMORY_MODE)
                outcomes = await evaluate(client, dataset, modes)
        finally:
            await app.stop(grace=0.5)
    engine = "postgresql" if database_url else "sqlite"
    return Run(engine, commits, outcomes, extracted, covered)
