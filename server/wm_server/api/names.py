"""Resource names of wm.v1 (AIP-122) in and out, over the proto's patterns.

The services work with ids (a session id, a commit id, an archive's sequence number); the
contract addresses resources by name. Each name's shape is the ``google.api.resource``
pattern of the proto, read once into ``wm_client.names.PATTERNS`` (the table both clients
use too; tests/conformance/names.json holds all three to it), so this module only says which
resource each field names. Requests reach it after the edge has checked each name against
its rule in the proto (``api.request_rules``), so parsing here is a split; a name of the wrong
kind still answers INVALID_ARGUMENT naming the field rather than failing later. Ids never
contain "/", which is what makes every split unambiguous.
"""

from __future__ import annotations

from wm_client.names import (
    AGENTS,
    ARCHIVE,
    COMMIT,
    EVERY,
    LATEST,
    MEMORY,
    MESSAGE,
    SESSION,
    TOOL_OUTPUT,
    USERS,
    WORKING_MEMORY,
    Pattern,
)
from wm_core import archive_name
from wm_server.errors import invalid
from wm_server.services.memories import OwnerSpec


def session(session_id: str) -> str:
    return SESSION.format(session_id)


def commit(session_id: str, commit_id: str) -> str:
    return COMMIT.format(session_id, commit_id) if commit_id else ""


def archive(session_id: str, seq: int | None) -> str:
    """An archive's name from its sequence number ("" for none: a skipped commit's)."""
    return ARCHIVE.format(session_id, archive_name(seq)) if seq else ""


def archive_of_id(session_id: str, archive_id: str) -> str:
    """An archive's name from its id (archive_001); "" for none."""
    return ARCHIVE.format(session_id, archive_id) if archive_id else ""


def message(session_id: str, message_id: str) -> str:
    return MESSAGE.format(session_id, message_id)


def tool_output(session_id: str, output_id: str) -> str:
    return TOOL_OUTPUT.format(session_id, output_id)


def working_memory(session_id: str, version: int) -> str:
    return WORKING_MEMORY.format(session_id, str(version)) if version else ""


def memory(memory_id: str) -> str:
    return MEMORY.format(memory_id) if memory_id else ""


def owner(kind: str, who: str) -> str:
    """A memory owner's name from the stored owner ("user", "u1" → users/u1)."""
    return f"{kind}s/{who}"


# --- in ----------------------------------------------------------------------------------
def _ids(pattern: Pattern, name: str, field: str) -> tuple[str, ...]:
    """The ids of ``name``, a name of ``pattern``; INVALID_ARGUMENT naming ``field`` if not."""
    ids = pattern.parse(name)
    if ids is None:
        raise invalid(field, f"must be a resource name {pattern.text}", "INVALID_FORMAT")
    return ids


def session_id(name: str, field: str = "name") -> str:
    """The id of a session's name ("sessions/-" is refused: no session has that id)."""
    (sid,) = _ids(SESSION, name, field)
    if sid == EVERY:
        raise invalid(field, f"{SESSION.format(EVERY)} names no session", "INVALID_FORMAT")
    return sid


def search_scope(parent: str) -> tuple[str, bool]:
    """SearchArchives' parent as (session id, every session): "sessions/-" is every one."""
    (sid,) = _ids(SESSION, parent, "parent")
    return ("", True) if sid == EVERY else (sid, False)


def commit_ids(name: str, field: str = "name") -> tuple[str, str]:
    """(session id, commit id) of a commit's name."""
    sid, cid = _ids(COMMIT, name, field)
    return sid, cid


def archive_ids(name: str, field: str = "name") -> tuple[str, str]:
    """(session id, archive id) of an archive's name."""
    sid, aid = _ids(ARCHIVE, name, field)
    return sid, aid


def archive_in(name: str, session: str, field: str) -> str:
    """The archive id of ``name``, an archive of ``session``; "" when ``name`` is empty."""
    if not name:
        return ""
    sid, aid = archive_ids(name, field)
    if sid != session:
        raise invalid(field, f"must be an archive of {SESSION.format(session)}", "INVALID_FORMAT")
    return aid


def tool_output_ids(name: str, field: str = "name") -> tuple[str, str]:
    """(session id, output id) of a tool output's name."""
    sid, oid = _ids(TOOL_OUTPUT, name, field)
    return sid, oid


def working_memory_version(name: str, field: str = "name") -> tuple[str, int]:
    """(session id, version) of a working memory's name; version 0 for ``latest``."""
    sid, version = _ids(WORKING_MEMORY, name, field)
    if version == LATEST:
        return sid, 0
    if not version.isdigit() or int(version) < 1:
        raise invalid(field, "the version must be a number from 1, or latest", "INVALID_FORMAT")
    return sid, int(version)


def memory_id(name: str, field: str = "name") -> str:
    (mid,) = _ids(MEMORY, name, field)
    return mid


def memory_ids(names: list[str], field: str) -> list[str]:
    return [memory_id(n, f"{field}[{i}]") for i, n in enumerate(names)]


_OWNER_KINDS = {
    USERS.removesuffix("/"): "user",
    AGENTS.removesuffix("/"): "agent",
    SESSION.collections[0]: "session",
}


def owner_in(name: str, field: str = "owner") -> OwnerSpec:
    """A memory owner's name as the services' owner: users/{u}, agents/{a}, sessions/{s}."""
    collection, _, who = name.partition("/")
    kind = _OWNER_KINDS.get(collection)
    if kind is None or not who or "/" in who:
        raise invalid(
            field, "must be users/{user_id}, agents/{agent_id} or sessions/{session}",
            "INVALID_FORMAT",
        )  # fmt: skip
    return OwnerSpec(
        who if kind == "user" else "",
        who if kind == "agent" else "",
        who if kind == "session" else "",
    )
