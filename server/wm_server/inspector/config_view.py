"""A session's configuration as a person reads it: every field, its effective value, and
where that value came from.

A session's ``SessionConfig`` is resolved when it is created (the server's default,
``WM_DEFAULT_SESSION_CONFIG``, under what the request set) and changed by UpdateSession; a
field still unset means the server's own behaviour applies (a server setting, or "off"). The
inspector is told, at start, the server's default config and what each unset field falls back
to (:class:`ConfigDefaults`); a set field equal to the server's default is shown as coming from
it, any other set field as the session's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.message import Message

from wm_proto.v1 import resources_pb2 as pb
from wm_server.inspector.layout import escape as _e

# Every field of SessionConfig a person can set, as (path, label).
FIELDS: tuple[tuple[str, str], ...] = (
    ("auto_commit.pending_token_threshold", "auto-commit at pending tokens"),
    ("auto_commit.message_count_threshold", "auto-commit at live messages"),
    ("auto_commit.idle_timeout", "auto-commit when idle for"),
    ("auto_commit.min_commit_interval", "no auto-commit sooner than"),
    ("auto_commit.keep_recent_count", "auto-commit keeps messages"),
    ("auto_commit.keep_recent_turns", "auto-commit keeps turns"),
    ("memory_extraction", "long-term memory extraction"),
    ("tool_output_inline_chars", "tool outputs stored apart above (characters)"),
    ("model.provider", "model provider"),
    ("model.model", "model"),
)
_OFF = "off (not set)"
# What an unset field means by the contract itself (SessionConfig's comments), whatever the
# server's settings.
CONTRACT_UNSET = {
    "auto_commit.keep_recent_count": "10 (the auto-commit policy's default)",
    "auto_commit.keep_recent_turns": "off (threshold commits keep messages)",
}


@dataclass(frozen=True)
class ConfigDefaults:
    """The server's default config, and the text shown for a field no config sets."""

    server_default: pb.SessionConfig = field(default_factory=pb.SessionConfig)
    unset: dict[str, str] = field(default_factory=dict)


def _get(config: Message, path: str) -> tuple[bool, object]:
    """(present, value) of a dotted path; a Duration reads as its seconds."""
    node: Message = config
    *parents, leaf = path.split(".")
    for name in parents:
        if not node.HasField(name):
            return False, None
        node = getattr(node, name)
    value = getattr(node, leaf)
    if leaf in ("idle_timeout", "min_commit_interval"):
        present = node.HasField(leaf) and value.ToNanoseconds() > 0
        return present, f"{value.ToNanoseconds() / 1e9:g} s"
    if leaf == "model":  # ModelChoice.model: plain string, set when not empty
        return bool(value), value
    if leaf == "provider":
        return bool(value), value
    return node.HasField(leaf), value


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def config_rows(config: pb.SessionConfig, defaults: ConfigDefaults) -> list[tuple[str, str, str]]:
    """(label, effective value, where it came from) for every field of :data:`FIELDS`."""
    rows = []
    for path, label in FIELDS:
        present, value = _get(config, path)
        if present:
            default_present, default = _get(defaults.server_default, path)
            source = (
                "server default (WM_DEFAULT_SESSION_CONFIG)"
                if default_present and default == value
                else "set on this session"
            )
            rows.append((label, _text(value), source))
        else:
            meaning = defaults.unset.get(path) or CONTRACT_UNSET.get(path, _OFF)
            rows.append((label, meaning, "not set: the server's behaviour"))
    return rows


def config_table(session: pb.Session, defaults: ConfigDefaults) -> str:
    rows = "".join(
        f"<tr><th>{_e(label)}</th><td>{_e(value)}</td><td class=source>{_e(source)}</td></tr>"
        for label, value, source in config_rows(session.config, defaults)
    )
    return (
        "<table id=config><tr><th>setting</th><th>effective value</th><th>from</th></tr>"
        f"{rows}</table>"
    )
