"""Fixtures for the provider tests: a fake Messages API, a fake Chat Completions server, and
providers pointed at them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from llm_samples import OPENAI_TEST_MODEL, TEST_MODEL

from support.conversation import load_conversation
from support.fake_anthropic import FakeAnthropic
from support.fake_openai import FakeOpenAI
from wm_core import Message
from wm_server.llm.anthropic_provider import AnthropicProvider
from wm_server.llm.openai_provider import OpenAIProvider


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def make_provider(
    fake: FakeAnthropic,
) -> AsyncIterator[Callable[..., AnthropicProvider]]:
    """Build providers against the fake server (short timeout, one SDK retry by default)."""
    made: list[AnthropicProvider] = []

    def build(**overrides: Any) -> AnthropicProvider:
        options: dict[str, Any] = {
            "api_key": "test-key",
            "model": TEST_MODEL,
            "max_tokens": 2048,
            "timeout": 2.0,
            "max_retries": 1,
            "base_url": fake.base_url,
        }
        options.update(overrides)
        provider = AnthropicProvider(**options)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        await provider.aclose()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def make_openai_provider(
    fake_openai: FakeOpenAI,
) -> AsyncIterator[Callable[..., OpenAIProvider]]:
    """Build OpenAI providers against the fake server (short timeout, one SDK retry)."""
    made: list[OpenAIProvider] = []

    def build(**overrides: Any) -> OpenAIProvider:
        options: dict[str, Any] = {
            "api_key": "sk-test-key",
            "model": OPENAI_TEST_MODEL,
            "max_tokens": 2048,
            "timeout": 2.0,
            "max_retries": 1,
            "base_url": fake_openai.base_url,
        }
        options.update(overrides)
        provider = OpenAIProvider(**options)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        await provider.aclose()


@pytest.fixture
def conversation() -> list[Message]:
    return load_conversation()
