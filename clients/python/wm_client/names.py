"""Resource names of wm.v1, built and taken apart in one place.

Why: the contract addresses every resource by its name (``sessions/s1/commits/c_0001``), while
the people and models using the client know short ids (``s1``, ``archive_001``,
``out.m12.0``, ``mem_…``). An id can never contain ``/``, so a value with the collection's
prefix is a name and anything else is an id: every public method of the client takes either
and turns it into the name here; displays turn names back into short ids with
:func:`short_id`.
"""

from __future__ import annotations

SESSIONS = "sessions/"
MEMORIES = "memories/"
USERS = "users/"
AGENTS = "agents/"
# SearchArchives' parent for every session of the tenant (AIP-159).
ALL_SESSIONS = "sessions/-"
LATEST = "latest"


def short_id(name: str) -> str:
    """The last segment of a name (``sessions/s1/archives/archive_001`` -> ``archive_001``);
    an id stays as it is."""
    return name.rsplit("/", 1)[-1]


def session_name(session: str) -> str:
    """``sessions/{session}`` for a session id, or the name itself; a child's name (a commit,
    an archive...) gives its session's name."""
    if not session.startswith(SESSIONS):
        return SESSIONS + session
    return "/".join(session.split("/", 2)[:2])


def session_id(session: str) -> str:
    """The session's id, from its id, its name or any of its children's names."""
    return session_name(session).removeprefix(SESSIONS)


def _child(session: str, collection: str, child: str) -> str:
    if child.startswith(SESSIONS):
        return child
    return f"{session_name(session)}/{collection}/{child}"


def commit_name(session: str, commit: str) -> str:
    """``sessions/{s}/commits/{c}`` from a session and a commit id, or the commit's name."""
    return _child(session, "commits", commit)


def archive_name(session: str, archive: str) -> str:
    """``sessions/{s}/archives/{a}`` from a session and ``archive_001``, or the name."""
    return _child(session, "archives", archive)


def messages_parent(session: str, archive: str = "") -> str:
    """What ListMessages pages: a session's live messages, or with ``archive`` (an id or a
    name, or an archive's name given as ``session``) that archive's messages."""
    if archive:
        return archive_name(session, archive)
    if "/archives/" in session:
        return session
    return session_name(session)


def message_name(session: str, message: str) -> str:
    """``sessions/{s}/messages/{m}`` from a session and a message id, or the name."""
    return _child(session, "messages", message)


def tool_output_name(session: str, tool_output: str) -> str:
    """``sessions/{s}/toolOutputs/{o}`` from a session and ``out.m12.0``, or the name."""
    return _child(session, "toolOutputs", tool_output)


def working_memory_name(session: str, version: int | str = LATEST) -> str:
    """``sessions/{s}/workingMemories/{version}``; version 0 (or "latest") is the newest."""
    return f"{session_name(session)}/workingMemories/{version or LATEST}"


def memory_name(memory: str) -> str:
    """``memories/{m}`` from a memory id (``mem_…``), or the name."""
    return memory if memory.startswith(MEMORIES) else MEMORIES + memory


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
