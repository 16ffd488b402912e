"""Resource names of wm.v1 (AIP-122) in and out: the one place that spells them.

The services work with ids (a session id, a commit id, an archive's sequence number); the
contract addresses resources by name. Requests reach this module after the edge has checked
each name against its pattern in the proto (``api.request_rules``), so parsing here is a
split; a name of the wrong kind still answers INVALID_ARGUMENT naming the field rather than
failing later. Ids never contain "/", which is what makes every split unambiguous.
"""

from __future__ import annotations

from wm_core import archive_name
from wm_server.errors import invalid
from wm_server.services.memories import OwnerSpec

SESSIONS = "sessions"
MEMORIES = "memories"
ALL_SESSIONS = "-"  # the parent "sessions/-" of SearchArchives (AIP-159)
LATEST = "latest"  # the version segment that reads a session's newest working memory


def session(session_id: str) -> str:
    return f"{SESSIONS}/{session_id}"


def commit(session_id: str, commit_id: str) -> str:
    return f"{SESSIONS}/{session_id}/commits/{commit_id}" if commit_id else ""


def archive(session_id: str, seq: int | None) -> str:
    """An archive's name from its sequence number ("" for none: a skipped commit's)."""
    return f"{SESSIONS}/{session_id}/archives/{archive_name(seq)}" if seq else ""


def archive_of_id(session_id: str, archive_id: str) -> str:
    """An archive's name from its id (archive_001); "" for none."""
    return f"{SESSIONS}/{session_id}/archives/{archive_id}" if archive_id else ""


def message(session_id: str, message_id: str) -> str:
    return f"{SESSIONS}/{session_id}/messages/{message_id}"


def tool_output(session_id: str, output_id: str) -> str:
    return f"{SESSIONS}/{session_id}/toolOutputs/{output_id}"


def working_memory(session_id: str, version: int) -> str:
    return f"{SESSIONS}/{session_id}/workingMemories/{version}" if version else ""


def memory(memory_id: str) -> str:
    return f"{MEMORIES}/{memory_id}" if memory_id else ""


def owner(kind: str, who: str) -> str:
    """A memory owner's name from the stored owner ("user", "u1" → users/u1)."""
    return f"{kind}s/{who}"


# --- in ----------------------------------------------------------------------------------
def _segments(name: str, field: str, collections: tuple[str, ...]) -> list[str]:
    """The ids of ``name``, whose collections must be ``collections`` in order."""
    parts = name.split("/")
    if len(parts) != 2 * len(collections) or any(
        parts[2 * i] != c or not parts[2 * i + 1] for i, c in enumerate(collections)
    ):
        pattern = "/".join(f"{c}/{{{c[:-1] if c.endswith('s') else c}}}" for c in collections)
        raise invalid(field, f"must be a resource name {pattern}", "INVALID_FORMAT")
    return parts[1::2]


def session_id(name: str, field: str = "name") -> str:
    """The id of a session's name ("sessions/-" is refused: no session has that id)."""
    (sid,) = _segments(name, field, (SESSIONS,))
    if sid == ALL_SESSIONS:
        raise invalid(field, "sessions/- names no session", "INVALID_FORMAT")
    return sid


def search_scope(parent: str) -> tuple[str, bool]:
    """SearchArchives' parent as (session id, every session): "sessions/-" is every one."""
    (sid,) = _segments(parent, "parent", (SESSIONS,))
    return ("", True) if sid == ALL_SESSIONS else (sid, False)


def commit_ids(name: str, field: str = "name") -> tuple[str, str]:
    """(session id, commit id) of a commit's name."""
    sid, cid = _segments(name, field, (SESSIONS, "commits"))
    return sid, cid


def archive_ids(name: str, field: str = "name") -> tuple[str, str]:
    """(session id, archive id) of an archive's name."""
    sid, aid = _segments(name, field, (SESSIONS, "archives"))
    return sid, aid


def archive_in(name: str, session: str, field: str) -> str:
    """The archive id of ``name``, an archive of ``session``; "" when ``name`` is empty."""
    if not name:
        return ""
    sid, aid = archive_ids(name, field)
    if sid != session:
        raise invalid(field, f"must be an archive of {SESSIONS}/{session}", "INVALID_FORMAT")
    return aid


def tool_output_ids(name: str, field: str = "name") -> tuple[str, str]:
    """(session id, output id) of a tool output's name."""
    sid, oid = _segments(name, field, (SESSIONS, "toolOutputs"))
    return sid, oid


def working_memory_version(name: str, field: str = "name") -> tuple[str, int]:
    """(session id, version) of a working memory's name; version 0 for ``latest``."""
    sid, version = _segments(name, field, (SESSIONS, "workingMemories"))
    if version == LATEST:
        return sid, 0
    if not version.isdigit() or int(version) < 1:
        raise invalid(field, "the version must be a number from 1, or latest", "INVALID_FORMAT")
    return sid, int(version)


def memory_id(name: str, field: str = "name") -> str:
    (mid,) = _segments(name, field, (MEMORIES,))
    return mid


def memory_ids(names: list[str], field: str) -> list[str]:
    return [memory_id(n, f"{field}[{i}]") for i, n in enumerate(names)]


_OWNER_KINDS = {"users": "user", "agents": "agent", "sessions": "session"}


def owner_in(name: str, field: str = "owner") -> OwnerSpec:
    """A memory owner's name as the services' owner: users/{u}, agents/{a}, sessions/{s}."""
    kind, _, who = name.partition("/")
    if kind not in _OWNER_KINDS or not who or "/" in who:
        raise invalid(
            field, "must be users/{user_id}, agents/{agent_id} or sessions/{session}",
            "INVALID_FORMAT",
        )  # fmt: skip
    return OwnerSpec(
        who if kind == "users" else "",
        who if kind == "agents" else "",
        who if kind == "sessions" else "",
    )
