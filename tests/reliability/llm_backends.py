"""The model APIs the reliability suite runs against, behind one interface.

Why: the fault matrix must hold for every vendor provider, and the faults are the same ideas
on each wire (a rate limit, an outage, a timeout, prose instead of a call, a cut-off call).
A :class:`Backend` names the fake server of one API, how its answers are written and which
environment points a production-configured server at it; the tests are written once against it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from support import fake_anthropic, fake_openai
from support.fake_http import FakeApi, RecordedRequest, Reply


@dataclass(frozen=True)
class Backend:
    """One model API: its fake server, its answers and the settings that select it."""

    name: str
    fake_class: type[FakeApi]
    route: str
    tool: Callable[..., Reply]  # tool(tool_input, name=..., cut_off=False)
    text_only: Callable[[str], Reply]
    error: Callable[..., Reply]  # error(status, retry_after=..., headers=...)
    requested_tool: Callable[[RecordedRequest], str]
    settings: Mapping[str, str]  # the environment besides the base URL
    base_url_variable: str

    def env(self, base_url: str) -> dict[str, str]:
        return {**self.settings, self.base_url_variable: base_url}


def _anthropic_tool(tool_input: Any, *, name: str, cut_off: bool = False) -> Reply:
    return fake_anthropic.tool_use(
        tool_input, name=name, stop_reason="max_tokens" if cut_off else "tool_use"
    )


def _openai_tool(tool_input: Any, *, name: str, cut_off: bool = False) -> Reply:
    return fake_openai.tool_call(
        tool_input, name=name, finish_reason="length" if cut_off else "tool_calls"
    )


# Retries and timeouts are small so that a fault costs milliseconds, not minutes, but every
# layer still runs: the SDK's own retries (one), then Phase 2's backoff.
ANTHROPIC = Backend(
    name="anthropic",
    fake_class=fake_anthropic.FakeAnthropic,
    route=fake_anthropic.ROUTE,
    tool=_anthropic_tool,
    text_only=fake_anthropic.text_only,
    error=fake_anthropic.error,
    requested_tool=fake_anthropic.requested_tool,
    settings={
        "WM_LLM_PROVIDER": "anthropic",
        "ANTHROPIC_API_KEY": "sk-ant-test-reliability",
        "WM_ANTHROPIC_MODEL": "claude-reliability-test",
        "WM_ANTHROPIC_MAX_RETRIES": "1",
        "WM_ANTHROPIC_TIMEOUT": "0.5",
    },
    base_url_variable="ANTHROPIC_BASE_URL",
)

OPENAI = Backend(
    name="openai",
    fake_class=fake_openai.FakeOpenAI,
    route=fake_openai.ROUTE,
    tool=_openai_tool,
    text_only=fake_openai.text_only,
    error=fake_openai.error,
    requested_tool=fake_openai.requested_tool,
    settings={
        "WM_LLM_PROVIDER": "openai",
        "OPENAI_API_KEY": "sk-test-reliability",
        "WM_OPENAI_MODEL": "local-reliability-test",
        "WM_OPENAI_CONTEXT_WINDOW": "32768",
        "WM_OPENAI_MAX_RETRIES": "1",
        "WM_OPENAI_TIMEOUT": "0.5",
    },
    base_url_variable="OPENAI_BASE_URL",
)

BACKENDS = (ANTHROPIC, OPENAI)
