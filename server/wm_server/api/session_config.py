"""SessionConfig at the edge: checked, resolved over the server's default, and changed by
field mask (AIP-134).

A request's config is read with presence: an unset field takes the default when the session
is created, and a field an UpdateSession mask names but leaves unset goes back to the
default. Durations and the model choice are taken whole (a set ``idle_timeout`` of zero is
"off", not "unset"; a new provider does not inherit the old one's model). Every value is
checked against the bounds the contract states before anything is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Any, Literal

from google.protobuf import json_format

from wm_core import AutoCommitPolicy, SessionSettings
from wm_proto.v1 import resources_pb2 as pb
from wm_server.errors import FieldViolation, InvalidArgument, invalid
from wm_server.services.phase1 import MAX_KEEP_TURNS
from wm_server.services.validation import MAX_KEEP_RECENT, MIN_INLINE_CHARS

# A model choice is checked by the composition root (the providers it configured).
ModelCheck = Callable[[str, str], str | None]  # (provider, model) → what is wrong, or None

_DAY = 86_400.0
# Inclusive bounds of the numbers; a threshold of 0 is "off".
_BOUNDS: dict[str, tuple[float, float]] = {
    "pending_token_threshold": (0, 10_000_000),
    "message_count_threshold": (0, 100_000),
    "idle_timeout": (0, 30 * _DAY),
    "min_commit_interval": (0, _DAY),
    "keep_recent_count": (0, MAX_KEEP_RECENT),
    "keep_recent_turns": (0, MAX_KEEP_TURNS),
}
_INLINE_CHARS = (MIN_INLINE_CHARS, 10_000_000)
_Count = Literal[
    "pending_token_threshold", "message_count_threshold", "keep_recent_count", "keep_recent_turns"
]
_Span = Literal["idle_timeout", "min_commit_interval"]
_SECONDS: dict[_Span, str] = {
    "idle_timeout": "idle_timeout_seconds",
    "min_commit_interval": "min_commit_interval_seconds",
}
_COUNTS: tuple[_Count, ...] = (
    "pending_token_threshold",
    "message_count_threshold",
    "keep_recent_count",
    "keep_recent_turns",
)
_TOP = ("memory_extraction", "tool_output_inline_chars")


def partial_settings(
    config: pb.SessionConfig, field: str, check_model: ModelCheck
) -> SessionSettings:
    """What ``config`` sets (None elsewhere), checked; ``field`` names it in violations."""
    problems: list[FieldViolation] = []
    policy: dict[str, Any] = {}
    auto = config.auto_commit
    for name in _COUNTS:
        if auto.HasField(name):
            value = getattr(auto, name)
            low, high = _BOUNDS[name]
            if not low <= value <= high:
                problems.append(_out_of_range(f"{field}.auto_commit.{name}", low, high))
            policy[name] = value
    for span, attribute in _SECONDS.items():
        if auto.HasField(span):
            duration = getattr(auto, span)
            seconds = duration.seconds + duration.nanos / 1e9
            low, high = _BOUNDS[span]
            too_short = span == "idle_timeout" and 0 < seconds < 1  # 0 is off, else >= 1 s
            if not low <= seconds <= high or too_short:
                problems.append(
                    _out_of_range(f"{field}.auto_commit.{span}", low, high, unit=" seconds")
                )
            policy[attribute] = seconds
    top: dict[str, Any] = {}
    if config.HasField("memory_extraction"):
        top["memory_extraction"] = config.memory_extraction
    if config.HasField("tool_output_inline_chars"):
        chars = config.tool_output_inline_chars
        if not _INLINE_CHARS[0] <= chars <= _INLINE_CHARS[1]:
            problems.append(_out_of_range(f"{field}.tool_output_inline_chars", *_INLINE_CHARS))
        top["tool_output_inline_chars"] = chars
    if config.HasField("model"):
        provider, model = config.model.provider, config.model.model
        wrong = (
            "required: one of the providers the server is configured for"
            if not provider
            else check_model(provider, model)
        )
        if wrong:
            problems.append(FieldViolation(f"{field}.model", wrong, "INVALID_VALUE"))
        top["provider"], top["model"] = provider, model or None
    if problems:
        raise InvalidArgument(problems)
    return SessionSettings(auto_commit=AutoCommitPolicy(**policy), **top)


def overlay(base: SessionSettings, top: SessionSettings) -> SessionSettings:
    """``top``'s set fields over ``base`` (the model choice taken whole)."""
    policy = replace(
        base.auto_commit,
        **{
            f.name: v
            for f in fields(AutoCommitPolicy)
            if (v := getattr(top.auto_commit, f.name)) is not None
        },
    )
    values = {n: getattr(top, n) for n in _TOP if getattr(top, n) is not None}
    if top.provider is not None:
        values.update(provider=top.provider, model=top.model)
    return replace(base, auto_commit=policy, **values)


def masked(
    current: SessionSettings,
    update: SessionSettings,
    default: SessionSettings,
    paths: Sequence[str],
) -> SessionSettings:
    """``current`` with the fields ``paths`` names taken from ``update`` (the default where
    ``update`` leaves them unset); no paths: every field ``update`` sets."""
    if not paths:
        return overlay(current, update)
    result = current
    for path in paths:
        if path in ("*", "config"):
            result = overlay(default, update)
        elif path == "config.auto_commit":
            result = replace(result, auto_commit=overlay(default, update).auto_commit)
        elif path.startswith("config.auto_commit."):
            name = path.removeprefix("config.auto_commit.")
            attribute = _SECONDS.get(name, name)  # type: ignore[call-overload]
            if attribute not in {f.name for f in fields(AutoCommitPolicy)}:
                raise _bad_path(path)
            value = getattr(update.auto_commit, attribute)
            if value is None:
                value = getattr(default.auto_commit, attribute)
            result = replace(result, auto_commit=replace(result.auto_commit, **{attribute: value}))
        elif path in ("config.model", "config.model.provider", "config.model.model"):
            source = update if update.provider is not None else default
            result = replace(result, provider=source.provider, model=source.model)
        elif path.removeprefix("config.") in _TOP and path.startswith("config."):
            name = path.removeprefix("config.")
            value = getattr(update, name)
            result = replace(result, **{name: getattr(default, name) if value is None else value})
        else:
            raise _bad_path(path)
    return result


def settings_from_json(text: str, check_model: ModelCheck) -> SessionSettings:
    """The server's default config (WM_DEFAULT_SESSION_CONFIG: SessionConfig as JSON)."""
    try:
        config = json_format.Parse(text or "{}", pb.SessionConfig())
    except json_format.ParseError as error:
        raise ValueError(f"not a SessionConfig in JSON: {error}") from None
    return partial_settings(config, "WM_DEFAULT_SESSION_CONFIG", check_model)


def _out_of_range(field: str, low: float, high: float, unit: str = "") -> FieldViolation:
    extra = " (0: off; else at least 1)" if field.endswith("idle_timeout") else ""
    return FieldViolation(field, f"must be {low:g}-{high:g}{unit}{extra}", "OUT_OF_RANGE")


def _bad_path(path: str) -> InvalidArgument:
    return invalid(
        "update_mask",
        f"{path!r} cannot be updated: name config or a field inside it",
        "INVALID_PATH",
    )
