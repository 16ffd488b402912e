"""The ``wm`` command line against real server processes: in-process (client_support.run_cli,
the script's own entry point), and as the installed script where the process is the point."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from client_support import CONVERSATION, Run, creation_input, run_cli, run_wm, scripted_server

from support.server_process import ServerProcess, free_port
from wm_client.client import WmClient
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api

TWO_MESSAGES = "\n".join(
    json.dumps(m)
    for m in (
        {"id": "q1", "role": "user", "parts": [{"type": "text", "text": "Fix app/db.py please"}]},
        {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "Looking at it."}]},
    )
)


def _loaded(wm: Run, session: str) -> None:
    """The recorded conversation added and committed: a session with a working memory."""
    assert wm("add", session, str(CONVERSATION)).returncode == 0
    assert wm("commit", session, "--keep", "4", "--follow").returncode == 0


# --- sessions ------------------------------------------------------------------------------------
def test_add_reads_the_jsonl_format_and_reports_duplicates(wm: Run) -> None:
    first = wm("add", "cli-add", str(CONVERSATION))
    assert first.returncode == 0, first.stderr
    assert (
        "added 49 message(s), 0 duplicate(s) skipped to cli-add (session created)" in first.stdout
    )
    again = wm("add", "cli-add", "-", stdin=CONVERSATION.read_text())
    assert again.returncode == 0
    assert "added 0 message(s), 49 duplicate(s) skipped" in again.stdout
    assert "49 live" in again.stdout


def test_sessions_list_show_and_delete(wm: Run) -> None:
    assert wm("add", "cli-s1", "-", stdin=TWO_MESSAGES).returncode == 0
    listed = wm("sessions", "list")
    assert listed.returncode == 0 and "cli-s1" in listed.stdout
    rows = [json.loads(line) for line in wm("sessions", "list", "--json").stdout.splitlines()]
    mine = next(r for r in rows if r["name"] == "sessions/cli-s1")
    assert mine["message_count"] == 2 and mine["pending_tokens"] > 0
    shown = wm("sessions", "show", "cli-s1")
    assert shown.returncode == 0
    assert "live messages" in shown.stdout and "2 (" in shown.stdout
    assert "none yet" in shown.stdout  # no working memory before a commit
    refused = wm("sessions", "delete", "cli-s1")  # stdin is no terminal: nobody to ask
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    assert wm("sessions", "show", "cli-s1").returncode == 0
    deleted = wm("sessions", "delete", "cli-s1", "--yes")
    assert deleted.returncode == 0 and "deleted session cli-s1" in deleted.stdout
    gone = wm("sessions", "show", "cli-s1")
    assert gone.returncode == 4
    assert "session 'cli-s1' not found" in gone.stderr and gone.stdout == ""


def test_a_missing_session_is_exit_4_for_every_command(wm: Run) -> None:
    for args in (
        ("sessions", "delete", "ghost", "--yes"),
        ("commit", "ghost", "--follow"),
        ("memory", "show", "ghost"),
        ("assemble", "ghost", "--budget", "8000"),
        ("add", "ghost", "-", "--no-create"),
    ):
        stdin = TWO_MESSAGES if args[0] == "add" else None
        result = wm(*args, stdin=stdin)
        assert result.returncode == 4, (args, result.stderr)
        assert "session 'ghost' not found" in result.stderr


# --- commit --------------------------------------------------------------------------------------
def test_commit_without_follow_reports_phase1(wm: Run) -> None:
    assert wm("add", "cli-c1", str(CONVERSATION)).returncode == 0
    result = wm("commit", "cli-c1", "--keep", "10")
    assert result.returncode == 0, result.stderr
    assert "into archive_001; kept 1" in result.stdout  # the split keeps a tool call whole
    assert "Phase 2 runs in the background" in result.stdout
    skipped = wm("commit", "cli-c1", "--keep", "1000")
    assert skipped.returncode == 0 and "skipped: nothing to archive" in skipped.stdout


def test_commit_follow_shows_every_stage_until_the_end(wm: Run) -> None:
    assert wm("add", "cli-c2", str(CONVERSATION)).returncode == 0
    result = wm("commit", "cli-c2", "--keep", "4", "--follow")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    stages = [line.split()[2] for line in lines if line.startswith("[")]
    assert stages[0] == "archived" and stages[-1] == "completed"
    for stage in ("phase2_started", "llm_request_sent", "llm_response_received"):
        assert stage in stages
    assert stages.index("working_memory_stored") == len(stages) - 3
    assert stages[-2] == "memories_extracted"
    numbers = [int(line[1:4]) for line in lines if line.startswith("[")]
    assert numbers == list(range(1, len(numbers) + 1))
    assert "create call to offline" in result.stdout
    assert "completed: working memory v1" in lines[-1]
    events = [
        json.loads(x) for x in wm("commit", "cli-c2", "--follow", "--json").stdout.split("\n") if x
    ]
    assert events[-1]["terminal"] is True and events[-1]["stage"] == "COMMIT_STAGE_SKIPPED"


def test_commit_follow_shows_guard_decisions_and_a_failure_exits_5(tmp_path: Path) -> None:
    files = "- app/db.py — the schema, do not touch\n- app/cli.py — entry point"
    answers: list[dict[str, object]] = [
        {"tool_input": creation_input(session_title="Fix the CLI", files_context=files)},
        {
            "tool_input": {
                "sections": {
                    name: {"op": "KEEP"} for name in creation_input() if name != "Files & Context"
                }
                | {"Files & Context": {"op": "UPDATE", "content": "- app/cli.py — entry point"}}
            }
        },
        {"error": {"message": "model refused the request", "retryable": False}},
    ]
    server = scripted_server(tmp_path, answers).start()
    try:
        run = lambda *a, stdin=None: run_cli(server.address, *a, stdin=stdin)  # noqa: E731
        assert run("add", "g", "-", stdin=TWO_MESSAGES).returncode == 0
        assert run("commit", "g", "--keep", "0", "--follow").returncode == 0
        assert (
            run(
                "add", "g", "-", stdin=TWO_MESSAGES.replace('"q1"', '"q2"').replace('"a1"', '"a2"')
            ).returncode
            == 0
        )
        guarded = run("commit", "g", "--keep", "0", "--follow")
        assert guarded.returncode == 0, guarded.stderr
        assert "guard files on Files & Context: UPDATE" in guarded.stdout
        assert "restored 1" in guarded.stdout
        assert "1 guard decision(s)" in guarded.stdout
        memory = run("memory", "show", "g", "--raw")
        assert "app/db.py" in memory.stdout  # the guard kept the path the model dropped
        assert (
            run(
                "add", "g", "-", stdin=TWO_MESSAGES.replace('"q1"', '"q3"').replace('"a1"', '"a3"')
            ).returncode
            == 0
        )
        failed = run("commit", "g", "--keep", "0", "--follow")
        assert failed.returncode == 5
        assert "FAILED after 1 attempt(s): model refused the request" in failed.stdout
        assert "the previous working memory stays current" in failed.stdout
    finally:
        server.kill()


def test_commit_views_report_cache_reads_and_writes(tmp_path: Path) -> None:
    usage = {
        "input_tokens": 900,
        "output_tokens": 210,
        "cache_read_input_tokens": 4000,
        "cache_creation_input_tokens": 1500,
    }
    answers: list[dict[str, object]] = [
        {"tool_input": creation_input(session_title="Fix the CLI"), "usage": usage}
    ]
    server = scripted_server(tmp_path, answers).start()
    try:
        run = lambda *a, stdin=None: run_cli(server.address, *a, stdin=stdin)  # noqa: E731
        assert run("add", "c", "-", stdin=TWO_MESSAGES).returncode == 0
        followed = run("commit", "c", "--keep", "0", "--follow")
        assert followed.returncode == 0, followed.stderr
        # the working memory's call, then the memory extraction's (nothing scripted for it)
        response, _ = [
            line for line in followed.stdout.splitlines() if "llm_response_received" in line
        ]
        assert "900 in / 210 out, cache 4,000 read / 1,500 written tokens" in response
        assert followed.stdout.splitlines()[-1].endswith(
            "tokens: 900 in / 210 out, cache 4,000 read / 1,500 written (1 call)"
        )
        shown = run("sessions", "show", "c")
        assert shown.returncode == 0, shown.stderr
        assert "cache 4,000 read / 1,500 written (1 call)" in " ".join(shown.stdout.split())
    finally:
        server.kill()


# --- working memory, search, assemble -------------------------------------------------------------
def test_memory_show_renders_the_sections(wm: Run) -> None:
    _loaded(wm, "cli-m")
    shown = wm("memory", "show", "cli-m")
    assert shown.returncode == 0, shown.stderr
    assert "Working memory v1 · session cli-m" in shown.stdout
    for name in ("## Session Title", "## Files & Context", "## Errors & Corrections"):
        assert name in shown.stdout
    assert "• " in shown.stdout  # Markdown bullets rendered
    assert "ledgerline/importers/csv_importer.py" in shown.stdout
    raw = wm("memory", "show", "cli-m", "--raw").stdout
    document = json.loads(wm("memory", "show", "cli-m", "--json").stdout)["document"]
    assert raw.rstrip("\n") == document.rstrip("\n") and raw.startswith("# Working Memory")
    assert wm("memory", "show", "cli-m", "--version", "9").returncode == 4


def test_memory_show_without_a_working_memory(wm: Run) -> None:
    assert wm("add", "cli-empty", "-", stdin=TWO_MESSAGES).returncode == 0
    result = wm("memory", "show", "cli-empty")
    assert result.returncode == 4
    assert "has no working memory yet" in result.stderr and "wm commit cli-empty" in result.stderr


def test_search_finds_archived_messages(wm: Run) -> None:
    _loaded(wm, "cli-q")
    found = wm("search", "31.01.2025", "--session", "cli-q")
    assert found.returncode == 0, found.stderr
    assert "matching message(s) for '31.01.2025'" in found.stdout
    assert "cli-q archive_001 m001 (user)" in found.stdout
    data = json.loads(wm("search", "31.01.2025", "--session", "cli-q", "--json").stdout)
    assert data["total_matches"] >= 1 and all(
        h["archive"] == "sessions/cli-q/archives/archive_001" for h in data["hits"]
    )
    nothing = wm("search", "no such words anywhere", "--all")
    assert nothing.returncode == 0 and "no match" in nothing.stdout
    assert wm("search", "x").returncode == 2  # --session or --all is required
    hybrid = json.loads(
        wm("search", "31.01.2025", "--session", "cli-q", "--hybrid", "--json").stdout
    )  # the answer of SEARCH_MODE_HYBRID: it says how much was ranked by meaning
    assert hybrid["semantic_recall"].startswith("SEMANTIC_RECALL_") and hybrid["hits"]
    assert wm("search", "x", "--session", "cli-q", "--hybrid", "--ranked").returncode == 2


def test_assemble_within_a_budget(wm: Run) -> None:
    _loaded(wm, "cli-a")
    result = wm("assemble", "cli-a", "--budget", "8000")
    assert result.returncode == 0, result.stderr
    assert "8,000 tokens (1,200 reserved for the reply)" in result.stdout
    assert "[Session History Summary]" in result.stdout
    assert "system prompt addition" in result.stdout
    data = json.loads(wm("assemble", "cli-a", "--budget", "8000", "--json").stdout)
    assert data["working_memory_version"] == 1
    anthropic = json.loads(data["rendered_json"])  # as Anthropic Messages
    assert anthropic[0]["role"] == "user"
    refused = wm("assemble", "cli-a", "--budget", "0")
    assert refused.returncode == 2 and "invalid request: token_budget" in refused.stderr


# --- the demo ------------------------------------------------------------------------------------
def test_demo_replays_the_conversation_end_to_end(wm: Run) -> None:
    result = wm("demo", "--session", "cli-demo")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "replaying 49 messages in 4 turns" in out
    assert "background commit 1: archived" in out and "background commit 2: archived" in out
    assert "completed: working memory v3" in out
    assert "## Session Title" in out and "## Open Issues" in out
    assert "samples/dkb_2025-01.csv" in out  # a path of the session, kept in Files & Context
    assert "next context within 2,000 tokens" in out
    session = json.loads(wm("sessions", "show", "cli-demo", "--json").stdout)
    assert session["archive_count"] == 3 and session["working_memory_version"] == 3
    assert session["total_message_count"] == 49
    assert len(session["commits"]) >= 3 and len(session["archives"]) == 3


# --- finding the server, and failing clearly -------------------------------------------------------
def test_server_down_is_exit_3_with_a_clear_message() -> None:
    address = f"127.0.0.1:{free_port()}"
    result = run_wm(address, "sessions", "list", "--connect-timeout", "0.5")
    assert result.returncode == 3
    assert f"cannot reach the Working Memory Service at {address}" in result.stderr
    assert "WM_ADDRESS" in result.stderr and "Traceback" not in result.stderr


def test_address_option_wins_over_the_environment(server: ServerProcess) -> None:
    dead = f"127.0.0.1:{free_port()}"
    result = run_cli(dead, "--address", server.address, "sessions", "list")
    assert result.returncode == 0, result.stderr
    after = run_cli(dead, "sessions", "list", "--address", server.address)
    assert after.returncode == 0


def test_bad_input_and_bad_usage_are_exit_2(wm: Run, tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text(TWO_MESSAGES + '\n{"role": "user", "parts": "nope"}\n')
    result = wm("add", "cli-bad", str(broken))
    assert result.returncode == 2 and "line 3: parts must be a non-empty list" in result.stderr
    missing = wm("add", "cli-bad", str(tmp_path / "absent.jsonl"))
    assert missing.returncode == 2 and "No such file" in missing.stderr
    assert wm("assemble", "cli-bad").returncode == 2  # --budget is required
    assert wm("frobnicate").returncode == 2
    assert wm("sessions", "show", "cli-bad").returncode == 4  # nothing was stored


def test_after_the_demo_a_client_update_that_drops_paths_restores_every_one(
    wm: Run, server: ServerProcess
) -> None:
    """The bundled session, then ApplyWorkingMemoryOps with a Files & Context that keeps one
    path: every other path comes back with the files guard's decision, including the
    home-relative one under a hidden directory the offline summarizer wrote."""
    assert wm("demo", "--session", "cli-demo-paths").returncode == 0

    async def apply() -> tuple[str, list[str]]:
        async with WmClient(server.address) as client:
            before = await client.get_working_memory("cli-demo-paths")
            files = next(s.body for s in before.sections if s.name == "Files & Context")
            op = pb.SectionOp(
                section="Files & Context",
                kind=pb.SECTION_OP_KIND_UPDATE,
                content="- ledgerline/main.py — the entry point, edited",
            )
            answer = await client.apply_working_memory_ops("cli-demo-paths", [op])
            restored = [i for d in answer.decisions for i in d.restored_items]
            return files, restored

    files, restored = asyncio.run(apply())
    lines = [line for line in files.splitlines() if line.startswith("- ")]
    dropped = [line for line in lines if "ledgerline/main.py" not in line]
    assert len(dropped) >= 5, files
    assert sorted(restored) == sorted(line.strip() for line in dropped)


def test_a_small_budget_on_the_demo_is_shared_by_need_and_reported_per_part(
    wm: Run, server: ServerProcess
) -> None:
    """``wm assemble --budget 800`` on the demo emptied Key Facts with 285 tokens unused: the
    working memory now takes the room the messages leave, and each part says what it got."""
    assert wm("demo", "--session", "cli-demo-budget").returncode == 0

    async def assemble(budget: int) -> api.AssembleContextResponse:
        async with WmClient(server.address) as client:
            return await client.assemble_context("cli-demo-budget", budget)

    for budget in (800, 1_500, 3_000):
        answer = asyncio.run(assemble(budget))
        parts = {p.part: p for p in answer.parts}
        assert set(parts) >= {
            api.CONTEXT_PART_WORKING_MEMORY,
            api.CONTEXT_PART_UNCOVERED_ARCHIVES,
            api.CONTEXT_PART_LIVE_MESSAGES,
            api.CONTEXT_PART_CURRENT_TURN,
        }
        used = sum(
            p.kept_tokens for p in answer.parts if p.part != api.CONTEXT_PART_RECALLED_MEMORIES
        )
        assert used <= answer.usable_tokens
        wm_part = parts[api.CONTEXT_PART_WORKING_MEMORY]
        assert wm_part.kept_tokens == answer.working_memory_tokens > 0
        lost = sum(p.dropped_items for p in answer.parts) + len(answer.cut_parts)
        if lost:
            unused = answer.usable_tokens - used
            assert unused <= answer.usable_tokens // 20 + 16, (budget, unused, answer.parts)
        if wm_part.kept_tokens < wm_part.needed_tokens:
            assert wm_part.dropped_items == len(answer.trimmed_items) > 0
    shown = wm("assemble", "cli-demo-budget", "--budget", "800")
    assert shown.returncode == 0, shown.stderr
    assert "working_memory" in shown.stdout and "current_turn" in shown.stdout
    assert "unused" in shown.stdout


@pytest.mark.parametrize("args", [("--help",), ("commit", "--help"), ("demo", "--help")])
def test_help(wm: Run, args: tuple[str, ...]) -> None:
    result = wm(*args)
    assert result.returncode == 0 and "usage: wm" in result.stdout


def test_the_installed_script_runs_a_command(server: ServerProcess) -> None:
    """The ``wm`` console script (not only its function) is installed and works end to end:
    a pipe on standard input, the server through WM_ADDRESS, the answer on standard output."""
    added = run_wm(server.address, "add", "cli-script", "-", stdin=TWO_MESSAGES)
    assert added.returncode == 0, added.stderr
    assert "added 2 message(s), 0 duplicate(s) skipped to cli-script" in added.stdout
    helped = run_wm(None, "--help")
    assert helped.returncode == 0 and "usage: wm" in helped.stdout


def test_api_keys_are_sent_and_a_refusal_is_exit_6(tmp_path: Path) -> None:
    key = "k-" + "7" * 40
    server = ServerProcess(tmp_path, WM_API_KEYS=f"acme:{key}").start()
    try:
        refused = run_cli(server.address, "sessions", "list")
        assert refused.returncode == 6 and "not authenticated" in refused.stderr
        assert "--api-key" in refused.stderr
        assert run_cli(server.address, "sessions", "list", "--api-key", key).returncode == 0
        added = run_cli(server.address, "add", "k1", "-", stdin=TWO_MESSAGES, WM_API_KEY=key)
        assert added.returncode == 0, added.stderr
        listed = run_cli(server.address, "sessions", "list", "--json", WM_API_KEY=key)
        assert [json.loads(x)["name"] for x in listed.stdout.splitlines()] == ["sessions/k1"]
    finally:
        server.kill()
