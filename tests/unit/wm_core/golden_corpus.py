"""The equivalence corpus: seeded inputs for every public entry point of the engine, and what
the engine returned for each, recorded in ``golden/outputs.json.xz``.

A refactor of ``wm_core`` must not change a single output byte. Unit tests pin the rules one
example at a time; this corpus pins their interplay over a few thousand inputs (the merge
benchmark's mixes, random and realistic documents under every kind of op, malformed tool
arguments, creation output, token estimates), so that a rewrite that reads the same but
behaves differently somewhere is caught.

The inputs are rebuilt from a fixed seed on every run (``random.Random`` with an integer seed
gives the same sequence on every Python version); the golden file holds, per case, a digest of
its input and the engine's output. Chains of merges feed each output into the next merge, so
documents carrying restore markers and the Key Facts sentinel are covered too.

Regenerate (only when a behaviour change is intended):
``.venv/bin/python tests/unit/wm_core/golden_corpus.py --write``; check without pytest:
``... --check``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import wm_core
from wm_core import (
    SECTIONS,
    CreationRejected,
    Decision,
    MergeResult,
    Message,
    ParsedDocument,
    ParsedOps,
    SectionOp,
    TextPart,
    ToolResultPart,
    ToolUsePart,
)

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).resolve().parent / "golden" / "outputs.json.xz"
SEED = 20261201

TITLE, STATE, GOALS, FACTS, FILES, ERRORS, ISSUES = SECTIONS

Case = tuple[str, str, Any]  # (case id, entry point, input)

# -- JSON forms of inputs and outputs ---------------------------------------------------------


def encode(value: object) -> object:
    """A JSON form of an input, faithful enough that two different inputs differ."""
    if isinstance(value, SectionOp):
        return {"__op__": [str(value.kind), value.content, list(value.items)]}
    if isinstance(value, (bytes, bytearray)):
        return {"__" + type(value).__name__: value.hex()}
    if isinstance(value, dict):
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    if isinstance(value, (Message, TextPart, ToolUsePart, ToolResultPart)):
        return {"__" + type(value).__name__: repr(value)}
    return value


def digest(value: object) -> str:
    text = json.dumps(encode(value), ensure_ascii=True, sort_keys=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def decision_form(decision: Decision) -> dict[str, object]:
    form = decision.to_dict()
    form["guard_type"] = type(decision.guard).__name__
    return form


def merge_form(result: MergeResult) -> dict[str, object]:
    return {
        "document": result.document,
        "decisions": [decision_form(d) for d in result.decisions],
        "sections": list(result.sections.items()),
    }


def parsed_form(parsed: ParsedDocument) -> dict[str, object]:
    return {
        "bodies": list(parsed.bodies.items()),
        "extras": [[e.title, e.level, e.body] for e in parsed.extras],
        "preamble": parsed.preamble,
        "preamble_without_title": parsed.preamble_without_title,
        "duplicates": list(parsed.duplicates),
    }


def ops_form(parsed: ParsedOps) -> dict[str, object]:
    return {
        "ops": [[name, op.to_dict(), str(op.kind)] for name, op in parsed.ops.items()],
        "problems": list(parsed.problems),
        "method": str(parsed.method),
        "found": list(parsed.found),
        "salvaged": list(parsed.salvaged),
        "defaulted": list(parsed.defaulted),
        "distrusted": list(parsed.distrusted),
        "usable": parsed.usable,
    }


def _creation(output: object) -> object:
    try:
        result = wm_core.normalize_creation(output)
    except CreationRejected as exc:
        return {"rejected": str(exc), "problems": list(exc.problems)}
    return {
        "document": result.document,
        "sections": list(result.sections),
        "problems": list(result.problems),
    }


def _merge(case: list[Any]) -> object:
    previous, ops = case
    result = wm_core.merge(previous, ops)
    return {
        **merge_form(result),
        "reminders": wm_core.section_reminders(result.document),
    }


RUNNERS: dict[str, Callable[[Any], object]] = {
    "merge": _merge,
    "parse": lambda text: {
        "detailed": parsed_form(wm_core.parse_document_detailed(text)),
        "plain": list(wm_core.parse_document(text).items()),
        "is_working_memory": wm_core.is_working_memory(text),
        "reminders": wm_core.section_reminders(text),
    },
    "render": lambda bodies: wm_core.render_document(bodies),
    "tool_arguments": lambda raw: ops_form(wm_core.parse_tool_arguments(raw)),
    "validate": lambda args: {
        "update": wm_core.validate_update_arguments(args),
        "create": wm_core.validate_create_arguments(args),
    },
    "creation": _creation,
    "tokens": lambda text: wm_core.estimate_tokens(text),
    "message_tokens": lambda parts: wm_core.message_tokens(parts),
}


def run_case(kind: str, value: Any) -> object:
    # A round trip through JSON: tuples become lists, as in the stored file.
    return json.loads(json.dumps(RUNNERS[kind](value)))


# -- building blocks of realistic documents ------------------------------------------------------

PEOPLE = ("Caroline", "Melanie", "Marcus", "Priya", "Jonas", "Aiko", "Tomás", "Zoë", "Ødegaard")
CITIES = ("Portland", "Lisbon", "Osaka", "Malmö", "Denver", "Kraków", "東京")
MONTHS = ("January", "March", "May", "July", "September", "November")
_WORD_TEXT = (
    "ledger migration consumer handler retry replay cut-over billing invoice schema index "
    "partition backfill queue worker timeout cache latency budget review rollout freeze "
    "snapshot tenant account reconcile duplicate events staging release flag"
)
WORDS = tuple(_WORD_TEXT.split())
UNITS = ("ms", "years", "days", "GB", "rows", "people", "hours", "pm", "dollars", "sessions")
EXTS = ("py", "ts", "tsx", "md", "yaml", "json", "rs", "go", "sql", "toml", "txt", "bak")
STATUS = ("[resolved] ", "(done) ", "Resolved: ", "~~", "✅ ", "[x] ", "DONE - ", "")
EMPHASIS = ("**", "`", "_", "")
CJK = "数据库迁移完成测试環境の設定서비스배포"
ASTRAL = "😀🚀𝔘𠀀"


def _path(rng: random.Random) -> str:
    depth = rng.randint(1, 4)
    parts = [rng.choice(WORDS).replace("-", "_") + str(rng.randint(0, 9)) for _ in range(depth)]
    style = rng.random()
    path = "/".join(parts) + "." + rng.choice(EXTS)
    if style < 0.1:
        path = "./" + path
    elif style < 0.15:
        path = path.replace("/", "\\")
    elif style < 0.22:
        path = f"https://{rng.choice(WORDS)}.example.com/{parts[0]}"
    elif style < 0.27:
        path = f"www.{rng.choice(WORDS)}.org/{parts[0]}/"
    elif style < 0.33:
        path = "/".join(parts)  # no extension: two segments
    elif style < 0.38:
        path = f"`{path}`"
    elif style < 0.42:
        path = f"({path}),"
    return path


def _date(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.randint(2023, 2026)}"


def _sentence(rng: random.Random, words: int = 8) -> str:
    out: list[str] = []
    for index in range(words):
        roll = rng.random()
        if roll < 0.08:
            out.append(rng.choice(PEOPLE))
        elif roll < 0.13:
            out.append(_date(rng))
        elif roll < 0.2:
            out.append(f"{rng.randint(1, 500)} {rng.choice(UNITS)}")
        elif roll < 0.24:
            out.append(f"${rng.randint(1, 99)},{rng.randint(100, 999)}")
        elif roll < 0.28:
            out.append(rng.choice(("because", "decided", "chose", "agreed", "committed")))
        elif roll < 0.31:
            out.append(_path(rng))
        elif roll < 0.33:
            out.append(rng.choice(CITIES))
        elif roll < 0.35:
            mark = rng.choice(EMPHASIS)
            out.append(f"{mark}{rng.choice(WORDS)}{mark}")
        elif roll < 0.36:
            out.append(rng.choice(("snake_case", "CamelCase", "key=value", "p99", "v2", "3x")))
        elif roll < 0.37:
            out.append(CJK[rng.randint(0, len(CJK) - 4) :][:3])
        elif roll < 0.375:
            out.append(rng.choice(ASTRAL))
        else:
            word = rng.choice(WORDS)
            out.append(word.capitalize() if index == 0 else word)
    text = " ".join(out)
    return text + rng.choice((".", "", ";", "!", ":", ".", "."))


def _bullet(rng: random.Random, text: str) -> str:
    roll = rng.random()
    if roll < 0.7:
        return "- " + text
    if roll < 0.8:
        return "* " + text
    if roll < 0.88:
        return f"{rng.randint(1, 30)}. {text}"
    if roll < 0.92:
        return "-\t" + text
    if roll < 0.96:
        return "  - " + text  # indented
    return text  # a plain line


def _body(rng: random.Random, section: str, count: int) -> str:
    if section == TITLE:
        return " ".join(rng.choice(WORDS).capitalize() for _ in range(rng.randint(2, 7)))
    lines: list[str] = []
    for index in range(count):
        if section == FILES:
            text = f"{_path(rng)} — {_sentence(rng, rng.randint(2, 8))}"
        elif section == ISSUES:
            text = rng.choice(STATUS) + f"Issue {index}: " + _sentence(rng, rng.randint(3, 12))
            if text.startswith("~~"):
                text += "~~"
        elif section == ERRORS:
            text = f"Round {index}: " + _sentence(rng, rng.randint(4, 14))
        else:
            text = _sentence(rng, rng.randint(3, 18))
        lines.append(_bullet(rng, text))
        if rng.random() < 0.04:
            lines.append(rng.choice(("", "### Group " + rng.choice(WORDS), "  continued line")))
    return "\n".join(lines)


def _bodies(rng: random.Random) -> dict[str, str]:
    bodies: dict[str, str] = {}
    for section in SECTIONS:
        roll = rng.random()
        if roll < 0.08:
            continue
        if section == FACTS and roll > 0.7:
            count = rng.choice((26, 30, 51, 60, 80))  # oversized and emergency
        else:
            count = rng.randint(0, 14)
        bodies[section] = _body(rng, section, count)
    if rng.random() < 0.1:  # long bullets: oversized by tokens, not by count
        bodies[FACTS] = "\n".join(
            "- " + _sentence(rng, rng.randint(60, 120)) for _ in range(rng.randint(6, 12))
        )
    return bodies


# -- ops -------------------------------------------------------------------------------------------


def _lines(body: str) -> list[str]:
    return [line for line in body.split("\n") if line.strip()]


def _rewrite(rng: random.Random, section: str, old: str) -> str:
    """An UPDATE content derived from the old body: the moves a model makes."""
    lines = _lines(old)
    move = rng.randrange(13)
    if section == TITLE:
        words = old.split()
        choice = rng.randrange(5)
        if choice == 0:
            return old + " (phase 2)"
        if choice == 1:
            return " ".join(rng.choice(WORDS).capitalize() for _ in range(4))  # drift
        if choice == 2 and words:
            return " ".join(words[: max(1, len(words) // 2)]) + " Refinement"
        if choice == 3:
            return "## Session Title\n" + old
        return old
    if move == 0 or not lines:
        return _body(rng, section, rng.randint(1, 6))  # brand-new content
    if move == 1:  # drop some lines
        kept = [line for line in lines if rng.random() < 0.5]
        return "\n".join(kept)
    if move == 2:  # annotate
        return "\n".join(line + " (checked)" if rng.random() < 0.3 else line for line in lines)
    if move == 3:  # old plus new lines
        extra = _body(rng, section, rng.randint(1, 4))
        return old + "\n" + extra
    if move == 4:  # summary
        return "- Summary: " + _sentence(rng, 10)
    if move == 5:  # mark some resolved
        return "\n".join(
            line.replace("- ", "- [resolved] ", 1) if rng.random() < 0.4 else line for line in lines
        )
    if move == 6:  # reorder
        shuffled = lines[:]
        rng.shuffle(shuffled)
        return "\n".join(shuffled)
    if move == 7:  # headings inside the content
        return rng.choice(
            (
                f"## {section}\n{old}",
                f"## Key Facts & Decisions\n{old}",
                f"# Notes\n{old}\n## Foreign\nmore",
                f"{old}\n### Sub heading\n- x",
                f"### 2. **{section}**\n{old}",
            )
        )
    if move == 8:  # consolidate pairs
        return "\n".join(
            a + " Also: " + b.lstrip("-* ") for a, b in zip(lines[::2], lines[1::2], strict=False)
        )
    if move == 9:  # CRLF and whitespace
        return ("\r\n".join(lines) + "\r\n   ") if rng.random() < 0.5 else "  \n" + old + "\n\n"
    if move == 10:  # the first half only
        return "\n".join(lines[: len(lines) // 2])
    if move == 11:  # the same bullets with their details stripped (anchor coverage)
        return "\n".join(
            " ".join(w for w in line.split() if w.islower() and w.isalpha()) or "- vague"
            for line in lines
        )
    return old  # verbatim


def _items(rng: random.Random, section: str, old: str) -> list[object]:
    items: list[object] = []
    existing = _lines(old)
    for _ in range(rng.randint(0, 9)):
        roll = rng.random()
        if roll < 0.25 and existing:
            line = rng.choice(existing).lstrip("-*0123456789.) \t")
            variant = rng.randrange(4)
            if variant == 0:
                line = line.upper()
            elif variant == 1:
                line = line.rstrip(".;,:!") + "."
            elif variant == 2:
                line = "**" + line + "**"
            items.append(line)
        elif roll < 0.3:
            items.append(rng.choice(("", "   ", 7, None, ["nested"], {"a": 1}, 3.5)))
        elif roll < 0.35:
            items.append(
                _sentence(rng, 5) + "\n## Open Issues\nsecond line\n# Title\n### kept deep"
            )
        elif roll < 0.4:
            items.append("Brand new fact " + str(rng.randint(0, 20)))
        else:
            items.append(_body(rng, section, 1).lstrip("-*0123456789.) \t") or "x")
    return items


def _op(rng: random.Random, section: str, old: str) -> object:
    roll = rng.random()
    if roll < 0.22:
        return SectionOp.keep() if rng.random() < 0.5 else {"op": rng.choice(("KEEP", "keep"))}
    if roll < 0.55:
        content = _rewrite(rng, section, old)
        if rng.random() < 0.5:
            return SectionOp.update(content)
        return {"op": rng.choice(("UPDATE", "update", " Update ")), "content": content}
    if roll < 0.85:
        items = _items(rng, section, old)
        strings = [item for item in items if isinstance(item, str)]
        if rng.random() < 0.5:
            return SectionOp.append(strings)
        return {"op": rng.choice(("APPEND", "append")), "items": items}
    return rng.choice(
        (
            {"op": "UPDATE"},
            {"op": "UPDATE", "content": ""},
            {"op": "UPDATE", "content": "   "},
            {"op": "UPDATE", "content": 42},
            {"op": "UPDATE", "content": ["a", "b"]},
            {"op": "APPEND"},
            {"op": "APPEND", "items": []},
            {"op": "APPEND", "items": ["", "  "]},
            {"op": "APPEND", "items": "one single string item"},
            {"op": "APPEND", "items": {"not": "a list"}},
            {"op": "APPEND", "content": "- from content 1\n- from content 2"},
            {"op": "DELETE", "content": "gone", "items": ["x", 1]},
            {"op": None},
            {"op": 5},
            {},
            42,
            "KEEP",
            "keep ",
            "UPDATE",
            None,
            ["KEEP"],
            SectionOp.update("   "),
            SectionOp.append([]),
            SectionOp.append(["  ", "x\r\ny"]),
        )
    )


def _ops(rng: random.Random, bodies: dict[str, str]) -> dict[object, object]:
    ops: dict[object, object] = {}
    for section in SECTIONS:
        if rng.random() < 0.12:
            continue  # no op: kept
        key: object = section
        if rng.random() < 0.08:
            key = rng.choice(
                (
                    section.lower(),
                    section.upper() + ":",
                    "## " + section,
                    "**" + section + "**",
                    "4. " + section,
                    section.replace("&", "and"),
                )
            )
        ops[key] = _op(rng, section, bodies.get(section, ""))
    if rng.random() < 0.06:
        ops[rng.choice(("Notes", "Random Section", "key facts"))] = {
            "op": "UPDATE",
            "content": "stray",
        }
    if rng.random() < 0.03:
        ops[7] = {"op": "APPEND", "items": ["non-string key"]}
    if rng.random() < 0.05:
        ops["key facts and decisions"] = {"op": "APPEND", "items": ["second op, same section"]}
    return ops


# -- odd documents ---------------------------------------------------------------------------------

ODD_LINES = (
    "# Working Memory",
    "# working memory",
    "## key facts and decisions:",
    "### 4. **Open Issues**",
    "#Not a heading",
    "   ## Session Title",
    "## C#",
    "## Current State ##",
    "## Files & Context #",
    "####### seven hashes",
    "## Foreign Section",
    "# Top Foreign",
    "### Deep Foreign",
    "## Errors and Corrections",
    "## TASK & GOALS",
    "##\tOpen Issues",
    "## __Current State__",
    "1. Session Title",
    "Some text about Key Facts & Decisions in a sentence.",
    "- a bullet",
    "- another bullet with #hash",
    "text",
    "",
    "   ",
    "```",
    "## 2) Task & Goals",
    "## `Files & Context`",
    "#",
    "## ",
)


def _odd_document(rng: random.Random) -> str:
    lines = [rng.choice(ODD_LINES) for _ in range(rng.randint(0, 30))]
    for index in range(len(lines)):
        if rng.random() < 0.3:
            lines[index] = _bullet(rng, _sentence(rng, rng.randint(2, 8)))
    text = "\n".join(lines)
    roll = rng.random()
    if roll < 0.15:
        text = text.replace("\n", "\r\n")
    elif roll < 0.2:
        text = text.replace("\n", "\r")
    elif roll < 0.3:
        text += "\n"
    return text


# -- tool arguments --------------------------------------------------------------------------------


def _json_ops(rng: random.Random, bodies: dict[str, str]) -> dict[str, object]:
    ops: dict[str, object] = {}
    for section in SECTIONS:
        op = _op(rng, section, bodies.get(section, ""))
        if isinstance(op, SectionOp):
            op = op.to_dict()
        ops[section] = op
    return ops


def _corrupt(rng: random.Random, text: str) -> object:
    roll = rng.randrange(14)
    if roll == 0:
        return text[: rng.randint(0, len(text))]  # truncated anywhere
    if roll == 1:
        return text[: max(0, len(text) - rng.randint(1, 40))]  # truncated near the end
    if roll == 2:
        return text.replace('"', rng.choice(("\u201c", "\u201d")), rng.randint(1, 40))
    if roll == 3:
        quoted = []
        opening = True
        for ch in text:
            if ch == '"':
                quoted.append("\u201c" if opening else "\u201d")
                opening = not opening
            else:
                quoted.append(ch)
        return "".join(quoted)
    if roll == 4:
        return "```json\n" + text + "\n```"
    if roll == 5:
        return json.dumps({"raw": text})
    if roll == 6:
        return text.replace('{"sections": ', "", 1)[:-1]  # no wrapper
    if roll == 7:
        return json.dumps({"sections": text[len('{"sections": ') : -1]})  # sections as string
    if roll == 8:
        return json.dumps(text)  # JSON inside a JSON string
    if roll == 9:
        return text.replace(", ", ",, ", 3).replace("}", ",}", 2)  # trailing commas
    if roll == 10:
        return text.replace('"', "'")
    if roll == 11:
        return text.encode()
    if roll == 12:
        return "Here are the ops:\n" + text + "\nDone."
    return text


def _tool_arguments(rng: random.Random) -> Iterator[object]:
    yield from (
        None,
        "",
        "   ",
        "null",
        "[]",
        "[1, 2]",
        "42",
        '"KEEP"',
        "{}",
        '{"sections": {}}',
        '{"sections": null}',
        '{"sections": []}',
        '{"raw": "not json at all"}',
        '{"raw": "{\\"sections\\": {\\"Open Issues\\": {\\"op\\": \\"KEEP\\"}}}"}',
        b"\xff\xfe broken bytes",
        bytearray(b'{"sections": {"Session Title": {"op": "KEEP"}}}'),
        42,
        ["a"],
        {"sections": {"Session Title": {"op": "UPDATE", "content": "New"}}},
        {"Key Facts & Decisions": {"op": "APPEND", "items": ["x"]}},
        {"raw": '{"Open Issues": {"op": "UPDATE", "content": "- a"}}'},
        '{"sections": {"Session Title": {"op": "UPDATE", "content": "cut',
        '{"sections": {"Key Facts & Decisions": {"op": "APPEND", "items": ["a", "b',
        '{"sections": {"Key Facts & Decisions": {"op": "APPEND", ',
        '{"sections": {"Current State": {"op": "UPDATE", "content": "done"',
        '{"sections": {"Open Issues": {"op": "KEE',
        '{"sections": {"Session Title": {"op": "UPDATE", "content": "a \\"quoted\\"',
        "not json, Session Title: something",
    )
    for _ in range(420):
        bodies = _bodies(rng)
        text = json.dumps({"sections": _json_ops(rng, bodies)}, ensure_ascii=rng.random() < 0.5)
        yield _corrupt(rng, text)


# -- creation output -------------------------------------------------------------------------------


def _creations(rng: random.Random) -> Iterator[object]:
    yield from (
        None,
        42,
        "",
        "nothing recognisable here",
        "{}",
        {"sections": {}},
        {"raw": "## Session Title\nFrom raw"},
        {"working_memory": "# Working Memory\n\n## Open Issues\n- a\n"},
        {"Session Title": 5, "Key Facts & Decisions": "- fact", 3: "x", "Other": "y"},
        {"sections": {"Current State": None, "Task & Goals": "## Task & Goals\n# Goal\n- g"}},
        b"## Current State\nbytes input",
        "Sure! ```markdown\n## Session Title\nFenced\n```",
        "~~~\n## Open Issues\n- tilde fenced\n~~~\nafter",
        "````md\n## Key Facts & Decisions\n- fact\n```py\ncode\n```\n````",
        "```\n## Session Title\nUnclosed fence",
        "```json\n" + json.dumps({"Session Title": "From JSON in a fence"}) + "\n```",
        "Intro text\n## Session Title\nT\n## Notes\nforeign\n## Session Title\nagain",
        "## Files & Context\n- a.py\n- last item```",
    )
    for _ in range(260):
        bodies = _bodies(rng)
        roll = rng.randrange(6)
        if roll == 0:
            yield bodies
        elif roll == 1:
            yield json.dumps({"sections": bodies}) if rng.random() < 0.5 else json.dumps(bodies)
        elif roll == 2:
            text = wm_core.render_document(bodies)
            yield "Here you go:\n```markdown\n" + text + "\n```\nHope that helps."
        elif roll == 3:
            yield _odd_document(rng) + "\n" + wm_core.render_document(bodies)
        elif roll == 4:
            yield {"working_memory": _odd_document(rng)}
        else:
            yield _odd_document(rng)


# -- text and messages -----------------------------------------------------------------------------

SCRIPTS = (
    "abcdefghij KLMNOP 0123456789 .,;:!?-_/\\\"'{}[]()\n\t",
    "éèàöüñçßøåÆÐÞ×÷ÿ",  # Latin-1
    "ĀāŁłŒœŠšŸŽžſƒ",  # Latin Extended
    "абвгдежзиклмнопрстуфхцчшщыэюя",  # Cyrillic
    "αβγδεζηθικλμνξοπρστυφχψω",
    "数据库迁移完成测试環境の設定",  # CJK
    "ひらがなカタカナ",
    "서비스배포한국어",
    "ＡＢＣ１２３！？",  # full-width
    "、。「」〜",  # CJK punctuation
    "ᄀᄁᄂᄃ",  # Hangul Jamo
    "😀🚀𝔘𠀀🎉👍🏽",  # astral
    "\u200b\u00a0\u2028\ufeff",  # odd spaces
)


def _mixed_text(rng: random.Random, length: int) -> str:
    pools = rng.sample(SCRIPTS, rng.randint(1, 4))
    return "".join(rng.choice(rng.choice(pools)) for _ in range(length))


def _part(rng: random.Random) -> object:
    roll = rng.randrange(3)
    if roll == 0:
        return TextPart(_mixed_text(rng, rng.randint(0, 300)))
    if roll == 1:
        payload = rng.choice(
            (
                "{}",
                "",
                '{"path": "src/a.py", "n": 3}',
                json.dumps({"text": _mixed_text(rng, 40)}, ensure_ascii=rng.random() < 0.5),
                '{"a": [1, 2, {"b": null}]}',
                "{not json",
                "[]",
                '"string"',
                "0",
            )
        )
        return ToolUsePart(f"toolu_{rng.randint(0, 999)}", rng.choice(WORDS), payload)
    return ToolResultPart(
        f"toolu_{rng.randint(0, 999)}", _mixed_text(rng, rng.randint(0, 200)), rng.random() < 0.2
    )


# -- the corpus ------------------------------------------------------------------------------------


def _bench_mixes() -> list[tuple[str, str, dict[str, object]]]:
    """The six mixes of bench/merge_bench.py (as they were when this corpus was recorded)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench import merge_bench

    document, emergency = merge_bench.DOCUMENT, merge_bench.EMERGENCY_DOCUMENT
    return [
        ("all KEEP", document, dict(merge_bench.all_keep())),
        ("small APPENDs", document, dict(merge_bench.small_appends())),
        ("seven passing UPDATEs", document, dict(merge_bench.passing_updates())),
        ("rejected UPDATEs", document, dict(merge_bench.rejected_updates())),
        ("emergency APPEND", emergency, dict(merge_bench.emergency())),
        ("emergency UPDATE", emergency, dict(merge_bench.emergency_update())),
    ]


def corpus() -> Iterator[Case]:
    """Every case, in a fixed order. Merge chains need the engine's own outputs to go on."""
    rng = random.Random(SEED)
    for label, document, ops in _bench_mixes():
        yield f"bench/{label}", "merge", [document, ops]
        yield f"bench/{label}/tool-call", "merge", [document, _as_dicts(ops)]
    # Chains: each merge's document is the next one's previous document.
    for chain in range(110):
        bodies = _bodies(rng)
        document: str | None = wm_core.render_document(bodies)
        if chain % 10 == 0:
            document = rng.choice((None, "", _odd_document(rng)))
        for step in range(rng.randint(3, 9)):
            current = wm_core.parse_document(document)
            ops = _ops(rng, current)
            case = [document, ops]
            yield f"chain/{chain}/{step}", "merge", case
            document = wm_core.merge(document, ops).document
    # Ops on documents read tolerantly (odd headings, preambles, duplicates).
    for index in range(150):
        document = _odd_document(rng)
        yield f"odd-merge/{index}", "merge", [document, _ops(rng, wm_core.parse_document(document))]
    for index, ops in enumerate((None, 42, "KEEP", ["a"], {}, {"Session Title": None})):
        yield f"odd-ops/{index}", "merge", [wm_core.render_document(_bodies(rng)), ops]
    for index in range(600):
        document = _odd_document(rng)
        yield f"parse/{index}", "parse", document
    for index in range(150):
        bodies = _bodies(rng)
        yield f"parse-rendered/{index}", "parse", wm_core.render_document(bodies)
    yield "parse/none", "parse", None
    for index in range(250):
        bodies: dict[object, object] = dict(_bodies(rng))
        for section in rng.sample(SECTIONS, rng.randint(0, 3)):
            bodies[section] = _odd_document(rng)
        if rng.random() < 0.1:
            bodies["Not a section"] = "ignored"
            bodies[TITLE] = rng.choice(("", "## Session Title\n# Real Title"))
        yield f"render/{index}", "render", bodies
    for index, raw in enumerate(_tool_arguments(rng)):
        yield f"tool-arguments/{index}", "tool_arguments", raw
    for index in range(120):
        bodies = _bodies(rng)
        args: object = {"sections": _json_ops(rng, bodies)}
        if index % 4 == 1:
            args = bodies
        elif index % 4 == 2:
            args = rng.choice(({"sections": 5}, [], None, {"extra": 1, "sections": {}}))
        yield f"validate/{index}", "validate", args
    for index, output in enumerate(_creations(rng)):
        yield f"creation/{index}", "creation", output
    for index in range(500):
        yield f"tokens/{index}", "tokens", _mixed_text(rng, rng.randint(0, 400))
    yield "tokens/none", "tokens", None
    yield "tokens/empty", "tokens", ""
    for index in range(250):
        parts = [_part(rng) for _ in range(rng.randint(0, 5))]
        yield f"message-tokens/{index}", "message_tokens", parts


def _as_dicts(ops: dict[str, object]) -> dict[str, object]:
    return {name: op.to_dict() if isinstance(op, SectionOp) else op for name, op in ops.items()}


def record() -> dict[str, dict[str, object]]:
    return {
        case_id: {"input": digest(value), "output": run_case(kind, value)}
        for case_id, kind, value in corpus()
    }


def load() -> dict[str, dict[str, object]]:
    with lzma.open(GOLDEN, "rt", encoding="utf-8") as handle:
        loaded: dict[str, dict[str, object]] = json.load(handle)
    return loaded


def write(recorded: dict[str, dict[str, object]]) -> None:
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(recorded, ensure_ascii=False, separators=(",", ":"))
    with lzma.open(GOLDEN, "wt", encoding="utf-8", preset=9 | lzma.PRESET_EXTREME) as handle:
        handle.write(text)


def main() -> int:
    parser = argparse.ArgumentParser(description="Record or check the engine's golden outputs.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="record the current engine")
    mode.add_argument("--check", action="store_true", help="compare with the file (default)")
    parser.add_argument("--dump", type=Path, help="also write the outputs as plain JSON here")
    args = parser.parse_args()
    recorded = record()
    print(f"{len(recorded)} cases; engine from {Path(wm_core.__file__).parent}")
    if args.dump:
        args.dump.write_text(json.dumps(recorded, ensure_ascii=False, indent=1, sort_keys=True))
    if args.write:
        write(recorded)
        print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size} bytes)")
        return 0
    golden = load()
    differing = [case for case in golden if recorded.get(case) != golden[case]]
    missing = sorted(set(recorded) ^ set(golden))
    print(f"{len(differing)} differing, {len(missing)} added or removed")
    for case in differing[:20]:
        print("  differs:", case)
    return 1 if differing or missing else 0


if __name__ == "__main__":
    sys.exit(main())
