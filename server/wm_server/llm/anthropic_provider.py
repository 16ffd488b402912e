"""The Anthropic provider: one forced tool call per step, through the official async SDK.

The SDK already retries what is worth retrying (429 honouring ``retry-after``, 408, 409, 5xx,
529, timeouts and dropped connections) with its own backoff, bounded by ``max_retries``; this
module only turns what is left into :class:`LlmError` with the right ``retryable`` flag, so
Phase 2 can decide between backing off and failing for good.

Sampling parameters are not sent: the SDK generation in use (API version 2026-10-21) no longer
has ``temperature`` and the API rejects it, so answers are kept stable by the forced tool call
and its strict schema instead.

Strict tools: the installed SDK's ``ToolParam`` has ``strict`` (grammar-constrained tool input,
generally available, no beta header), so tools are sent with ``strict: true`` and the schema
converted by :func:`wm_server.llm.schemas.strict_schema` (the structured-output subset has
``anyOf`` but not ``oneOf``). :data:`SDK_SUPPORTS_STRICT` checks the SDK at import; with an
SDK without it, or ``WM_ANTHROPIC_STRICT=false``, the plain schema is sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anthropic

from wm_server.llm.forced_tool import ForcedToolProvider
from wm_server.llm.models import known_context_window
from wm_server.llm.port import (
    LlmError,
    ModelReply,
    Purpose,
    Usage,
)
from wm_server.llm.prompts import (
    system_prompt,
)
from wm_server.llm.schemas import strict_schema

# Whether the installed SDK can send ``strict`` on a tool definition.
SDK_SUPPORTS_STRICT: bool = "strict" in getattr(anthropic.types.ToolParam, "__annotations__", {})

# Status codes worth another attempt later (the SDK has already retried them itself).
_RETRYABLE_STATUS = frozenset({408, 409, 429})


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage(llm_calls=1)
    return Usage(
        input_tokens=int(getattr(raw, "input_tokens", 0) or 0),
        output_tokens=int(getattr(raw, "output_tokens", 0) or 0),
        cache_read_input_tokens=int(getattr(raw, "cache_read_input_tokens", 0) or 0),
        cache_creation_input_tokens=int(getattr(raw, "cache_creation_input_tokens", 0) or 0),
        llm_calls=1,
    )


def _status_error(exc: anthropic.APIStatusError) -> LlmError:
    retryable = exc.status_code in _RETRYABLE_STATUS or exc.status_code >= 500
    kind = exc.type or type(exc).__name__
    detail = exc.api_message or exc.message
    request_id = f", request {exc.request_id}" if exc.request_id else ""
    return LlmError(
        f"anthropic: HTTP {exc.status_code} {kind}: {detail}{request_id}", retryable=retryable
    )


def reply_from_message(message: Any, tool_name: str) -> ModelReply:
    """The forced tool call's input, any text, the stop reason and the usage of a response."""
    tool_input: dict[str, Any] | str | None = None
    texts: list[str] = []
    for block in message.content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(str(getattr(block, "text", "")))
        elif kind == "tool_use" and tool_input is None and getattr(block, "name", "") == tool_name:
            raw = getattr(block, "input", None)
            if isinstance(raw, (dict, str)):
                tool_input = raw
            elif raw is not None:
                tool_input = json.dumps(raw, ensure_ascii=False, default=str)
    return ModelReply(
        tool_input=tool_input,
        stop_reason=str(message.stop_reason or "unknown"),
        usage=_usage(getattr(message, "usage", None)),
        text="\n".join(t for t in texts if t.strip()),
        model=str(getattr(message, "model", "") or ""),
    )


class AnthropicProvider(ForcedToolProvider):
    """Claude behind the three calls of the recovery chain."""

    def __init__(
        self,
        *,
        api_key: str | None,
        model: str,
        max_tokens: int,
        timeout: float,
        max_retries: int,
        base_url: str | None = None,
        strict: bool = True,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        # base_url None lets the SDK read ANTHROPIC_BASE_URL, so deployments can redirect it.
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )
        self._model = model
        self._max_tokens = max_tokens
        self._timeout = timeout
        self._max_retries = max_retries
        self._strict = strict and SDK_SUPPORTS_STRICT

    @property
    def name(self) -> str:
        return "anthropic"

    @property
    def strict(self) -> bool:
        """Whether tools are sent with ``strict: true``."""
        return self._strict

    @property
    def context_window(self) -> int | None:
        """Tokens the model can take in and give out (None for a model the table lacks)."""
        return known_context_window("anthropic", self._model)

    @property
    def has_credentials(self) -> bool:
        """Whether the SDK found a key, a token or a credentials provider (else every call fails)."""
        client = self._client
        return bool(
            getattr(client, "api_key", None)
            or getattr(client, "auth_token", None)
            or getattr(client, "credentials", None)
        )

    @property
    def model(self) -> str:
        return self._model

    async def aclose(self) -> None:
        await self._client.close()

    def request_body(
        self, purpose: Purpose, tool: Mapping[str, Any], user_text: str
    ) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for one call."""
        # One cache breakpoint on the system prompt caches the tool definition and the system
        # text together (the API caches the prefix tools → system); both are fixed per purpose.
        return {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "system": [
                {
                    "type": "text",
                    "text": system_prompt(purpose),
                    "cache_control": {"type": "ephemeral"},
                }
            ],
            "tools": [self.tool_definition(tool)],
            "tool_choice": {
                "type": "tool",
                "name": str(tool["name"]),
                "disable_parallel_tool_use": True,
            },
            "messages": [{"role": "user", "content": [{"type": "text", "text": user_text}]}],
        }

    def tool_definition(self, tool: Mapping[str, Any]) -> dict[str, Any]:
        """The tool as sent: strict schema and flag when strict tools are on."""
        if not self._strict:
            return dict(tool)
        return {**tool, "input_schema": strict_schema(tool["input_schema"]), "strict": True}

    async def _call(self, purpose: Purpose, tool: Mapping[str, Any], user_text: str) -> ModelReply:
        body = self.request_body(purpose, tool, user_text)
        try:
            message = await self._client.messages.create(**body)
        except anthropic.APITimeoutError as exc:
            raise LlmError(
                f"anthropic: no answer within {self._timeout:g}s "
                f"(after {self._max_retries} retries)",
                retryable=True,
            ) from exc
        except anthropic.APIConnectionError as exc:
            raise LlmError(f"anthropic: connection failed: {exc.message}", retryable=True) from exc
        except anthropic.APIStatusError as exc:
            raise _status_error(exc) from exc
        except anthropic.APIResponseValidationError as exc:
            raise LlmError(f"anthropic: malformed response: {exc.message}", retryable=True) from exc
        except anthropic.AnthropicError as exc:
            raise LlmError(f"anthropic: {exc}", retryable=False) from exc
        return reply_from_message(message, str(tool["name"]))
