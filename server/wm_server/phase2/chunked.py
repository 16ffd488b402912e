"""Phase 2 over an input of any size: the archive in chunks, each through the recovery chain.

The model's input has a budget (its context window less the answer, or a setting). The
messages are split to fit it beside the previous working memory and the prompt
(``wm_core.chunk_messages``); the chunks go through the recovery chain and the guards in
order, the working memory after chunk k being the previous one of chunk k+1, and the result
is one working memory for the commit. A provider that still answers "prompt too long" (its
own count is not our estimate) gets the refused chunk split again with half the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from wm_core import (
    DEFAULT_LIMITS,
    Message,
    PendingItem,
    WmLimits,
    chunk_messages,
    cut_message,
    estimate_tokens,
    message_tokens,
)
from wm_server.llm.chain import Backfill, EventSink, Generation, generate_working_memory
from wm_server.llm.port import LlmProvider, PromptTooLong, Usage

log = structlog.get_logger("wm_server.phase2")

# What a call costs besides the messages and the previous WM: system prompt, tool schema,
# section reminders, the prompt's own framing.
PROMPT_OVERHEAD_TOKENS = 4_000
# The smallest message budget a chunk is split down to before "prompt too long" is final.
MIN_MESSAGE_TOKENS = 256
# How many times one commit may split a refused chunk again.
MAX_RESPLITS = 12
# A message is never cut below this many tokens to fit the chunk cap.
MIN_CUT_TOKENS = 64


@dataclass(frozen=True, slots=True)
class InputBudget:
    """Tokens of model input per call; ``None`` fields fall back to ``default_tokens``."""

    tokens: int | None = None  # explicit setting (WM_PHASE2_INPUT_TOKENS)
    default_tokens: int = 150_000
    safety: float = 0.9  # our estimate is not the provider's tokenizer

    def for_provider(self, provider: LlmProvider) -> int:
        """The setting, else the provider's context window less its answer, else default."""
        if self.tokens is not None:
            return self.tokens
        window = getattr(provider, "context_window", None)
        if isinstance(window, int) and window > 0:
            output = getattr(provider, "max_output_tokens", None)
            answer = output if isinstance(output, int) and output > 0 else 8_192
            return max(int((window - answer) * self.safety), MIN_MESSAGE_TOKENS * 4)
        return self.default_tokens


def message_budget(input_tokens: int, previous_document: str | None) -> int:
    """Tokens left for messages beside the previous working memory and the prompt."""
    left = input_tokens - estimate_tokens(previous_document) - PROMPT_OVERHEAD_TOKENS
    return max(left, MIN_MESSAGE_TOKENS)


def capped(
    messages: Sequence[Message], budget: int, max_chunks: int
) -> tuple[tuple[tuple[Message, ...], ...], bool]:
    """The chunks of ``messages``, at most about ``max_chunks`` of them: over that (a long
    archive with many earlier failed ones folded in), every message is cut to its head and
    tail in proportion, so one commit's cost stays bounded. True when messages were cut."""
    chunks = chunk_messages(messages, budget)
    if len(chunks) <= max_chunks:
        return chunks, False
    sizes = [m.estimated_tokens or message_tokens(m.parts) for m in messages]
    ratio = max_chunks * budget * 0.8 / max(sum(sizes), 1)
    cut = [
        cut_message(m, max(int(size * ratio), MIN_CUT_TOKENS))
        for m, size in zip(messages, sizes, strict=True)
    ]
    return chunk_messages(cut, budget), True


def _combined(parts: Sequence[Generation]) -> Generation:
    usage = Usage()
    for part in parts:
        usage = usage + part.usage
    last = parts[-1]
    problems = [p for part in parts for p in part.problems]
    if len(parts) > 1:
        problems.insert(0, f"input processed in {len(parts)} chunks")
    return Generation(
        document=last.document,
        decisions=tuple(d for part in parts for d in part.decisions),
        mode=parts[0].mode,
        usage=usage,
        problems=problems,
        ops=last.ops,
        calls=tuple(c for part in parts for c in part.calls),
        sections=last.sections,
    )


async def generate_in_chunks(
    provider: LlmProvider,
    *,
    previous_document: str | None,
    messages: Sequence[Message],
    input_tokens: int,
    on_event: EventSink | None = None,
    limits: WmLimits = DEFAULT_LIMITS,
    backfill: Backfill | None = None,
    pending: Sequence[PendingItem] = (),
    max_chunks: int = 16,
) -> Generation:
    """The commit's working memory after ``messages``, however many they are."""
    document = previous_document
    chunks, was_cut = capped(messages, message_budget(input_tokens, document), max_chunks)
    if was_cut:
        log.warning("phase2_input_cut_to_chunk_cap", max_chunks=max_chunks)
    queue = list(chunks)
    if not queue:
        queue = [()]
    budgets = [message_budget(input_tokens, document)] * len(queue)
    done: list[Generation] = []
    resplits = 0
    while queue:
        chunk = queue.pop(0)
        budget = budgets.pop(0)
        try:
            generation = await generate_working_memory(
                provider,
                previous_document=document,
                messages=chunk,
                on_event=on_event,
                limits=limits,
                backfill=backfill,
                pending=pending,
            )
        except PromptTooLong as error:
            smaller = budget // 2
            if error.limit is not None:
                smaller = min(smaller, message_budget(error.limit, document))
            if resplits >= MAX_RESPLITS or budget <= MIN_MESSAGE_TOKENS:
                raise
            resplits += 1
            pieces = list(chunk_messages(chunk, max(smaller, MIN_MESSAGE_TOKENS)))
            log.warning(
                "phase2_prompt_too_long_resplit",
                budget=budget,
                new_budget=smaller,
                pieces=len(pieces),
                error=str(error),
            )
            queue[:0] = pieces
            budgets[:0] = [max(smaller, MIN_MESSAGE_TOKENS)] * len(pieces)
            continue
        done.append(generation)
        document = generation.document
    if len(done) > 1:
        log.info("phase2_chunked", chunks=len(done), resplits=resplits)
    result = _combined(done)
    if was_cut:
        result.problems.insert(0, f"input over {max_chunks} chunks: messages cut to head and tail")
    return result
