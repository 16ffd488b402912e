"""The ``--json`` shape of the CLI: every field, zero values included, numbers as numbers.

Why not protobuf's ``MessageToDict``: its JSON mapping writes 64-bit integers as strings and
leaves out fields at their default, so a script cannot tell "0" from "missing" and must parse
numbers twice. Here every field of the message is present under its proto name, integers are
JSON numbers, enums are their names, timestamps are RFC 3339 strings (``null`` when unset),
repeated fields are lists, and of a ``oneof`` only the member that is set appears. The shape
follows the proto, so it changes only when the contract grows (additively).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

_INTEGERS = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}


def plain(message: Message) -> dict[str, Any]:
    """A message as a JSON-ready dictionary (see the module docstring)."""
    out: dict[str, Any] = {}
    descriptor = message.DESCRIPTOR
    field: Any
    for field in descriptor.fields:
        oneof = field.containing_oneof
        if oneof is not None and message.WhichOneof(oneof.name) != field.name:
            continue
        value = getattr(message, field.name)
        if field.is_repeated:
            out[field.name] = [_value(field, item) for item in value]
        else:
            out[field.name] = _value(field, value)
    return out


def _value(field: Any, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if isinstance(value, Timestamp):
            return value.ToJsonString() if (value.seconds or value.nanos) else None
        if field.message_type.full_name == "google.protobuf.Any":
            return {"type_url": value.type_url}
        return plain(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else value
    if field.type in _INTEGERS:
        return int(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value


def dumps(value: Message | dict[str, Any] | list[Any]) -> str:
    """One line of JSON (keys in proto order, non-ASCII kept as is)."""
    data = plain(value) if isinstance(value, Message) else value
    return json.dumps(data, ensure_ascii=False)
