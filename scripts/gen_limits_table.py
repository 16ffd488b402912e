"""Write the README's table of the contract's field rules from the proto, or check it.

Every limit and field rule of wm.v1 is a buf.validate annotation (protos/wm/v1); the README
shows them as a table between the markers ``<!-- limits:begin -->`` and ``<!-- limits:end -->``,
written by this script and never by hand. Rules are read from the generated descriptors of
every message a request can carry (requests, their nested messages, enums), one row per field
and rule; a field with the same rule in several requests is one row naming them all.
``--check`` fails when the README's table differs from what the proto says (``make
stubs-check``, and a test).

Usage: python scripts/gen_limits_table.py [--check]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from wm_proto.v1 import buf_validate_pb2 as rules
from wm_proto.v1 import working_memory_service_pb2 as api

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BEGIN, END = "<!-- limits:begin -->", "<!-- limits:end -->"


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _range(bounds: object, unit: str = "") -> str:
    low = bounds.gte if bounds.HasField("gte") else None  # type: ignore[attr-defined]
    high = bounds.lte if bounds.HasField("lte") else None  # type: ignore[attr-defined]
    suffix = f" {unit}" if unit else ""
    if low is not None and high is not None:
        return f"{_number(low)}-{_number(high)}{suffix}"
    if high is not None:
        return f"at most {_number(high)}{suffix}"
    if low is not None:
        return f"at least {_number(low)}{suffix}"
    return ""


def _string(rule: rules.StringRules) -> list[str]:
    out = []
    if rule.HasField("min_len") or rule.HasField("max_len"):
        low = rule.min_len if rule.HasField("min_len") else None
        high = rule.max_len if rule.HasField("max_len") else None
        if low is not None and high is not None:
            out.append(f"{_number(low)}-{_number(high)} characters")
        elif high is not None:
            out.append(f"at most {_number(high)} characters")
        else:
            out.append(f"at least {_number(low or 0)} characters")
    if rule.HasField("pattern"):
        out.append(f"matches `{rule.pattern}`")
    for field, value in rule.ListFields():  # the contract's predefined rules (wm/v1/rules.proto)
        if field.is_extension and value:
            expression = field.GetOptions().Extensions[rules.predefined].cel[0].expression
            said = re.search(r": '([^']*)'$", expression)
            out.append(said.group(1) if said else field.name)
    if rule.__getattribute__("in"):
        out.append("one of " + ", ".join(f"`{v}`" for v in rule.__getattribute__("in")))
    if rule.not_in:
        out.append("not " + ", ".join(f"`{v}`" for v in rule.not_in))
    return out


def _scalar(rule: rules.FieldRules) -> list[str]:
    kind = rule.WhichOneof("type")
    if kind == "string":
        return _string(rule.string)
    if kind in ("int32", "int64", "double"):
        text = _range(getattr(rule, kind))
        return [text] if text else []
    if kind == "enum":
        out = ["a value the enum defines"] if rule.enum.defined_only else []
        if 0 in rule.enum.not_in:
            out.append("not unspecified")
        return out
    if kind == "duration":
        low = rule.duration.gte.ToSeconds() if rule.duration.HasField("gte") else 0
        high = rule.duration.lte.ToSeconds() if rule.duration.HasField("lte") else None
        return [f"{_number(low)}-{_number(high)} seconds"] if high is not None else []
    if kind == "repeated":
        r = rule.repeated
        out = []
        if r.HasField("min_items") and r.HasField("max_items"):
            out.append(f"{_number(r.min_items)}-{_number(r.max_items)} items")
        elif r.HasField("max_items"):
            out.append(f"at most {_number(r.max_items)} items")
        elif r.HasField("min_items"):
            out.append(f"at least {_number(r.min_items)} items")
        if r.HasField("items"):
            out += [f"each {t}" for t in _scalar(r.items)]
        return out
    if kind == "map":
        m = rule.map
        out = [f"at most {_number(m.max_pairs)} entries"] if m.HasField("max_pairs") else []
        out += [f"keys {t}" for t in _scalar(m.keys)]
        out += [f"values {t}" for t in _scalar(m.values)]
        return out
    return []


def _field_texts(field: FieldDescriptor) -> list[str]:
    options = field.GetOptions()
    if not options.HasExtension(rules.field):
        return []
    rule: rules.FieldRules = options.Extensions[rules.field]
    texts = ["required"] if rule.required else []
    texts += _scalar(rule)
    texts += [c.message for c in rule.cel]
    if rule.ignore == rules.IGNORE_IF_ZERO_VALUE and texts:
        texts.append("or empty")
    return texts


def _messages() -> list[Descriptor]:
    """Every message a request can carry, requests first, in the order the service lists them."""
    seen: dict[str, Descriptor] = {}
    queue = [m.input_type for m in api.DESCRIPTOR.services_by_name["WorkingMemoryService"].methods]
    while queue:
        message = queue.pop(0)
        if message.full_name in seen or not message.full_name.startswith("wm."):
            continue
        seen[message.full_name] = message
        queue += [f.message_type for f in message.fields if f.message_type is not None]
    return list(seen.values())


def table() -> str:
    rows: dict[tuple[str, str], list[str]] = defaultdict(list)
    for message in _messages():
        owner = message.name.removesuffix("Request")
        for text in (c.message for c in message.GetOptions().Extensions[rules.message].cel):
            rows[("(the request)", text)].append(owner)
        for field in message.fields:
            texts = _field_texts(field)
            if texts:
                rows[(f"`{field.name}`", "; ".join(texts))].append(owner)
    lines = [
        BEGIN,
        "<!-- Generated by scripts/gen_limits_table.py from the proto's buf.validate rules."
        " Do not edit. -->",
        "",
        "| Field | Of | Rule |",
        "|---|---|---|",
    ]
    for (field, text), owners in rows.items():
        lines.append(f"| {field} | {', '.join(owners)} | {text.replace('|', '&#124;')} |")
    lines.append(END)
    return "\n".join(lines)


def _replaced(readme: str) -> str:
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    return readme[:start] + table() + readme[end:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the table would change")
    args = parser.parse_args()
    readme = README.read_text(encoding="utf-8")
    wanted = _replaced(readme)
    if args.check:
        if wanted != readme:
            print("README's limits table is out of date (run `make protos`)", file=sys.stderr)
            return 1
        print("README limits table up to date")
        return 0
    README.write_text(wanted, encoding="utf-8")
    print(f"wrote the limits table into {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
