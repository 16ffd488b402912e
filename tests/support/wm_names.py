"""Resource names of wm.v1 for tests: a bare id (as tests name their sessions) or a name.

An id never contains "/", so a value that starts with its collection is already a name.
"""

from __future__ import annotations


def session(session: str) -> str:
    return session if session.startswith("sessions/") else f"sessions/{session}"


def commit(session_id: str, commit: str) -> str:
    return commit if "/" in commit else f"{session(session_id)}/commits/{commit}"


def archive(session_id: str, archive: str) -> str:
    return archive if "/" in archive else f"{session(session_id)}/archives/{archive}"


def working_memory(session_id: str, version: int | str = "latest") -> str:
    """A version of a session's working memory; version 0 (unset) or "latest" is the newest."""
    return f"{session(session_id)}/workingMemories/{version or 'latest'}"


def tool_output(session_id: str, output: str) -> str:
    return output if "/" in output else f"{session(session_id)}/toolOutputs/{output}"


def memory(memory: str) -> str:
    return memory if memory.startswith("memories/") else f"memories/{memory}"


def last_segment(name: str) -> str:
    """The id at the end of a resource name (a commit's, an archive's, a memory's)."""
    return name.rsplit("/", 1)[-1]


def user(user_id: str) -> str:
    """The memory owner of a user."""
    return f"users/{user_id}"


def agent(agent_id: str) -> str:
    """The memory owner of an agent."""
    return f"agents/{agent_id}"
