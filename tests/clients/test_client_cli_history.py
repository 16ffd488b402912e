"""``wm commits …``, ``wm compact``, ``wm memory history/diff`` and the CLI faults of issue 23,
against real server processes: in-process (client_support.run_cli) except where a terminal
or the process's own start is the point (the installed script)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest
from client_support import WM, Run, creation_input, run_cli, run_wm, scripted_server

from support.server_process import ServerProcess, free_port
from wm_client.channel import reachable_address


def _pair(n: int, text: str = "Fix app/db.py please") -> str:
    return "\n".join(
        json.dumps(m)
        for m in (
            {"id": f"q{n}", "role": "user", "parts": [{"type": "text", "text": text}]},
            {"id": f"a{n}", "role": "assistant", "parts": [{"type": "text", "text": "On it."}]},
        )
    )


def _keep_all_but(**sections: dict[str, str]) -> dict[str, object]:
    keep = {name: {"op": "KEEP"} for name in creation_input()}
    return {"tool_input": {"sections": keep | sections}}


FILES = "- app/db.py — the schema, do not touch\n- app/cli.py — entry point"
USAGE = {
    "input_tokens": 900,
    "output_tokens": 210,
    "cache_read_input_tokens": 4000,
    "cache_creation_input_tokens": 1500,
}


def _on_a_terminal(address: str, *args: str) -> str:
    """Run ``wm`` with its standard output on a pseudo-terminal; what it drew."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_") and k != "NO_COLOR"}
    env.update(WM_ADDRESS=address, TERM="xterm-256color", COLUMNS="120")
    proc = subprocess.Popen([str(WM), *args], stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=30)
    os.close(master)
    assert proc.returncode == 0
    return b"".join(chunks).decode(errors="replace")


def test_history_of_a_session_commits_decisions_diff_failure_and_retry(tmp_path: Path) -> None:
    answers: list[dict[str, object]] = [
        {"tool_input": creation_input(session_title="Fix the CLI", files_context=FILES)},
        _keep_all_but(**{"Files & Context": {"op": "UPDATE", "content": "- app/cli.py — main"}})
        | {"usage": USAGE},
        {"error": {"message": "model refused the request", "retryable": False}},
        _keep_all_but(**{"Open Issues": {"op": "UPDATE", "content": "- retry worked"}}),
    ]
    server = scripted_server(tmp_path, answers).start()
    try:

        def run(*a: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
            return run_cli(server.address, *a, stdin=stdin, **env)

        for n in (1, 2, 3):
            assert run("add", "h", "-", stdin=_pair(n)).returncode == 0
            expected = 5 if n == 3 else 0
            assert run("commit", "h", "--keep", "0", "--follow").returncode == expected

        # commits list: three commits, newest first, ids whole at 80 columns, numbers in JSON
        rows = [json.loads(x) for x in run("commits", "list", "h", "--json").stdout.splitlines()]
        assert [r["state"] for r in rows] == [
            "COMMIT_STATE_FAILED",
            "COMMIT_STATE_COMPLETED",
            "COMMIT_STATE_COMPLETED",
        ]
        failed, guarded, first = (r["name"].split("/")[-1] for r in rows)
        assert all(r["name"].startswith("sessions/h/commits/") for r in rows)
        assert rows[1]["token_usage"]["cache_read_input_tokens"] == 4000
        assert rows[2]["token_usage"]["cache_read_input_tokens"] == 0  # zero fields included
        assert isinstance(rows[1]["duration_ms"], int) and rows[0]["working_memory_version"] == 0
        listed = run("commits", "list", "h", COLUMNS="80")
        assert listed.returncode == 0, listed.stderr
        for commit_id in (failed, guarded, first):
            assert commit_id in listed.stdout
        assert "…" not in listed.stdout
        assert all(line == line.rstrip() for line in listed.stdout.splitlines())

        # commits show: stages with durations, tokens and cache, the decision, the memory diff
        shown = run("commits", "show", "h", guarded, COLUMNS="80")
        assert shown.returncode == 0, shown.stderr
        out = shown.stdout
        for stage in ("archived", "phase2_started", "llm_response_received", "completed"):
            assert stage in out
        assert " ms" in out and "4,000 read / 1,500 written" in out
        assert "900 in / 210 out" in out
        assert "guard files on Files & Context: UPDATE" in out
        assert "## Files & Context" in out
        assert "-- app/db.py" not in out  # the guard restored the path the model dropped
        assert "+- app/cli.py — main" in out
        assert all(line == line.rstrip() for line in out.splitlines())
        data = json.loads(run("commits", "show", "h", guarded, "--json").stdout)
        assert data["name"] == f"sessions/h/commits/{guarded}"
        assert data["working_memory_version"] == 2
        assert [e["sequence"] for e in data["events"]] == list(range(1, data["last_sequence"] + 1))
        assert all(isinstance(e["duration_ms"], int) for e in data["events"])
        [files] = [s for s in data["memory_diff"] if s["section"] == "Files & Context"]
        assert files["changed"] and files["decisions"][0]["guard"] == "files"

        # a failed commit: its error, exit 5; retried, it completes; the retry is watched
        broken = run("commits", "show", "h", failed)
        assert broken.returncode == 5
        assert "model refused the request" in broken.stdout and "failed" in broken.stdout
        retried = run("commits", "retry", "h", failed, "--follow")
        assert retried.returncode == 0, retried.stdout + retried.stderr
        assert "completed: working memory v3" in retried.stdout
        watched = run("commits", "watch", "h", guarded)
        assert watched.returncode == 0
        assert watched.stdout.splitlines()[0].startswith("[  1] archived")
        assert "completed: working memory v2" in watched.stdout
        tail = run("commits", "watch", "h", guarded, "--after", str(data["last_sequence"] - 1))
        replayed = [x.split()[2] for x in tail.stdout.splitlines() if x.startswith("[")]
        assert replayed == ["completed"]

        # memory history and diff
        hist = run("memory", "history", "h")
        assert hist.returncode == 0
        assert "v1" in hist.stdout and "v2" in hist.stdout and "v3" in hist.stdout
        versions = [
            json.loads(x) for x in run("memory", "history", "h", "--json").stdout.split("\n") if x
        ]
        assert [v["version"] for v in versions] == [1, 2, 3]
        assert versions[1]["changed_sections"] == ["Files & Context"]
        assert versions[1]["commit"] == f"sessions/h/commits/{guarded}"
        assert versions[1]["decision_count"] == 1
        assert versions[2]["changed_sections"] == ["Open Issues"]
        diff = run("memory", "diff", "h", "1", "2")
        assert diff.returncode == 0, diff.stderr
        assert "working memory v1 → v2" in diff.stdout
        assert "## Files & Context" in diff.stdout and "+- app/cli.py — main" in diff.stdout
        assert "guard files on Files & Context" in diff.stdout
        assert "\x1b[" not in diff.stdout  # no colour in a pipe
        whole = json.loads(run("memory", "diff", "h", "1", "--json").stdout)
        assert (whole["from_version"], whole["to_version"]) == (1, 3)
        assert {s["section"] for s in whole["sections"] if s["changed"]} == {
            "Files & Context",
            "Open Issues",
        }
        coloured = _on_a_terminal(server.address, "memory", "diff", "h", "1", "2")
        assert "\x1b[" in coloured and "app/cli.py" in coloured

        # a missing version says so, in the CLI and in the server's own words
        missing = run("memory", "show", "h", "--version", "9")
        assert missing.returncode == 4
        assert "has no working memory version 9 (latest: v3)" in missing.stderr
        assert run("memory", "diff", "h", "0").returncode == 2
        assert run("commits", "show", "h", "c-nope").returncode == 4
    finally:
        server.kill()


def test_compact_archives_everything_and_waits_for_phase2(wm: Run) -> None:
    assert wm("add", "cmp", "-", stdin=_pair(1)).returncode == 0
    result = wm("compact", "cmp")
    assert result.returncode == 0, result.stderr
    assert "completed: working memory v1" in result.stdout
    assert "2 message(s) archived" in result.stdout
    assert "→ 0; working memory v1" in result.stdout.splitlines()[-1]
    session = json.loads(wm("sessions", "show", "cmp", "--json").stdout)
    assert session["message_count"] == 0 and session["pending_tokens"] == 0
    assert [c["state"] for c in session["commits"]] == ["COMMIT_STATE_COMPLETED"]
    assert session["archives"][0]["name"] == "sessions/cmp/archives/archive_001"


def test_anthropic_content_blocks_and_lines_without_ids(wm: Run, tmp_path: Path) -> None:
    lines = [
        {"role": "user", "content": [{"type": "text", "text": "Run the tests"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running."},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "pytest"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "1 failed"}],
                }
            ],
        },
        {"role": "assistant", "content": "ok"},
        {"role": "assistant", "content": "ok"},  # the same text twice is two messages
    ]
    path = tmp_path / "anthropic.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    first = wm("add", "anth", str(path))
    assert first.returncode == 0, first.stderr
    assert "added 5 message(s), 0 duplicate(s) skipped to anth (session created)" in first.stdout
    again = wm("add", "anth", str(path), COLUMNS="20")
    [line] = again.stdout.splitlines()  # one line, however narrow the window: no hard wrap
    assert "added 0 message(s), 5 duplicate(s) skipped" in line and "5 live" in line
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"role": "user", "content": 7}) + "\n")
    refused = wm("add", "anth", str(bad))
    assert refused.returncode == 2 and "line 1: content must be a string" in refused.stderr


def test_a_large_file_is_sent_in_batches_bounded_by_count_and_bytes(wm: Run) -> None:
    many = "\n".join(json.dumps({"role": "user", "content": f"message {n}"}) for n in range(1500))
    result = wm("add", "big", "-", stdin=many)
    assert result.returncode == 0, result.stderr
    assert "added 1500 message(s), 0 duplicate(s) skipped to big (session created)" in result.stdout
    heavy = "\n".join(
        json.dumps({"id": f"h{n}", "role": "user", "content": chr(97 + n) * (900 * 1024)})
        for n in range(5)
    )
    sent = wm("add", "heavy", "-", stdin=heavy)
    assert sent.returncode == 0, sent.stderr
    assert "added 5 message(s)" in sent.stdout


def test_sessions_delete_asks_on_a_terminal_and_needs_yes_elsewhere(wm: Run) -> None:
    assert wm("add", "del", "-", stdin=_pair(1)).returncode == 0
    refused = wm("sessions", "delete", "del")
    assert refused.returncode == 2 and "not deleted" in refused.stderr
    assert wm("sessions", "show", "del").returncode == 0
    assert wm("sessions", "delete", "del", "-y").returncode == 0
    assert wm("sessions", "show", "del").returncode == 4


def test_an_address_without_a_port_means_the_default_port() -> None:
    assert reachable_address("127.0.0.1") == "127.0.0.1:50051"
    assert reachable_address("localhost") == "localhost:50051"
    assert reachable_address("[::1]") == "[::1]:50051"
    assert reachable_address("::1") == "[::1]:50051"
    assert reachable_address("0.0.0.0:7000") == "127.0.0.1:7000"
    assert reachable_address("dns:///wm.internal:443") == "dns:///wm.internal:443"
    result = run_cli(None, "--address", "127.0.0.1", "sessions", "list", "--connect-timeout", "1")
    # Whether or not something serves 50051 here, the port dialled is 50051, never 443.
    assert result.returncode in (0, 3, 6), result.stderr
    if result.returncode == 3:
        assert "at 127.0.0.1:50051" in result.stderr


@pytest.mark.serial  # times a process start against the 5 s default: no shared worker
def test_a_refused_connection_fails_at_once() -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = run_wm(address, "sessions", "list")  # the default timeout is 5 s
    elapsed = time.monotonic() - started
    assert result.returncode == 3 and f"at {address}" in result.stderr
    assert elapsed < 4.0, elapsed


def _answer_prompt(address: str, answer: str, *args: str) -> tuple[int, str]:
    """Run ``wm`` on a pseudo-terminal (input() writes its prompt to stderr), answer its
    prompt; (exit code, what it wrote)."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    env.update(WM_ADDRESS=address, NO_COLOR="1")
    proc = subprocess.Popen([str(WM), *args], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    while b"[y/N]" not in seen:
        ready, _, _ = select.select([master], [], [], 30)
        assert ready, f"no prompt: {seen!r}"
        seen += os.read(master, 4096)
    os.write(master, answer.encode() + b"\n")
    code = proc.wait(timeout=30)
    os.close(master)
    return code, seen.decode(errors="replace")


def test_sessions_delete_on_a_terminal_does_what_the_answer_says(
    wm: Run, server: ServerProcess
) -> None:
    assert wm("add", "ask", "-", stdin=_pair(1)).returncode == 0
    code, prompt = _answer_prompt(server.address, "n", "sessions", "delete", "ask")
    assert code == 2 and "delete session ask (2 messages" in prompt
    assert wm("sessions", "show", "ask").returncode == 0  # "no" kept it
    code, _ = _answer_prompt(server.address, "y", "sessions", "delete", "ask")
    assert code == 0
    assert wm("sessions", "show", "ask").returncode == 4


def test_client_applied_ops_keep_their_guard_decisions_like_a_commit(tmp_path: Path) -> None:
    """A version ApplyWorkingMemoryOps stored carries its guard decisions: on the version
    (GetWorkingMemory), in ``wm memory history`` and in ``wm memory diff``, as a commit's do."""
    import asyncio

    from wm_client.client import WmClient
    from wm_proto.v1 import resources_pb2 as pb

    answers: list[dict[str, object]] = [
        {"tool_input": creation_input(session_title="Fix the CLI", files_context=FILES)}
    ]
    server = scripted_server(tmp_path, answers).start()
    try:
        assert run_cli(server.address, "add", "c", "-", stdin=_pair(1)).returncode == 0
        assert run_cli(server.address, "commit", "c", "--keep", "0", "--follow").returncode == 0

        async def apply() -> tuple[int, list[str], list[str]]:
            async with WmClient(server.address) as client:
                op = pb.SectionOp(
                    section="Files & Context",
                    kind=pb.SECTION_OP_KIND_UPDATE,
                    content="- app/cli.py — the new entry point",
                )
                answer = await client.apply_working_memory_ops("c", [op])
                stored = await client.get_working_memory("c", version=answer.working_memory.version)
                return (
                    stored.version,
                    [d.guard for d in stored.decisions],
                    [i for d in stored.decisions for i in d.restored_items],
                )

        version, guards, restored = asyncio.run(apply())
        assert version == 2 and guards == ["files"]
        assert any("app/db.py" in item for item in restored)
        rows = [
            json.loads(x)
            for x in run_cli(server.address, "memory", "history", "c", "--json").stdout.splitlines()
            if x
        ]
        assert rows[1]["commit"] == "" and rows[1]["archive"] == ""
        assert rows[1]["decision_count"] == 1
        table = run_cli(server.address, "memory", "history", "c").stdout
        line = next(x for x in table.splitlines() if "(client ops)" in x)
        assert " 1 " in line  # the decision count, not "-"
        diff = run_cli(server.address, "memory", "diff", "c", "1", "2")
        assert "guard files on Files & Context" in diff.stdout
        assert "client ops (v2)" in diff.stdout
    finally:
        server.kill()
