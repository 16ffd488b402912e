"""The service's resources in plain words: timestamps, state and stage names, token usage,
a commit event's detail, a guard decision, a message's text.

Why apart from ``render``: the ``wm`` CLI draws these words with ``rich`` (an extra of this
distribution), and the server's web inspector draws the same words as HTML without it. Each
wording is written once here and both use it; nothing here imports ``rich`` or does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from wm_client.names import short_id
from wm_proto.v1 import resources_pb2 as pb

_KIND = {
    pb.SECTION_OP_KIND_UNSPECIFIED: "KEEP",
    pb.SECTION_OP_KIND_KEEP: "KEEP",
    pb.SECTION_OP_KIND_UPDATE: "UPDATE",
    pb.SECTION_OP_KIND_APPEND: "APPEND",
}


def when(stamp: Timestamp) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS`` UTC, or "-" when unset."""
    if not stamp.seconds and not stamp.nanos:
        return "-"
    return datetime.fromtimestamp(stamp.seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def stage_name(stage: int) -> str:
    """COMMIT_STAGE_LLM_REQUEST_SENT → "llm_request_sent"."""
    return pb.CommitStage.Name(stage).removeprefix("COMMIT_STAGE_").lower()  # type: ignore[arg-type]


def state_name(state: int) -> str:
    """COMMIT_STATE_COMPLETED → "completed"."""
    return pb.CommitState.Name(state).removeprefix("COMMIT_STATE_").lower()  # type: ignore[arg-type]


def kind_name(kind: int) -> str:
    return _KIND.get(kind, "KEEP")  # type: ignore[call-overload,no-any-return]


def usage_text(usage: pb.TokenUsage) -> str:
    """Tokens of one call or one commit: ``900 in / 210 out, cache 4,000 read / 1,500 written``.

    Cache figures are shown whenever the server reports them, so a reader can see whether
    the static prompt is being served from the provider's prompt cache commit after commit.
    """
    text = f"{usage.input_tokens:,} in / {usage.output_tokens:,} out"
    return (
        text + f", cache {usage.cache_read_input_tokens:,} read"
        f" / {usage.cache_creation_input_tokens:,} written"
    )


def commit_usage(usage: pb.TokenUsage) -> str:
    """A commit's tokens for a table cell or a summary line; "-" when no model was called."""
    if not usage.llm_calls:
        return "-"
    return f"{usage_text(usage)} ({usage.llm_calls} call{'s' if usage.llm_calls != 1 else ''})"


def ops_summary(ops: Iterable[pb.SectionOp]) -> str:
    counts: dict[str, int] = {}
    for op in ops:
        name = kind_name(op.kind)
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "no ops"


def decision_change(d: pb.GuardDecision) -> str:
    """`` on Facts: UPDATE → APPEND — the reason`` (what follows the guard's name)."""
    text = f" on {d.section}: {kind_name(d.requested_kind)} → {kind_name(d.applied_kind)}"
    return text + (f" — {d.reason}" if d.reason else "")


def decision_counts(d: pb.GuardDecision) -> str:
    """``dropped 2, refused 1``: how many items the guard moved, "" when none."""
    return ", ".join(
        f"{label} {len(items)}"
        for label, items in (
            ("dropped", d.dropped_items),
            ("restored", d.restored_items),
            ("refused", d.refused_items),
        )
        if items
    )


def decision_summary(d: pb.GuardDecision) -> str:
    """One guard intervention on one line."""
    counts = decision_counts(d)
    return f"guard {d.guard}{decision_change(d)}" + (f" ({counts})" if counts else "")


def event_detail(event: pb.CommitEvent) -> str:
    """What an event says, in a few words."""
    kind = event.WhichOneof("detail")
    if kind == "phase1":
        return event.phase1.message
    if kind == "phase2_started":
        p = event.phase2_started
        mode = "create" if p.mode == pb.PHASE2_MODE_CREATE else f"update of v{p.previous_version}"
        covered = ", ".join(map(short_id, p.covered_archives))
        return f"attempt {p.attempt}, {mode}" + (f", covering {covered}" if covered else "")
    if kind == "llm_request_sent":
        r = event.llm_request_sent
        return f"{r.purpose} call to {r.provider} ({r.model})"
    if kind == "llm_response_received":
        response = event.llm_response_received
        took = response.duration.ToMilliseconds()
        if response.stop_reason == "error":
            return f"the model call failed after {took:,} ms"
        return f"stop={response.stop_reason}, {usage_text(response.usage)} tokens, {took:,} ms"
    if kind == "ops_parsed":
        text = ops_summary(event.ops_parsed.ops)
        if event.ops_parsed.problems:
            text += f"; problems: {'; '.join(event.ops_parsed.problems)}"
        return text
    if kind == "guard_decision":
        return decision_summary(event.guard_decision)
    if kind == "working_memory_stored":
        w = event.working_memory_stored
        return f"version {w.version}, {w.estimated_tokens:,} tokens — {w.abstract}"
    if kind == "retry_scheduled":
        retry = event.retry_scheduled
        return f"attempt {retry.attempt} failed ({retry.reason}); next in {retry.delay.ToMilliseconds() / 1000:g} s"
    if kind in ("completed", "failed"):
        c = event.completed if kind == "completed" else event.failed
        if kind == "failed":
            return f"{c.error.message or 'failed'} after {c.attempt_count} attempt(s)"
        return f"working memory v{c.working_memory_version} after {c.attempt_count} attempt(s)"
    if kind == "memories_extracted":
        return memory_diff_text(event.memories_extracted)
    if kind == "heartbeat":
        return f"still {state_name(event.state)}"
    return ""


def memory_diff_text(diff: pb.MemoryDiff) -> str:
    """``memories: 2 created, 1 updated, 1 refused`` (or why extraction was off or failed)."""
    if diff.state == pb.MEMORY_EXTRACTION_STATE_OFF:
        return f"memories: off ({diff.message})"
    if diff.state == pb.MEMORY_EXTRACTION_STATE_FAILED:
        return f"memories: extraction failed: {diff.message}"
    counts = [
        (len(diff.created_memories), "created"),
        (len(diff.updated_memories), "updated"),
        (len(diff.merged_memories), "merged"),
        (len(diff.retired_memories), "retired"),
        (len(diff.deduplicated_memories), "already known"),
        (sum(1 for r in diff.refused if not r.duplicate), "refused"),
    ]
    said = ", ".join(f"{n} {label}" for n, label in counts if n) or "nothing new"
    recovered = ", ".join(map(short_id, diff.recovered_archives))
    return f"memories: {said}" + (f" (also from {recovered})" if recovered else "")


def is_failure(event: pb.CommitEvent) -> bool:
    """A FAILED commit, or a model call that ended in an error (the attempt may be retried)."""
    return event.stage == pb.COMMIT_STAGE_FAILED or (
        event.stage == pb.COMMIT_STAGE_LLM_RESPONSE_RECEIVED
        and event.llm_response_received.stop_reason == "error"
    )


def message_text(message: pb.Message, limit: int = 300) -> str:
    """A message's content on a few lines, long parts shortened."""
    pieces: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("kind")
        if kind == "text":
            pieces.append(part.text)
        elif kind == "tool_use":
            pieces.append(f"[tool_use {part.tool_use.name} {part.tool_use.input_json}]")
        elif kind == "tool_result":
            flag = " error" if part.tool_result.is_error else ""
            pieces.append(f"[tool_result{flag} {part.tool_result.content}]")
    text = " ".join(pieces)
    return text if len(text) <= limit else text[: limit - 1] + "…"
