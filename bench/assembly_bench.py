"""Assembly benchmark: milliseconds per ``assemble`` over a 2,000-message session, in process.

Run with ``.venv/bin/python bench/assembly_bench.py``. It prints figures and asserts nothing,
because timings depend on the machine. The session is an agent's: 500 turns of a request, a
tool call, its result and an answer, every tenth result a large output already externalized (a
synopsis of about 1,500 characters with a pointer to the stored whole), and the 16 KB working
memory of ``bench/merge_bench.py``. Three budgets: 128,000 tokens (everything fits beside the
summary: the common case), 20,000 tokens (the older messages are dropped, the summary whole)
and 8,000 tokens (the summary is trimmed too: dozens of bullets).

With ``--against REV`` (a git revision, e.g. ``HEAD~3``), the assembly module of that revision
(``wm_core/_session/assembly.py`` and the modules it was split into, loaded from git beside the
current ones, on today's wm_core)
is timed too, in alternating batches on the same inputs, so that a slow spell of this shared
machine falls on both sides: the A/B of a change to the assembly.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(ROOT))

import wm_core  # noqa: E402
from bench.merge_bench import DOCUMENT  # noqa: E402
from wm_core import (  # noqa: E402
    Message,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)

BUDGETS = (128_000, 20_000, 8_000)
SYSTEM_PROMPT = "You are a coding agent working in the billing repository. " * 4
_LOG_LINE = "tests/test_ledger.py::test_case[{}] PASSED    [ 42%] duration 0.01s\n"


def _message(mid: str, role: Role, *parts: TextPart | ToolUsePart | ToolResultPart) -> Message:
    return Message(mid, role, parts, message_tokens(parts))


def session(turns: int = 500) -> tuple[list[Message], dict[str, str]]:
    """2,000 messages (four a turn) and the pointers of the externalized outputs."""
    messages: list[Message] = []
    pointers: dict[str, str] = {}
    for t in range(turns):
        huge = t % 10 == 0
        if huge:
            head = "".join(_LOG_LINE.format(n) for n in range(12))
            output = (
                f"[Tool output t{t} stored in full: 61,200 characters, 900 lines]\n{head}"
                "...\nE   AssertionError: 10 != 12\n"
            )
            pointers[f"r{t}"] = f"tool_output_read(id='t{t}')"
        else:
            output = f"ok {t}: " + "fine " * 40
        messages += [
            _message(f"u{t}", Role.USER, TextPart(f"request {t}: " + "why " * 50)),
            _message(
                f"a{t}", Role.ASSISTANT, ToolUsePart(f"t{t}", "bash", f'{{"cmd": "pytest {t}"}}')
            ),
            _message(f"r{t}", Role.USER, ToolResultPart(f"t{t}", output, False)),
            _message(f"s{t}", Role.ASSISTANT, TextPart(f"answer {t}: " + "so " * 40)),
        ]
    return messages, pointers


# The modules the assembly was split into (issue 39); a revision that has them loads them too.
_ASSEMBLY_MODULES = ("turns", "cutting", "prompt", "assembly")


def _load(revision: str) -> ModuleType:
    """The assembly module of ``revision``, loaded from git under a name of its own, with
    the modules it was split into (each under a name of its own too, its imports of them
    rewritten); the rest of wm_core is today's."""
    prefix = "wm_core._session._at_" + revision.replace("~", "_").replace("^", "_")
    loaded: dict[str, ModuleType] = {}
    for stem in _ASSEMBLY_MODULES:
        shown = subprocess.run(
            ["git", "show", f"{revision}:wm_core/_session/{stem}.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if shown.returncode != 0:
            continue  # not a module of that revision
        source = shown.stdout
        for other in loaded:
            source = source.replace(f"wm_core._session.{other} ", f"{prefix}_{other} ")
        name = f"{prefix}_{stem}"
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
            handle.write(source)
        spec = importlib.util.spec_from_file_location(name, handle.name)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        Path(handle.name).unlink()
        loaded[stem] = module
    return loaded["assembly"]


def _batch_ms(run: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls * 1000


def _medians(
    runs: Sequence[Callable[[], object]], rounds: int, calls: int
) -> list[tuple[float, float, float]]:
    """Per run: (median, lowest, highest) milliseconds per call over ``rounds`` batches,
    the runs taking turns batch by batch (the order flips every round)."""
    for run in runs:  # warm-up
        run()
    samples: list[list[float]] = [[] for _ in runs]
    for turn in range(rounds):
        order = range(len(runs)) if turn % 2 == 0 else reversed(range(len(runs)))
        for side in order:
            samples[side].append(_batch_ms(runs[side], calls))
    return [(statistics.median(s), min(s), max(s)) for s in samples]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--against", help="a git revision whose assembly is timed alongside")
    parser.add_argument("--rounds", type=int, default=15, help="batches per side (default 15)")
    parser.add_argument("--calls", type=int, default=5, help="calls per batch (default 5)")
    args = parser.parse_args(argv)
    messages, pointers = session()
    modules: list[tuple[str, ModuleType]] = [("current", wm_core)]
    if args.against:
        modules.append((args.against, _load(args.against)))
    print(f"session: {len(messages):,} messages, working memory {len(DOCUMENT.encode()):,} bytes")
    print(f"{'budget':>8} {'assembly':>12} {'ms p50':>8} {'min':>7} {'max':>7}  outcome")
    for budget in BUDGETS:
        runs = [
            functools.partial(module.assemble, budget, SYSTEM_PROMPT, DOCUMENT, messages, pointers)
            for _, module in modules
        ]
        figures = _medians(runs, args.rounds, args.calls)
        for (label, module), (median, low, high) in zip(modules, figures, strict=True):
            result = module.assemble(budget, SYSTEM_PROMPT, DOCUMENT, messages, pointers)
            outcome = (
                f"{len(result.messages)} messages, {result.working_memory_tokens:,} summary "
                f"tokens, {len(result.trimmed_items)} bullets trimmed, "
                f"{result.dropped_source_messages} messages dropped"
            )
            print(f"{budget:>8,} {label:>12} {median:8.2f} {low:7.2f} {high:7.2f}  {outcome}")
    print("ms: milliseconds per assemble() call, median (and range) of the batches per side.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
