"""Time the real reference merge next to ``wm_core.merge``, on exactly the same inputs.

Run with ``.venv/bin/python bench/reference_merge.py [--quick]`` (or ``bench/merge_bench.py
--reference``). The first run builds a throwaway virtualenv at ``var/reference-venv/`` (``var/``
is git-ignored) and installs the reference system from PyPI into it, pinned to
``openviking==0.5.2``, the release whose ``openviking/session/working_memory.py`` holds
``merge_wm_sections(old_wm, ops)``. Later runs reuse that virtualenv.

Licensing: the reference is AGPL. This project never depends on it, imports it or copies any of
it: it is not in pyproject.toml, and nothing in wm_core, the server or this file loads it. It is
only executed, in a separate process that runs the interpreter of that throwaway virtualenv,
which receives the inputs as JSON on stdin and answers timings as JSON on stdout.

The inputs are the op mixes of ``bench/merge_bench.py`` (``MIXES``): the reference gets the
tool-call dict form of each op (``SectionOp.to_dict()``), wm_core the ``SectionOp`` values, as in
merge_bench. Each side runs a warm-up, then both time batches of ``per_round`` calls in turns,
batch by batch (the order flips every round), so that a slow spell of this machine falls on
both; each figure is the median of its batches. A last line says for which mixes the two
output documents are byte-identical. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(ROOT))

from bench.merge_bench import MIXES, tool_call_ops  # noqa: E402
from wm_core import merge  # noqa: E402

REFERENCE_PIN = "openviking==0.5.2"
REFERENCE_VERSION = "0.5.2"
VENV = ROOT / "var" / "reference-venv"
# Written only once the install and an import check have succeeded.
_READY_MARKER = VENV / ".reference-ready"

FULL = {"rounds": 41, "per_round": 40}
QUICK = {"rounds": 5, "per_round": 10}

# Runs inside the reference virtualenv (isolated mode: nothing of this repository is on its
# path). Importing the reference takes seconds, so one process serves every batch: each stdin
# line is a request {"mixes": [[label, document, ops], ...], "rounds": R, "per_round": P,
# "warmup": bool}, answered by one stdout line
# {"version": ..., "medians": {label: us}, "outputs": {label: text}}.
_CHILD = r"""
import importlib.metadata, json, logging, statistics, sys, time

logging.disable(logging.CRITICAL)
out, sys.stdout = sys.stdout, sys.stderr  # keep anything the package prints off the JSON channel
from openviking.session.working_memory import merge_wm_sections

version = importlib.metadata.version("openviking")
for line in sys.stdin:
    request = json.loads(line)
    rounds, per_round = request["rounds"], request["per_round"]
    medians, outputs = {}, {}
    for label, document, ops in request["mixes"]:
        outputs[label] = merge_wm_sections(document, ops)
        for _ in range(per_round if request.get("warmup", True) else 0):
            merge_wm_sections(document, ops)
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(per_round):
                merge_wm_sections(document, ops)
            samples.append((time.perf_counter() - start) / per_round * 1e6)
        medians[label] = statistics.median(samples)
    out.write(json.dumps({"version": version, "medians": medians, "outputs": outputs}) + "\n")
    out.flush()
"""


class ReferenceUnavailable(RuntimeError):
    """The reference virtualenv could not be built, or the reference could not be run."""


@dataclass(frozen=True)
class Row:
    label: str
    wm_core_us: float
    reference_us: float
    same_output: bool


def _python() -> Path:
    return VENV / "bin" / "python"


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def ensure_reference_python() -> Path:
    """The interpreter of ``var/reference-venv``, building the virtualenv on first use."""
    python = _python()
    if _READY_MARKER.is_file() and python.is_file():
        return python
    print(
        f"reference: building a throwaway virtualenv at {VENV.relative_to(ROOT)}/ and installing "
        f"{REFERENCE_PIN} from PyPI into it (first run only; it pulls many dependencies and "
        "takes a few minutes and about 1.3 GB). It is never added to this project's dependencies.",
        flush=True,
    )
    steps = (
        ("create the virtualenv", [sys.executable, "-m", "venv", "--clear", str(VENV)]),
        (
            f"pip install {REFERENCE_PIN}",
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                REFERENCE_PIN,
            ],
        ),
        (
            "import openviking.session.working_memory",
            [str(python), "-I", "-c", "import openviking.session.working_memory"],
        ),
    )
    VENV.parent.mkdir(parents=True, exist_ok=True)
    for what, command in steps:
        print(f"reference: {what} ...", flush=True)
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise ReferenceUnavailable(f"could not {what}: {exc}") from exc
        if done.returncode != 0:
            raise ReferenceUnavailable(
                f"could not {what} (exit {done.returncode}) in {VENV}; delete that folder to "
                f"start over. Last output:\n{_tail(done.stderr + done.stdout)}"
            )
    _READY_MARKER.write_text(REFERENCE_PIN + "\n")
    print(f"reference: ready ({REFERENCE_PIN} in {VENV.relative_to(ROOT)}/)", flush=True)
    return python


def _inputs() -> list[tuple[str, str, dict[str, object], dict[str, dict[str, object]]]]:
    """(label, document, wm_core ops, reference ops) per mix, as merge_bench builds them."""
    rows = []
    for label, document, make_ops in MIXES:
        ops = dict(make_ops())
        as_dicts = tool_call_ops(ops)
        rows.append((label, document, ops, as_dicts))
    return rows


class _ReferenceProcess:
    """One long-lived timing process in the reference virtualenv (the import is slow)."""

    def __init__(self, python: Path) -> None:
        # Closed in close(); a file, not a pipe, so a chatty child can never block on it.
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115
        self._process = subprocess.Popen(
            [str(python), "-I", "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
            cwd=VENV,
        )

    def __enter__(self) -> _ReferenceProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._process.stdin and not self._process.stdin.closed:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._stderr.close()

    def _failure(self, what: str) -> ReferenceUnavailable:
        self._stderr.seek(0)
        return ReferenceUnavailable(
            f"the reference timing process {what}:\n{_tail(self._stderr.read())}"
        )

    def time_mixes(
        self,
        rounds: int,
        per_round: int,
        only: str | None = None,
        warmup: bool = True,
    ) -> tuple[dict[str, float], dict[str, str]]:
        """A pass over the mixes (or the one labelled ``only``):
        ({label: median us}, {label: output document})."""
        request = {
            "mixes": [
                [label, document, as_dicts]
                for label, document, _, as_dicts in _inputs()
                if only is None or label == only
            ],
            "rounds": rounds,
            "per_round": per_round,
            "warmup": warmup,
        }
        assert self._process.stdin is not None and self._process.stdout is not None
        try:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
        except BrokenPipeError:
            self._process.wait()
            raise self._failure(f"exited early (exit {self._process.returncode})") from None
        line = self._process.stdout.readline()
        if not line:
            self._process.wait()
            raise self._failure(f"answered nothing (exit {self._process.returncode})")
        try:
            answer = json.loads(line)
        except json.JSONDecodeError as exc:
            raise self._failure(f"answered no JSON: {line[:500]!r}") from exc
        if answer["version"] != REFERENCE_VERSION:
            raise ReferenceUnavailable(
                f"{VENV} holds openviking {answer['version']}, not {REFERENCE_VERSION}; "
                "delete that folder to rebuild it"
            )
        return answer["medians"], answer["outputs"]


def _batch_us(run: Callable[[], object], per_round: int) -> float:
    start = time.perf_counter()
    for _ in range(per_round):
        run()
    return (time.perf_counter() - start) / per_round * 1e6


def compare(rounds: int = 21, per_round: int = 40) -> list[Row]:
    """Both sides per mix, batch by batch in turns (the order flips every round), so that a
    slow spell of this machine falls on both; each figure is the median of its batches.

    Raises :class:`ReferenceUnavailable` if the reference cannot be built or run.
    """
    rows: list[Row] = []
    with _ReferenceProcess(ensure_reference_python()) as reference:
        for label, document, ops, _ in _inputs():

            def ours() -> float:
                return _batch_us(lambda: merge(document, ops), per_round)  # noqa: B023

            def theirs() -> float:
                medians, _ = reference.time_mixes(1, per_round, only=label, warmup=False)  # noqa: B023
                return medians[label]  # noqa: B023

            _, outputs = reference.time_mixes(1, per_round, only=label)  # with its warm-up
            ours()  # warm-up
            samples: tuple[list[float], list[float]] = ([], [])
            for turn in range(rounds):
                for side in (0, 1) if turn % 2 == 0 else (1, 0):
                    samples[side].append(ours() if side == 0 else theirs())
            rows.append(
                Row(
                    label,
                    statistics.median(samples[0]),
                    statistics.median(samples[1]),
                    merge(document, ops).document == outputs.get(label),
                )
            )
    return rows


def print_table(rows: Sequence[Row], rounds: int, per_round: int) -> None:
    print(f"{'mix':30} {'wm_core us':>10} {'openviking 0.5.2 us':>19} {'speed-up':>8}")
    for row in rows:
        print(
            f"{row.label:30} {row.wm_core_us:10.1f} {row.reference_us:19.1f} "
            f"{row.reference_us / row.wm_core_us:7.1f}x"
        )
    print(
        f"us: median microseconds per merge over {rounds} batches of {per_round} calls per side, "
        "wm_core (in process) and the reference (own process) taking turns batch by batch."
    )
    print(
        f"reference: merge_wm_sections from {REFERENCE_PIN}, installed from PyPI in "
        f"{VENV.relative_to(ROOT)}/, on the same documents and ops."
    )
    differ = [row.label for row in rows if not row.same_output]
    print(
        "output: byte-identical to the reference for "
        f"{len(rows) - len(differ)}/{len(rows)} mixes"
        + (
            f" (differs: {', '.join(differ)}; our guards differ there on purpose, DESIGN.md §2)"
            if differ
            else ""
        )
        + "."
    )


def run(quick: bool = False) -> None:
    """Compare and print the table (what ``--reference`` of merge_bench and this script do)."""
    settings = QUICK if quick else FULL
    rows = compare(**settings)
    print_table(rows, **settings)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer rounds and calls (a smoke run, noisier)"
    )
    args = parser.parse_args(argv)
    try:
        run(quick=args.quick)
    except ReferenceUnavailable as exc:
        print(f"reference unavailable: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
