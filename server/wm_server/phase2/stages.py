"""The stages of one Phase 2 attempt, in order, each a small function over ``State``:

1. ``bound_input``: the working memory the claim named, the messages to cover (this archive
   and earlier failed, uncovered ones) and the session's pending items;
2. ``update_working_memory``: the model's tool call through the recovery chain and the
   guards, in turn-aligned chunks within the provider's input budget
   (``phase2/chunked.py``), then the pending items settled against their bound; meanwhile
   the reads of the next stage's memory context run beside it (``_memory_context``), so
   their round trips wait with the model call instead of after it;
3. ``extract_memories``: with the owner's most similar memories read, the provider's memory
   ops judged by the guards into a plan (``services.extraction``); the plan is applied by
   the completion, so a crash before it applied nothing, and the re-run reads the memories
   afresh;
4. ``embed_and_index``: the archive's full-text rows and message vectors, so "completed"
   means retrievable (an embedder fault leaves the vectors to the backfill; it never fails
   the commit);
5. ``complete``: one transaction stores all of it (``JobStore.complete``).

A stage reads through the store, calls the model through ``Tools.on_event`` (which the
worker turns into events, breaker news and spans) and writes nothing itself but the earlier
chunks of a long archive's search rows. Errors propagate: the worker decides what an
attempt that did not complete becomes (retry, wait, fail).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

import structlog

from wm_core import (
    PendingItem,
    abstract_of,
    archive_name,
    estimate_tokens,
    refused_items,
    settle_pending,
    unfold_pending,
)
from wm_server.cancellation import cancel_and_wait
from wm_server.embedding.port import EmbedderUnavailable
from wm_server.llm.chain import Backfill, EventSink
from wm_server.llm.port import LlmProvider, usage_json
from wm_server.phase2.chunked import InputBudget, generate_in_chunks
from wm_server.phase2.settings import WorkerSettings
from wm_server.phase2.state import ArchiveIndex, Phase2Completion, State
from wm_server.phase2.store import INDEX_CHUNK, JobStore
from wm_server.services.commit_event_log import CommitEvent, GuardDecided
from wm_server.services.embedding_index import EmbeddingIndexer, VectorRow
from wm_server.services.extraction import MemoryContext, MemoryState, extract
from wm_server.storage import codec
from wm_server.storage.records import CommitRecord, WorkingMemoryRecord

log = structlog.get_logger("wm_server.phase2")


@dataclass(frozen=True, slots=True)
class Tools:
    """What the stages of one attempt use: the store, the session's provider, the worker's
    settings, and where the model calls' events go."""

    store: JobStore
    provider: LlmProvider
    settings: WorkerSettings
    on_event: EventSink
    backfill: Backfill | None = None
    indexer: EmbeddingIndexer | None = None

    @property
    def input_tokens(self) -> int:
        budget: InputBudget = self.settings.input
        return budget.for_provider(self.provider)


async def bound_input(state: State, tools: Tools) -> State:
    return replace(state, input=await tools.store.read_input(state.job))


async def update_working_memory(state: State, tools: Tools) -> State:
    data, settings = state.data, tools.settings
    # Extraction's reads depend on nothing this stage makes: on PostgreSQL their round trip
    # (about a millisecond of waiting) goes beside the model call and the merge.
    reading = asyncio.create_task(_memory_context(state, tools))
    try:
        generation = await generate_in_chunks(
            tools.provider,
            previous_document=data.previous.document if data.previous else None,
            messages=data.messages,
            input_tokens=tools.input_tokens,
            on_event=tools.on_event,
            limits=settings.limits,
            backfill=tools.backfill,
            pending=data.pending,
            max_chunks=settings.max_chunks,
        )
    except BaseException:
        with contextlib.suppress(BaseException):  # the update's error is the one to raise
            await cancel_and_wait(reading)
        raise
    memories = await reading
    # What leaves the pending items (their bound) is written to long-term memory by this
    # commit's extraction (wm_core.safekeeping_ops), so it is computed first.
    pending, dropped = settle_pending(
        data.pending,
        refused_items(generation.decisions, state.job.archive_seq),
        generation.document,
        settings.max_pending_items,
        settings.max_pending_tokens,
    )
    return replace(
        state, generation=generation, pending=pending, dropped=dropped, memories=memories
    )


async def _memory_context(state: State, tools: Tools) -> MemoryContext:
    """What memory extraction reads before its model call (``JobStore.memory_context``)."""
    job, data = state.job, state.data
    return await tools.store.memory_context(
        job, data.messages, enabled_by_server=tools.settings.memory_extraction,
        session=data.session,
    )  # fmt: skip


async def extract_memories(state: State, tools: Tools) -> State:
    job, data, settings = state.job, state.data, tools.settings
    assert state.memories is not None, "update_working_memory reads them"
    extraction = await extract(
        tools.provider,
        state.memories,
        messages=data.messages,
        pending=unfold_pending(data.pending),  # each refused item on its own
        archive_id=archive_name(job.archive_seq),
        input_tokens=tools.input_tokens,
        on_event=tools.on_event,
        message_dates=data.message_dates,
        dropped=state.dropped,
    )
    pending, dropped = state.pending, state.dropped
    lost: tuple[PendingItem, ...] = ()
    if dropped and extraction.state is MemoryState.FAILED:
        # Not written anywhere: they stay pending, over the bound, until an extraction that
        # works takes them (the next commit offers them again) — up to a second bound's
        # worth, so a model that keeps failing cannot grow the list (and every prompt that
        # shows it) without end; past that the oldest are lost, counted.
        pending, lost = settle_pending(
            (*dropped, *pending),
            (),
            state.generated.document,
            2 * settings.max_pending_items,
            2 * settings.max_pending_tokens,
        )
    elif dropped and extraction.state is MemoryState.OFF:
        lost = dropped  # no long-term memory for this session: what the bound drops
    return replace(state, extraction=extraction, pending=pending, lost=lost)


async def embed_and_index(state: State, tools: Tools) -> State:
    job, data = state.job, state.data
    # The embedder's thread starts (its tokenizer runs without the GIL) while the full-text
    # rows are analyzed here. Started earlier, beside the stages before, it took longer:
    # both sides wait for the GIL in turns (bench: 10-21 ms against 9-10.5 ms). A short
    # archive is embedded at once, on the loop, cheaper than the hop (INLINE_CHARS).
    embedding = asyncio.create_task(_embedded(state, tools))
    await asyncio.sleep(0)  # let it hand its texts over
    try:
        text = tools.store.search_rows(data)  # in position order
    except BaseException:
        embedding.cancel()
        raise
    vectors, model = await embedding
    # A long archive's earlier chunks go now, a short write each; the last one goes with
    # the completion.
    last = (len(text) - 1) // INDEX_CHUNK * INDEX_CHUNK if text else 0
    for start in range(0, last, INDEX_CHUNK):
        chunk = text[start : start + INDEX_CHUNK]
        await tools.store.index_chunk(
            job, data.sid, chunk, model, _of(vectors, chunk[0].position, chunk[-1].position)
        )
    rest = _of(vectors, text[last].position, text[-1].position) if text else vectors
    return replace(state, index=ArchiveIndex(tuple(text[last:]), tuple(rest), model))


async def _embedded(state: State, tools: Tools) -> tuple[list[VectorRow], str]:
    """The archive's message vectors and the embedder's model (none without an embedder)."""
    job, data = state.job, state.data
    if tools.indexer is None or not data.archive:
        return [], ""
    try:
        vectors = await tools.indexer.message_vectors(data.sid, job.archive_seq, data.archive)
    except EmbedderUnavailable as error:  # the backfill embeds them later
        tools.indexer.failed("phase2")
        log.warning("phase2_embedding_failed", commit_id=job.commit_id, error=str(error))
        vectors = []
    return vectors, tools.indexer.model


def _of(vectors: Sequence[VectorRow], first: int, last: int) -> list[VectorRow]:
    """The vectors of the messages at positions first..last."""
    return [v for v in vectors if first <= v[1] <= last]


async def complete(
    state: State, tools: Tools, events: Sequence[CommitEvent]
) -> tuple[CommitRecord, WorkingMemoryRecord] | None:
    """Store the attempt in one transaction, with ``events`` (those of the model calls the
    worker has not written yet) and the guards' decisions first; None when the working
    memory changed since the claim."""
    guards = tuple(GuardDecided(d) for d in state.generated.decisions)
    return await tools.store.complete(
        state.job, _completion(state), (*events, *guards), state.extracted, state.index
    )


def _completion(state: State) -> Phase2Completion:
    """What the completion stores of the working memory and the pending items."""
    generation = state.generated
    return Phase2Completion(
        document=generation.document,
        estimated_tokens=estimate_tokens(generation.document),
        abstract=abstract_of(generation.document, bodies=generation.sections),
        decisions_json=codec.decisions_json(generation.decisions),
        usage_json=usage_json(generation.usage),
        covered_seqs=state.data.covered_seqs,
        pending=state.pending,
        pending_dropped=len(state.lost),
    )


def leaves_rows_unembedded(state: State, empty_reason: str) -> bool:
    """Whether the completed attempt left rows without a vector for the embedding loop: the
    memories its extraction wrote (it wrote some unless it says why not), or its archive's
    messages when the embedder failed. A round of that loop reads its backlogs (four
    statements, about a millisecond of the loop on PostgreSQL), so a commit that wrote no
    memory and embedded its archive does not start one."""
    wrote = state.extracted.state is MemoryState.EXTRACTED and not empty_reason
    index = state.index
    return wrote or (index is not None and bool(state.data.archive) and not index.vectors)


def empty_reason(done: tuple[CommitRecord, WorkingMemoryRecord]) -> str:
    """Why the completed commit's extraction wrote nothing ("" when it wrote something)."""
    return str(json.loads(done[0].memory_diff_json or "{}").get("empty_reason") or "")
