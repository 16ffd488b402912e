"""What a session's history is made of, fetched and compared: every commit, every archive,
a commit's stored events with the time each stage took, and a per-section diff of two
working-memory versions with the guard decisions that touched each section.

Why apart from the commands: ``commits show``, ``memory history`` and ``memory diff`` answer
"why did my agent forget X?" from the same pieces, and a rule (which commits lie between two
versions, how a stage's duration is measured) is written once here.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from google.protobuf.timestamp_pb2 import Timestamp

from wm_client.client import WmClient
from wm_client.names import short_id
from wm_proto.v1 import resources_pb2 as pb

PAGE = 1000


class _Paged(Protocol):
    @property
    def next_page_token(self) -> str: ...


Page = TypeVar("Page", bound=_Paged)
Item = TypeVar("Item")


async def _every_page(
    fetch: Callable[[str], Awaitable[Page]], items: Callable[[Page], Sequence[Item]]
) -> list[Item]:
    """The items of every page of a listing, following next_page_token."""
    found: list[Item] = []
    token = ""
    while True:
        page = await fetch(token)
        found.extend(items(page))
        token = page.next_page_token
        if not token:
            return found


async def all_commits(client: WmClient, session_id: str) -> list[pb.Commit]:
    """Every commit of the session, newest first."""
    return await _every_page(
        lambda token: client.list_commits(session_id, page_size=PAGE, page_token=token),
        lambda page: page.commits,
    )


async def all_archives(client: WmClient, session_id: str) -> list[pb.Archive]:
    """Every archive of the session, in the server's order."""
    return await _every_page(
        lambda token: client.list_archives(session_id, page_size=PAGE, page_token=token),
        lambda page: page.archives,
    )


async def stored_events(client: WmClient, commit: pb.Commit) -> list[pb.CommitEvent]:
    """The events stored for a commit so far, without waiting for more (a running commit's
    log is read up to its ``last_sequence``)."""
    events: list[pb.CommitEvent] = []
    if commit.last_sequence <= 0:
        return events
    stream = client.watch_commit(commit.name)
    try:
        async for event in stream:
            events.append(event)
            if event.sequence >= commit.last_sequence:
                break
    finally:
        await stream.aclose()
    return events


def _millis(stamp: Timestamp) -> int:
    return stamp.seconds * 1000 + stamp.nanos // 1_000_000


def stage_durations(commit: pb.Commit, events: Sequence[pb.CommitEvent]) -> list[int]:
    """For each event, milliseconds since the event before it (the first: since Phase 1)."""
    durations: list[int] = []
    previous = _millis(commit.create_time)
    for event in events:
        now = _millis(event.create_time)
        durations.append(max(0, now - previous) if previous else 0)
        previous = now
    return durations


def duration_ms(commit: pb.Commit) -> int | None:
    """Phase 1 to the terminal state, in milliseconds; None while the commit runs."""
    if not commit.complete_time.seconds and not commit.complete_time.nanos:
        return None
    return max(0, _millis(commit.complete_time) - _millis(commit.create_time))


@dataclass
class SectionDiff:
    """One section between two versions: the unified diff lines and the decisions on it."""

    name: str
    lines: list[str]
    decisions: list[tuple[str, pb.GuardDecision]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.lines)


def decisions_between(
    commits: Sequence[pb.Commit],
    older: int,
    newer: int,
    versions: Sequence[pb.WorkingMemory] = (),
) -> list[tuple[str, pb.GuardDecision]]:
    """Guard decisions of the changes that stored a version in (older, newer], oldest first,
    each with where it came from: the commit's id, or ``client ops (vN)`` for a version
    ApplyWorkingMemoryOps stored (its decisions are on the version itself, among
    ``versions``)."""
    by_commit = {
        c.working_memory_version: c for c in commits if older < c.working_memory_version <= newer
    }
    on_version = {v.version: v for v in versions if older < v.version <= newer}
    found: list[tuple[str, pb.GuardDecision]] = []
    for number in sorted(by_commit.keys() | on_version.keys()):
        commit = by_commit.get(number)
        if commit is not None:
            found.extend((short_id(commit.name), d) for d in commit.decisions)
        else:
            found.extend((f"client ops (v{number})", d) for d in on_version[number].decisions)
    return found


def diff_versions(
    old: pb.WorkingMemory | None, new: pb.WorkingMemory, commits: Sequence[pb.Commit] = ()
) -> list[SectionDiff]:
    """Per section, in the document's order: the unified diff from ``old`` (None: empty) to
    ``new``, and the decisions of the changes between the two versions on that section (a
    client-applied version between them that is not ``new`` is not read: only its commit-less
    decisions would be missing, and ``wm memory history`` lists them)."""
    before = {s.name: s.body for s in old.sections} if old is not None else {}
    older = old.version if old is not None else 0
    decisions = decisions_between(commits, older, new.version, (new,))
    diffs: list[SectionDiff] = []
    for section in new.sections:
        lines = list(
            difflib.unified_diff(
                before.get(section.name, "").splitlines(),
                section.body.splitlines(),
                f"v{older}",
                f"v{new.version}",
                lineterm="",
            )
        )
        diffs.append(
            SectionDiff(
                section.name,
                lines[2:],  # the ---/+++ header is the same for every section
                [(cid, d) for cid, d in decisions if d.section == section.name],
            )
        )
    return diffs
