"""The live progress display on a terminal, fed with the real events of real commits."""

from __future__ import annotations

import io

from rich.console import Console

from support import builders as b
from support.providers import Answer, ProgrammableProvider, creation, ops
from wm_client import WmClient
from wm_client.describe import memory_diff_text
from wm_client.progress import CommitProgress
from wm_proto.v1 import resources_pb2 as pb
from wm_server.llm.port import LlmError


def _last_frame(buffer: io.StringIO) -> str:
    """The last frame the live display drew, whitespace collapsed."""
    return " ".join(buffer.getvalue().split("commit c-")[-1].split())


def _terminal() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=True, width=120, color_system=None), buffer


async def _follow(client: WmClient, session: str, console: Console) -> CommitProgress:
    with CommitProgress(console) as progress:
        assert progress.live  # a terminal: the checklist updates in place
        async for event in client.commit(session, 0, heartbeats=True):
            progress.update(event)
    return progress


async def test_the_checklist_shows_stages_and_guard_decisions(
    client: WmClient, provider: ProgrammableProvider
) -> None:
    provider.default_create = Answer(
        creation(session_title="Fix it", files_context="- app/db.py — schema\n- app/cli.py")
    )
    provider.updates.append(Answer(ops(files_context={"op": "UPDATE", "content": "- app/cli.py"})))
    await client.add_messages("p", [b.user("one", "1")], create_session_if_missing=True)
    await client.commit("p", 0).wait()
    await client.add_messages("p", [b.user("two", "2")])
    console, buffer = _terminal()
    progress = await _follow(client, "p", console)
    final = _last_frame(buffer)
    for label in ("Phase 1: archive", "Phase 2 started", "model request", "model response"):
        assert f"✓ {label}" in final
    assert "✓ guards" in final and "1 decision(s)" in final
    assert "✓ working memory stored" in final and "version 2" in final
    assert "✓ long-term memories" in final and "memories: nothing new" in final
    assert "guard decisions:" in final and "guard files on Files & Context" in final
    assert "\x1b[" in buffer.getvalue()  # drawn in place with cursor movements
    assert progress.state.terminal is not None
    assert progress.state.terminal.stage == pb.COMMIT_STAGE_COMPLETED


async def test_a_retry_is_shown_and_the_stages_start_again(
    client: WmClient, provider: ProgrammableProvider
) -> None:
    provider.creates.append(Answer(error=LlmError("overloaded", retryable=True)))
    await client.add_messages("r", [b.user("hello")], create_session_if_missing=True)
    console, buffer = _terminal()
    progress = await _follow(client, "r", console)
    final = _last_frame(buffer)
    assert "retry: attempt 1 failed (overloaded)" in final
    assert "attempt 2, create" in final and "✓ done" in final
    assert len(progress.state.retries) == 1


async def test_off_a_terminal_each_event_is_one_line(client: WmClient) -> None:
    await client.add_messages("plain", [b.user("hello")], create_session_if_missing=True)
    buffer = io.StringIO()
    console = Console(file=buffer, width=120)
    with CommitProgress(console) as progress:
        assert not progress.live
        async for event in client.commit("plain", 0, heartbeats=True):
            progress.update(event)
    lines = buffer.getvalue().splitlines()
    assert [line[:5] for line in lines] == [f"[{n:>3}]" for n in range(1, len(lines) + 1)]
    assert lines[0].split()[2] == "archived" and lines[-1].split()[2] == "completed"
    assert "\x1b[" not in buffer.getvalue()


async def test_a_failed_model_call_is_a_cross_not_a_tick(
    client: WmClient, provider: ProgrammableProvider
) -> None:
    provider.creates.append(Answer(error=LlmError("model refused the request", retryable=False)))
    await client.add_messages("f", [b.user("hello")], create_session_if_missing=True)
    console, buffer = _terminal()
    progress = await _follow(client, "f", console)
    final = _last_frame(buffer)
    assert "✗ model response" in final and "the model call failed" in final
    assert "✓ model response" not in final and "✗ done" in final
    assert progress.state.terminal is not None
    assert progress.state.terminal.stage == pb.COMMIT_STAGE_FAILED


def test_a_memory_diff_reads_as_counts_or_as_why_nothing_ran() -> None:
    diff = pb.MemoryDiff(
        state=pb.MEMORY_EXTRACTION_STATE_EXTRACTED,
        created_memories=["memories/mem_a", "memories/mem_b"],
        retired_memories=["memories/mem_c"],
        refused=[pb.MemoryOpRefusal(reason="drops 8443"), pb.MemoryOpRefusal(duplicate=True)],
        recovered_archives=["sessions/s/archives/archive_001"],
    )
    assert memory_diff_text(diff) == (
        "memories: 2 created, 1 retired, 1 refused (also from archive_001)"
    )
    off = pb.MemoryDiff(state=pb.MEMORY_EXTRACTION_STATE_OFF, message="off for this session")
    assert memory_diff_text(off) == "memories: off (off for this session)"
    failed = pb.MemoryDiff(state=pb.MEMORY_EXTRACTION_STATE_FAILED, message="HTTP 400")
    assert memory_diff_text(failed) == "memories: extraction failed: HTTP 400"
