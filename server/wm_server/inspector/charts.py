"""Pictures the inspector draws on the server, as inline SVG: no charting library, no script.

Why hand-drawn SVG rather than a vendored charting library: the three pictures are a line
chart over time, horizontal bars and vertical bars (each under 60 lines here), the pages must
work air-gapped and without script (a library would mean shipping and trusting ~200 KB of
JavaScript and loosening the Content-Security-Policy), and SVG presentation attributes are not
styles, so the strict policy holds. Every value drawn is a number computed here; every label
goes through :func:`~wm_server.inspector.layout.escape`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wm_client.describe import stage_name
from wm_proto.v1 import resources_pb2 as pb
from wm_server.inspector.layout import escape as _e

WIDTH, HEIGHT, PAD = 720, 220, 40
COLOURS = {
    "working memory": "#2a6fdb",
    "pending (archived at commit)": "#d6a400",
    "archived, cumulative": "#7a52b3",
    "live now": "#2f9e5a",
}


@dataclass(frozen=True)
class Series:
    """A named line: (seconds since the epoch, value) points, oldest first."""

    name: str
    points: Sequence[tuple[float, int]]


def _seconds(stamp: object) -> float:
    return getattr(stamp, "seconds", 0) + getattr(stamp, "nanos", 0) / 1e9


def session_series(
    session: pb.Session, commits: Sequence[pb.Commit], versions: dict[int, pb.WorkingMemory]
) -> list[Series]:
    """Tokens of a session over time: the working memory after each version, what each commit
    archived (the pending tokens it took), the archive's running total, and the live tokens
    now."""
    ordered = sorted((c for c in commits if c.archive), key=lambda c: _seconds(c.create_time))
    archived, total = [], 0
    for commit in ordered:
        total += commit.archived_tokens
        archived.append((_seconds(commit.create_time), total))
    wm = sorted((_seconds(v.create_time), v.estimated_tokens) for v in versions.values())
    return [
        Series("working memory", wm),
        Series(
            "pending (archived at commit)",
            [(_seconds(c.create_time), c.archived_tokens) for c in ordered],
        ),
        Series("archived, cumulative", archived),
        Series("live now", [(_seconds(session.update_time), session.live_tokens)]),
    ]


def tokens_over_time(series: Sequence[Series], marks: Sequence[tuple[float, str]]) -> str:
    """A line per series on one time axis, with a dashed vertical mark per commit."""
    points = [p for s in series for p in s.points]
    if not points:
        return "<p>nothing to draw yet</p>"
    start = min([t for t, _ in points] + [t for t, _ in marks])
    end = max([t for t, _ in points] + [t for t, _ in marks])
    span = max(end - start, 1e-6)
    top = max(max(v for _, v in points), 1)

    def x(t: float) -> float:
        return PAD + (t - start) / span * (WIDTH - 2 * PAD)

    def y(v: int) -> float:
        return HEIGHT - PAD - v / top * (HEIGHT - 2 * PAD)

    parts = [
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#aaa"/>',
        f'<text x="{PAD}" y="14">max {top:,} tokens</text>',
    ]
    for t, label in marks:
        parts.append(
            f'<line class="commit-mark" x1="{x(t):.1f}" y1="{PAD - 10}" x2="{x(t):.1f}" '
            f'y2="{HEIGHT - PAD}" stroke="#bbb" stroke-dasharray="3 3">'
            f"<title>{_e(label)}</title></line>"
        )
    legend_x = PAD
    for s in series:
        colour = COLOURS.get(s.name, "#555")
        xy = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in s.points)
        slug = s.name.split(" ")[0]
        if len(s.points) > 1:
            parts.append(
                f'<polyline class="series-{_e(slug)}" fill="none" stroke="{colour}" '
                f'stroke-width="2" points="{xy}"/>'
            )
        parts.extend(
            f'<circle class="series-{_e(slug)}" cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" '
            f'fill="{colour}"><title>{_e(s.name)}: {v:,}</title></circle>'
            for t, v in s.points
        )
        parts.append(
            f'<text x="{legend_x}" y="{HEIGHT - 10}" fill="{colour}">— {_e(s.name)}</text>'
        )
        legend_x += 7 * len(s.name) + 30  # ~6.5 px a character at the 11 px legend font
    return (
        f'<svg id="tokens-over-time" width="{WIDTH}" height="{HEIGHT}" role="img" '
        'aria-label="tokens over time with commit marks">' + "".join(parts) + "</svg>"
    )


def stage_bars(events: Sequence[pb.CommitEvent], durations: Sequence[int]) -> str:
    """One horizontal bar per stage of a commit: the milliseconds since the previous event."""
    rows = [
        (stage_name(e.stage), took)
        for e, took in zip(events, durations, strict=True)
        if e.stage != pb.COMMIT_STAGE_HEARTBEAT
    ]
    if not rows:
        return "<p>no stage recorded yet</p>"
    longest = max(max(took for _, took in rows), 1)
    label_width, bar_width, row = 190, WIDTH - 190 - 90, 18
    parts = []
    for index, (name, took) in enumerate(rows):
        top = index * row
        width = max(took / longest * bar_width, 1)
        parts.append(
            f'<text x="0" y="{top + 13}">{_e(name)}</text>'
            f'<rect class="stage-bar" x="{label_width}" y="{top + 3}" width="{width:.1f}" '
            f'height="{row - 6}" fill="#2a6fdb"><title>{_e(name)}: {took:,} ms</title></rect>'
            f'<text x="{label_width + width + 6:.1f}" y="{top + 13}">{took:,} ms</text>'
        )
    return (
        f'<svg id="stage-durations" width="{WIDTH}" height="{len(rows) * row}" role="img" '
        'aria-label="time each stage took">' + "".join(parts) + "</svg>"
    )


def daily_bars(days: Sequence[tuple[str, int, int]], *, element_id: str) -> str:
    """Vertical bars per day: (day, commits, failed commits); failures drawn over the total."""
    if not days:
        return "<p>no commits yet</p>"
    top = max(max(total for _, total, _ in days), 1)
    step = min(40.0, (WIDTH - 2 * PAD) / len(days))
    inner = HEIGHT - 2 * PAD
    parts = [f'<text x="{PAD}" y="14">max {top:,} commits a day</text>']
    for index, (day, total, failed) in enumerate(days):
        left = PAD + index * step
        height = total / top * inner
        failed_height = failed / top * inner
        parts.append(
            f'<rect class="day-commits" x="{left:.1f}" y="{HEIGHT - PAD - height:.1f}" '
            f'width="{step * 0.8:.1f}" height="{height:.1f}" fill="#2a6fdb">'
            f"<title>{_e(day)}: {total:,} commits, {failed:,} failed</title></rect>"
        )
        if failed:
            parts.append(
                f'<rect class="day-failures" x="{left:.1f}" y="{HEIGHT - PAD - failed_height:.1f}" '
                f'width="{step * 0.8:.1f}" height="{failed_height:.1f}" fill="#b3261e"/>'
            )
        if index % max(1, len(days) // 8) == 0:
            parts.append(f'<text x="{left:.1f}" y="{HEIGHT - PAD + 14}">{_e(day[5:])}</text>')
    return (
        f'<svg id="{_e(element_id)}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        'aria-label="commits per day, failures in red">' + "".join(parts) + "</svg>"
    )
