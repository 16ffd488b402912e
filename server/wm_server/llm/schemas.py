"""The tool schemas in the dialect of strict (grammar-constrained) function calling.

Why a conversion and not a second schema: the update schema of ``wm_core`` is the contract
every answer is validated against; the strict form must accept exactly the same arguments,
so it is derived from it instead of being written twice.

OpenAI's ``strict: true`` (and Anthropic's ``strict`` tools) accept a subset of JSON Schema:
every object must list all of its properties in ``required`` and say
``additionalProperties: false``, and ``oneOf`` is not in the subset while ``anyOf`` is. The
section op is a ``oneOf`` of KEEP / UPDATE{content} / APPEND{items}; its three branches are
mutually exclusive by their ``op`` enum, so ``anyOf`` over the same branches accepts the same
values, and each branch already requires all of its own properties. An optional property
(none exists today) would become required with ``null`` allowed, the strict dialect's way of
saying "may be absent"; the recovery chain treats a null like a missing value.

Size limits (``maxLength``, ``maxItems`` and their minimums; the memory tool has them) are
left out of the strict form: neither vendor's strict subset accepts them, and the reader of
the answer enforces them anyway (``wm_core.parse_memory_ops`` cuts an over-long text and caps
the ops), so the strict form accepts a superset that the reader brings back within bounds.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

_SIZE_LIMITS = frozenset({"maxLength", "minLength", "maxItems", "minItems"})


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` rewritten for strict mode (a new object; the input is not changed)."""
    converted: dict[str, Any] = _convert(copy.deepcopy(dict(schema)))
    return converted


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _convert(value) for key, value in node.items() if key not in _SIZE_LIMITS}
    if "oneOf" in converted:
        converted["anyOf"] = converted.pop("oneOf")
    properties = converted.get("properties")
    if converted.get("type") == "object" and isinstance(properties, dict):
        required = list(converted.get("required") or [])
        for name, prop in properties.items():
            if name not in required:
                properties[name] = {"anyOf": [prop, {"type": "null"}]}
                required.append(name)
        converted["required"] = required
        converted["additionalProperties"] = False
    return converted
