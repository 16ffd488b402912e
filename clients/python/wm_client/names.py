"""Resource names of wm.v1, built and taken apart in one place.

Why: the contract addresses every resource by its name (``sessions/s1/commits/c_0001``), while
the people and models using the client know short ids (``s1``, ``archive_001``,
``out.m12.0``, ``mem_…``). An id can never contain ``/``, so a value with the collection's
prefix is a name and anything else is an id: every public method of the client takes either
and turns it into the name here; displays turn names back into short ids with
:func:`short_id`.

The names' shapes are not written here: :data:`PATTERNS` reads each resource's pattern
(``sessions/{session}/commits/{commit}``) from the ``google.api.resource`` annotation of the
generated stubs, so the proto is their one source. The server (``wm_server.api.names``) parses
with the same table, and the TypeScript client reads the same annotations; the shared cases in
tests/conformance/names.json hold all three to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.api import resource_pb2

from wm_proto.v1 import resources_pb2


@dataclass(frozen=True, slots=True)
class Pattern:
    """One resource's name pattern: its collections and the variable after each."""

    text: str  # as the proto writes it: "sessions/{session}/commits/{commit}"
    collections: tuple[str, ...]  # ("sessions", "commits")
    variables: tuple[str, ...]  # ("session", "commit")

    template: str  # "sessions/{}/commits/{}"

    @classmethod
    def of(cls, text: str) -> Pattern:
        parts = text.split("/")
        collections = tuple(parts[0::2])
        template = "/".join(f"{c}/{{}}" for c in collections)
        return cls(text, collections, tuple(p.strip("{}") for p in parts[1::2]), template)

    def format(self, *ids: str) -> str:
        """The name of the resource with these ids, one for each variable in order."""
        if len(ids) != len(self.collections):
            raise ValueError(f"{self.text} takes {len(self.collections)} ids, not {len(ids)}")
        return self.template.format(*ids)

    def parse(self, name: str) -> tuple[str, ...] | None:
        """The ids of ``name`` (one for each variable), or None when it is not of this
        pattern: other collections, another length or an empty id."""
        parts = name.split("/")
        if len(parts) != 2 * len(self.collections):
            return None
        ids = tuple(parts[1::2])
        if tuple(parts[0::2]) != self.collections or not all(ids):
            return None
        return ids


def _patterns() -> dict[str, Pattern]:
    """Each resource of wm.v1 by its type's short name (``Commit``), from the proto."""
    found: dict[str, Pattern] = {}
    for message in resources_pb2.DESCRIPTOR.message_types_by_name.values():
        options = message.GetOptions()
        if options.HasExtension(resource_pb2.resource):
            resource = options.Extensions[resource_pb2.resource]
            found[resource.type.rsplit("/", 1)[-1]] = Pattern.of(resource.pattern[0])
    return found


PATTERNS = _patterns()
SESSION = PATTERNS["Session"]
MESSAGE = PATTERNS["Message"]
TOOL_OUTPUT = PATTERNS["ToolOutput"]
COMMIT = PATTERNS["Commit"]
WORKING_MEMORY = PATTERNS["WorkingMemory"]
ARCHIVE = PATTERNS["Archive"]
MEMORY = PATTERNS["Memory"]

SESSIONS = SESSION.collections[0] + "/"
MEMORIES = MEMORY.collections[0] + "/"
# The owners of memories that are not sessions (rules.proto's memory_owner rule).
USERS = "users/"
AGENTS = "agents/"
# AIP-159's wildcard id: SearchArchives' parent for every session of the tenant.
EVERY = "-"
ALL_SESSIONS = SESSION.format(EVERY)
LATEST = "latest"


def short_id(name: str) -> str:
    """The last segment of a name (``sessions/s1/archives/archive_001`` -> ``archive_001``);
    an id stays as it is."""
    return name.rsplit("/", 1)[-1]


def session_name(session: str) -> str:
    """``sessions/{session}`` for a session id, or the name itself; a child's name (a commit,
    an archive...) gives its session's name."""
    if not session.startswith(SESSIONS):
        return SESSION.format(session)
    return "/".join(session.split("/", 2)[:2])


def session_id(session: str) -> str:
    """The session's id, from its id, its name or any of its children's names."""
    return session_name(session).removeprefix(SESSIONS)


def _child(session: str, pattern: Pattern, child: str) -> str:
    if child.startswith(SESSIONS):
        return child
    return pattern.format(session_id(session), child)


def commit_name(session: str, commit: str) -> str:
    """``sessions/{s}/commits/{c}`` from a session and a commit id, or the commit's name."""
    return _child(session, COMMIT, commit)


def archive_name(session: str, archive: str) -> str:
    """``sessions/{s}/archives/{a}`` from a session and ``archive_001``, or the name."""
    return _child(session, ARCHIVE, archive)


def messages_parent(session: str, archive: str = "") -> str:
    """What ListMessages pages: a session's live messages, or with ``archive`` (an id or a
    name, or an archive's name given as ``session``) that archive's messages."""
    if archive:
        return archive_name(session, archive)
    if f"/{ARCHIVE.collections[-1]}/" in session:  # an archive's name
        return session
    return session_name(session)


def message_name(session: str, message: str) -> str:
    """``sessions/{s}/messages/{m}`` from a session and a message id, or the name."""
    return _child(session, MESSAGE, message)


def tool_output_name(session: str, tool_output: str) -> str:
    """``sessions/{s}/toolOutputs/{o}`` from a session and ``out.m12.0``, or the name."""
    return _child(session, TOOL_OUTPUT, tool_output)


def working_memory_name(session: str, version: int | str = LATEST) -> str:
    """``sessions/{s}/workingMemories/{version}``; version 0 (or "latest") is the newest."""
    return WORKING_MEMORY.format(session_id(session), str(version or LATEST))


def memory_name(memory: str) -> str:
    """``memories/{m}`` from a memory id (``mem_…``), or the name."""
    return memory if memory.startswith(MEMORIES) else MEMORY.format(memory)


def owner_name(*, user_id: str = "", agent_id: str = "", session: str = "") -> str:
    """The name of a memory owner: ``users/{u}``, else ``agents/{a}``, else the session's
    name; ValueError when none is given."""
    if user_id:
        return USERS + user_id
    if agent_id:
        return AGENTS + agent_id
    if session:
        return session_name(session)
    raise ValueError("a memory owner needs a user id, an agent id or a session")


def owner_label(owner: str) -> str:
    """An owner for people: ``user ana``, ``agent bot``, ``session s1``."""
    kind, _, ident = owner.partition("/")
    return f"{kind.removesuffix('s')} {ident}" if ident else owner
