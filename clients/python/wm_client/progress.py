"""The live progress display of a commit: Phase 1, the Phase 2 stages, the guard decisions.

Why two faces: on a terminal a checklist of stages updates in place (with a spinner on the
stage in progress and the time since the commit started), so a person sees where a slow
Phase 2 is; anywhere else (a pipe, a log, a test) each event becomes one line as it arrives,
which is what a script wants to read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from wm_client.describe import event_detail, is_failure
from wm_client.names import short_id
from wm_client.render import decision_text, event_line
from wm_proto.v1 import resources_pb2 as pb

# The checklist: (label, stages that advance it).
_STEPS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("Phase 1: archive", (pb.COMMIT_STAGE_ARCHIVED, pb.COMMIT_STAGE_SKIPPED)),
    ("Phase 2 started", (pb.COMMIT_STAGE_PHASE2_STARTED,)),
    ("model request", (pb.COMMIT_STAGE_LLM_REQUEST_SENT,)),
    ("model response", (pb.COMMIT_STAGE_LLM_RESPONSE_RECEIVED,)),
    ("ops parsed", (pb.COMMIT_STAGE_OPS_PARSED,)),
    ("guards", (pb.COMMIT_STAGE_GUARD_DECISION,)),
    ("working memory stored", (pb.COMMIT_STAGE_WORKING_MEMORY_STORED,)),
    ("long-term memories", (pb.COMMIT_STAGE_MEMORIES_EXTRACTED,)),
    ("done", (pb.COMMIT_STAGE_COMPLETED, pb.COMMIT_STAGE_FAILED)),
)
_STEP_OF = {stage: index for index, (_, stages) in enumerate(_STEPS) for stage in stages}


@dataclass
class _Step:
    label: str
    detail: str = ""
    state: str = "waiting"  # waiting, done, failed, skipped


@dataclass
class ProgressState:
    """What the display knows so far; updated by :meth:`CommitProgress.update`."""

    steps: list[_Step] = field(default_factory=lambda: [_Step(label) for label, _ in _STEPS])
    decisions: list[pb.GuardDecision] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)
    current: int = 0
    terminal: pb.CommitEvent | None = None
    commit: str = ""  # the commit's name, from its first event
    started: float = field(default_factory=time.monotonic)

    def apply(self, event: pb.CommitEvent) -> None:
        self.commit = self.commit or event.commit
        if event.stage == pb.COMMIT_STAGE_HEARTBEAT:
            return
        if event.stage == pb.COMMIT_STAGE_RETRY_SCHEDULED:
            self.retries.append(event_detail(event))
            for step in self.steps[1:]:
                step.state, step.detail = "waiting", ""
            self.current = 1
            return
        index = _STEP_OF.get(event.stage)
        if index is None:
            return
        for earlier in self.steps[:index]:
            if earlier.state == "waiting":
                earlier.state = "skipped"
        step = self.steps[index]
        if event.stage == pb.COMMIT_STAGE_GUARD_DECISION:
            self.decisions.append(event.guard_decision)
            step.detail = f"{len(self.decisions)} decision(s)"
        else:
            step.detail = event_detail(event)
        step.state = "failed" if is_failure(event) else "done"
        self.current = index + 1
        if event.terminal:
            self.terminal = event
            if event.stage == pb.COMMIT_STAGE_SKIPPED:
                step.detail = event_detail(event)
                for later in self.steps[index + 1 :]:
                    later.state = "skipped"


class CommitProgress:
    """Shows a commit's events as they arrive; a context manager around the stream loop."""

    def __init__(self, console: Console, *, live: bool | None = None) -> None:
        self.console = console
        self.live = console.is_terminal if live is None else live
        self.state = ProgressState()
        self._live: Live | None = None

    def __enter__(self) -> CommitProgress:
        if self.live:
            self._live = Live(
                get_renderable=self.renderable,
                console=self.console,
                refresh_per_second=8,
                transient=False,
            )
            self._live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None

    def update(self, event: pb.CommitEvent) -> None:
        self.state.apply(event)
        if not self.live and event.stage != pb.COMMIT_STAGE_HEARTBEAT:
            self.console.print(event_line(event))

    def renderable(self) -> RenderableType:
        """The checklist, the guard decisions and the retries, as they stand now."""
        state = self.state
        elapsed = time.monotonic() - state.started
        table = Table.grid(padding=(0, 1))
        table.add_column(width=2)
        table.add_column(style="bold", min_width=22)
        table.add_column()
        for index, step in enumerate(state.steps):
            mark: RenderableType
            if step.state == "done":
                mark = Text("✓", style="green")
            elif step.state == "failed":
                mark = Text("✗", style="bold red")
            elif step.state == "skipped":
                mark = Text("·", style="dim")
            elif index == state.current and state.terminal is None:
                mark = Spinner("dots", style="cyan")
            else:
                mark = Text(" ")
            table.add_row(mark, Text(step.label), Text(step.detail))
        title = Text.assemble(
            ("commit ", "bold"), short_id(state.commit) or "(starting)", f"  {elapsed:.1f} s"
        )
        parts: list[RenderableType] = [title, table]
        if state.decisions:
            parts.append(Text("guard decisions:", style="bold"))
            parts.extend(decision_text(d) for d in state.decisions)
        for retry in state.retries:
            parts.append(Text(f"retry: {retry}", style="yellow"))
        return Group(*parts)
