"""Helpers of the client tests: running `wm` (in this process, or the installed script),
servers with scripted answers."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from support.conversation import CODING_SESSION
from support.providers import SECTION_NAMES
from support.server_process import ServerProcess

REPO = Path(__file__).resolve().parents[2]
CONVERSATION = CODING_SESSION
WM = Path(sys.executable).with_name("wm")

Run = Callable[..., subprocess.CompletedProcess[str]]


def _environment(address: str | None, env: dict[str, str]) -> dict[str, str]:
    """What ``wm`` sees: no WM_ setting of the shell, a wide plain page, the server through
    WM_ADDRESS as a user would give it, and the test's own variables."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    environment.update(COLUMNS="200", NO_COLOR="1", TERM="dumb")
    if address is not None:
        environment["WM_ADDRESS"] = address
    environment.update(env)
    return environment


def run_wm(
    address: str | None, *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``wm`` script, a process of its own: for what only the script shows
    (it is installed and starts, a terminal, a process's exit). Each run costs a Python start
    and the CLI's imports (about 0.45 CPU s); :func:`run_cli` runs the same code in-process."""
    environment = _environment(address, env)
    return subprocess.run(
        [str(WM), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )


@contextlib.contextmanager
def _as_a_process(environment: dict[str, str], stdin: str) -> Iterator[tuple[io.StringIO, ...]]:
    """The process-wide state a ``wm`` process would own, swapped in and back: the
    environment, and standard input and output as pipes (no terminal)."""
    saved_environment = dict(os.environ)
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(environment)
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    try:
        yield out, err
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.environ.clear()
        os.environ.update(saved_environment)


_ONE_AT_A_TIME = threading.Lock()  # the swapped state is the process's: one run at a time


def run_cli(
    address: str | None, *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``wm`` in this process: the script's own function (``wm_client.entry.main``) with
    ``args`` as its command line, against the real server at ``address``, seeing what the
    script would see (:func:`_as_a_process`; an empty, non-terminal standard input unless
    ``stdin`` is given). Its answer is the script's: the exit code (argparse's SystemExit
    included), and what it wrote on each stream; an uncaught exception is exit 1 with its
    traceback on standard error, as Python prints it.

    It runs on a thread of its own (and its own event loop, ``asyncio.run``), so an async
    test may call it too; the server must then not be on the test's loop, which waits."""
    from wm_client.entry import main

    result: list[int] = []

    def script() -> None:
        try:
            code: object = main(list(args))
        except SystemExit as stop:
            code = stop.code
        except Exception:
            traceback.print_exc()
            code = 1
        if code is None or isinstance(code, int):
            result.append(code or 0)
        else:  # sys.exit("message"): printed, exit 1
            print(code, file=sys.stderr)
            result.append(1)

    with _ONE_AT_A_TIME, _as_a_process(_environment(address, env), stdin or "") as (out, err):
        thread = threading.Thread(target=script, name="wm")
        thread.start()
        thread.join()
    return subprocess.CompletedProcess(["wm", *args], result[0], out.getvalue(), err.getvalue())


def scripted_server(
    data_dir: Path, responses: list[dict[str, object]], **env: str
) -> ServerProcess:
    """A server whose model answers are ``responses``, in order."""
    script = data_dir / "script.json"
    script.write_text(json.dumps({"responses": responses}))
    return ServerProcess(
        data_dir,
        WM_LLM_PROVIDER="scripted",
        WM_SCRIPTED_RESPONSES=str(script),
        WM_PHASE2_RETRY_BASE_DELAY="0.05",
        **env,
    )


def creation_input(**bodies: str) -> dict[str, str]:
    """A creation tool input: one body per section (keys with underscores)."""

    def key(name: str) -> str:
        return name.lower().replace(" & ", "_").replace(" ", "_")

    return {name: bodies.get(key(name), "") for name in SECTION_NAMES}
