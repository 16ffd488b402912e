"""The contract's field rules, checked at the edge before any work.

Every limit and field rule of wm.v1 is a protovalidate (``buf.validate``) annotation in the
proto; Buf's runtime evaluates them here, natively, for every request the interceptor has
decoded, so a request that breaks one reaches no service and changes nothing. Each broken rule
becomes a BadRequest field violation: its path as the client wrote it
(``messages[3].parts[0].tool_use.id``), protovalidate's description, and the rule's id as
the reason (``string.pattern``, ``int32.lte``, ``query.not_blank``). What the proto cannot
state (a limit the operator configures, rules across stored data) stays in the services.
"""

from __future__ import annotations

import protovalidate
from google.protobuf.message import Message

from wm_server.errors import FieldViolation, InvalidArgument

_validator = protovalidate.Validator()
MAX_VIOLATIONS = 100


def _path(violation: protovalidate.Violation) -> str:
    out = ""
    path = violation.proto.field
    for element in path.elements if path is not None else ():
        out += f".{element.field_name}" if out else element.field_name
        subscript = element.subscript  # protovalidate's own message type: a tagged oneof
        if subscript is not None:
            value = subscript.value
            out += f"[{value}]"  # an index, or a map key as the services name it
    return out or "request"


def check(request: Message) -> None:
    """Raise InvalidArgument listing every rule ``request`` breaks (at most 100)."""
    violations = _validator.collect_violations(request)
    if violations:
        raise InvalidArgument(
            [
                FieldViolation(_path(v), v.proto.message or v.proto.rule_id, v.proto.rule_id)
                for v in violations[:MAX_VIOLATIONS]
            ]
        )
