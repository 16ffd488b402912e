"""The scripted provider: replays prepared answers (broken ones too) from a file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from llm_samples import PREVIOUS_WM, short_messages, valid_update_input

from support.timing import TIMER_TICK
from wm_core import parse_document
from wm_server.llm.chain import GenerationFailed, generate_working_memory
from wm_server.llm.port import CreateRequest, LlmError, Purpose, UpdateRequest, Usage
from wm_server.llm.scripted import ScriptedProvider, ScriptedResponse, load_script


def write_jsonl(path: Path, answers: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(a) for a in answers) + "\n", encoding="utf-8")
    return path


def update_request() -> UpdateRequest:
    return UpdateRequest(PREVIOUS_WM, short_messages())


async def test_replays_answers_in_order_with_usage(tmp_path: Path):
    script = write_jsonl(
        tmp_path / "answers.jsonl",
        [
            {"tool_input": valid_update_input(), "usage": {"input_tokens": 7, "output_tokens": 3}},
            {"text": "no tool this time"},
        ],
    )
    provider = ScriptedProvider.from_file(script)

    first = await provider.update(update_request())
    second = await provider.update(update_request())

    assert first.tool_input == valid_update_input()
    assert first.stop_reason == "tool_use"
    assert first.usage == Usage(input_tokens=7, output_tokens=3, llm_calls=1)
    assert (second.tool_input, second.text, second.stop_reason) == (
        None,
        "no tool this time",
        "end_turn",
    )
    assert [purpose for purpose, _ in provider.calls] == [Purpose.UPDATE, Purpose.UPDATE]
    assert provider.model == "scripted:answers.jsonl"


async def test_broken_answers_drive_the_chain(tmp_path: Path):
    truncated = '{"sections": {"Current State": {"op": "UPDATE", "content": "cut in the mid'
    script = write_jsonl(
        tmp_path / "broken.jsonl",
        [
            {"purpose": "update", "tool_input": truncated, "stop_reason": "max_tokens"},
            {"purpose": "repair", "tool_input": valid_update_input()},
        ],
    )
    provider = ScriptedProvider.from_file(script)

    generation = await generate_working_memory(
        provider, previous_document=PREVIOUS_WM, messages=short_messages()
    )

    # The only section in the cut answer was the one being written: nothing usable, so repair.
    assert generation.calls == (Purpose.UPDATE, Purpose.REPAIR)
    assert parse_document(generation.document)["Current State"].startswith("Duplicates")
    assert provider.remaining == 0


async def test_all_broken_answers_end_in_a_retryable_failure(tmp_path: Path):
    script = write_jsonl(
        tmp_path / "hopeless.jsonl",
        [
            {"tool_input": "not json at all"},
            {"tool_input": {"sections": []}},
            {"tool_input": {"notes": "nothing"}},
        ],
    )

    with pytest.raises(GenerationFailed) as caught:
        await generate_working_memory(
            ScriptedProvider.from_file(script),
            previous_document=PREVIOUS_WM,
            messages=short_messages(),
        )

    assert caught.value.retryable is True
    assert caught.value.usage.llm_calls == 3


async def test_delay_applies_to_every_call(tmp_path: Path):
    script = write_jsonl(
        tmp_path / "slow.jsonl",
        [{"tool_input": valid_update_input()}, {"tool_input": valid_update_input(), "delay": 0.2}],
    )
    provider = ScriptedProvider.from_file(script, delay=0.1)

    started = time.monotonic()
    await provider.update(update_request())
    after_first = time.monotonic() - started
    await provider.update(update_request())
    total = time.monotonic() - started

    assert after_first >= 0.1 - TIMER_TICK
    assert total >= 0.4 - TIMER_TICK  # 0.1 + (0.1 + 0.2)


async def test_scripted_errors_raise_llm_errors(tmp_path: Path):
    script = write_jsonl(
        tmp_path / "errors.jsonl",
        [
            {"error": {"message": "overloaded", "retryable": True}},
            {"error": {"message": "bad key", "retryable": False}},
        ],
    )
    provider = ScriptedProvider.from_file(script)

    with pytest.raises(LlmError) as first:
        await provider.update(update_request())
    with pytest.raises(LlmError) as second:
        await provider.update(update_request())

    assert (str(first.value), first.value.retryable) == ("overloaded", True)
    assert (str(second.value), second.value.retryable) == ("bad key", False)


async def test_running_out_or_a_wrong_purpose_fails_loudly():
    provider = ScriptedProvider([ScriptedResponse(tool_input={}, purpose=Purpose.CREATE)])

    with pytest.raises(LlmError, match="is for a create call, got a update call") as wrong:
        await provider.update(update_request())
    with pytest.raises(LlmError, match="no response left") as empty:
        await provider.create(CreateRequest(short_messages()))

    assert wrong.value.retryable is False and empty.value.retryable is False


async def test_json_document_with_loop(tmp_path: Path):
    path = tmp_path / "loop.json"
    path.write_text(
        json.dumps({"loop": True, "responses": [{"text": "a"}, {"text": "b"}]}), encoding="utf-8"
    )
    provider = ScriptedProvider.from_file(path)

    texts = [(await provider.update(update_request())).text for _ in range(5)]

    assert texts == ["a", "b", "a", "b", "a"]


def test_script_files_are_checked(tmp_path: Path):
    typo = write_jsonl(tmp_path / "typo.jsonl", [{"tool_imput": {}}])
    with pytest.raises(ValueError, match="unknown keys"):
        load_script(typo)
    as_list = tmp_path / "list.json"
    as_list.write_text(json.dumps([{"text": "x"}]), encoding="utf-8")
    responses, loop = load_script(as_list)
    assert [r.text for r in responses] == ["x"] and loop is False
