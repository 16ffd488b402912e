"""The ``openai`` provider: Chat Completions with one forced function call per step.

It speaks to OpenAI and to any server that implements the Chat Completions API (Azure OpenAI,
OpenRouter, vLLM, Ollama, llama.cpp's server, LM Studio) through the official async SDK,
pointed elsewhere with ``OPENAI_BASE_URL``. Like the Anthropic provider it only makes the call
and hands back what came out; the recovery chain decides what the answer is worth, so the
habits of compatible backends need no code of their own here:

- a backend that ignores ``tool_choice`` and writes the arguments as plain content gives a
  reply without tool input and with that text, which the chain salvages (update) or reads as
  creation output;
- arguments wrapped as ``{"raw": "..."}`` by a backend that could not parse them are handed
  over as they came; the chain's salvage unwraps them;
- arguments that are not valid JSON are handed over as the raw string (the chain reports the
  decode error, salvages, and shows it to the model in the repair call);
- one call's arguments split over several ``tool_calls`` entries (the continuation entries
  carry no name) are joined back into one string before decoding.

Strict mode: the tool is sent with ``strict: true`` and the schema converted by
:func:`wm_server.llm.schemas.strict_schema` (``oneOf`` → ``anyOf``, every property required,
no additional properties), so a backend that enforces it can only produce schema-valid
arguments. ``WM_OPENAI_STRICT=false`` sends the plain schema without ``strict`` for
backends that reject the flag or its dialect.

Usage: ``prompt_tokens`` includes the cached part, so ``input_tokens`` is recorded as
``prompt_tokens - cached_tokens`` (the tokens billed at the full rate, as the Anthropic
provider records them) and ``cache_read_input_tokens`` as ``cached_tokens``. OpenAI caches
prefixes automatically and reports no cache writes, so ``cache_creation_input_tokens`` is 0.
The static system prompt comes first so that the cached prefix covers it.

Retries: the SDK retries 408, 409, 429, 5xx, timeouts and dropped connections with backoff,
bounded by ``max_retries``; what is left becomes :class:`LlmError`, retryable or not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import openai

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

# Status codes worth another attempt later (the SDK has already retried them itself).
_RETRYABLE_STATUS = frozenset({408, 409, 429})
# Chat Completions' finish reasons in the recovery chain's vocabulary (the rest pass as is).
_STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use"}


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage(llm_calls=1)
    prompt = int(getattr(raw, "prompt_tokens", 0) or 0)
    details = getattr(raw, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
        cache_read_input_tokens=cached,
        cache_creation_input_tokens=0,
        llm_calls=1,
    )


def _function(call: Any) -> tuple[str, str, str]:
    """(id, name, arguments) of one ``tool_calls`` entry, empty strings where absent."""
    function = getattr(call, "function", None)
    name = str(getattr(function, "name", "") or "")
    arguments = getattr(function, "arguments", "")
    if not isinstance(arguments, str):  # a backend that sent an object instead of a string
        arguments = json.dumps(arguments, ensure_ascii=False, default=str)
    return str(getattr(call, "id", "") or ""), name, arguments


def tool_arguments(tool_calls: Sequence[Any], tool_name: str) -> str | None:
    """The arguments string of the first call of ``tool_name``, continuation pieces joined.

    A piece continues the call before it when it has no name, or the same id: the shape a
    backend produces when it forwards streamed deltas as separate entries.
    """
    pieces: list[str] | None = None
    call_id = ""
    for call in tool_calls:
        this_id, name, arguments = _function(call)
        if pieces is None:
            if name == tool_name:
                pieces, call_id = [arguments], this_id
            continue
        if not name or (this_id and this_id == call_id and name == tool_name):
            pieces.append(arguments)
        else:
            break
    return "".join(pieces) if pieces is not None else None


def _decoded(arguments: str) -> dict[str, Any] | str:
    """A JSON object as a dict (what the SDKs of other APIs hand over); anything else raw."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def reply_from_completion(completion: Any, tool_name: str) -> ModelReply:
    """The forced call's arguments, any text, the stop reason and the usage of a response."""
    usage = _usage(getattr(completion, "usage", None))
    model = str(getattr(completion, "model", "") or "")
    choices = getattr(completion, "choices", None) or []
    if not choices:
        return ModelReply(None, "no_choices", usage, model=model)
    choice = choices[0]
    message = getattr(choice, "message", None)
    content = getattr(message, "content", None)
    text = content if isinstance(content, str) else ""
    arguments = tool_arguments(getattr(message, "tool_calls", None) or [], tool_name)
    finish = str(getattr(choice, "finish_reason", None) or "unknown")
    return ModelReply(
        tool_input=_decoded(arguments) if arguments is not None else None,
        stop_reason=_STOP_REASONS.get(finish, finish),
        usage=usage,
        text=text.strip(),
        model=model,
    )


def function_tool(tool: Mapping[str, Any], *, strict: bool) -> dict[str, Any]:
    """A ``wm_core`` tool (Anthropic's shape) as a Chat Completions function tool."""
    schema = tool["input_schema"]
    function: dict[str, Any] = {
        "name": str(tool["name"]),
        "description": str(tool["description"]),
        "parameters": strict_schema(schema) if strict else dict(schema),
    }
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


class OpenAIProvider(ForcedToolProvider):
    """An OpenAI-compatible model behind the three calls of the recovery chain."""

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
        context_window: int | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        # base_url None lets the SDK read OPENAI_BASE_URL (else api.openai.com).
        self._client = client or openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )
        self._model = model
        self._max_tokens = max_tokens
        self._timeout = timeout
        self._max_retries = max_retries
        self._strict = strict
        self._context_window = context_window or known_context_window("openai", model)

    @property
    def name(self) -> str:
        return "openai"

    @property
    def model(self) -> str:
        return self._model

    @property
    def context_window(self) -> int | None:
        """Tokens the model can take in and give out, None when neither known nor given."""
        return self._context_window

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    async def aclose(self) -> None:
        await self._client.close()

    def request_body(
        self, purpose: Purpose, tool: Mapping[str, Any], user_text: str
    ) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for one call."""
        return {
            "model": self._model,
            "max_completion_tokens": self._max_tokens,
            "messages": [
                {"role": "system", "content": system_prompt(purpose)},
                {"role": "user", "content": user_text},
            ],
            "tools": [function_tool(tool, strict=self._strict)],
            "tool_choice": {"type": "function", "function": {"name": str(tool["name"])}},
            "parallel_tool_calls": False,
        }

    async def _call(self, purpose: Purpose, tool: Mapping[str, Any], user_text: str) -> ModelReply:
        body = self.request_body(purpose, tool, user_text)
        try:
            completion = await self._client.chat.completions.create(**body)
        except openai.APITimeoutError as exc:
            raise LlmError(
                f"openai: no answer within {self._timeout:g}s (after {self._max_retries} retries)",
                retryable=True,
            ) from exc
        except openai.APIConnectionError as exc:
            raise LlmError(f"openai: connection failed: {exc.message}", retryable=True) from exc
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except openai.APIResponseValidationError as exc:
            raise LlmError(f"openai: malformed response: {exc.message}", retryable=True) from exc
        except openai.OpenAIError as exc:
            raise LlmError(f"openai: {exc}", retryable=False) from exc
        return reply_from_completion(completion, str(tool["name"]))

    def _status_error(self, exc: openai.APIStatusError) -> LlmError:
        status = exc.status_code
        retryable = status in _RETRYABLE_STATUS or status >= 500
        body: Mapping[str, Any] = exc.body if isinstance(exc.body, Mapping) else {}
        inner = body.get("error")
        error: Mapping[str, Any] = inner if isinstance(inner, Mapping) else body
        kind = str(error.get("type") or error.get("code") or type(exc).__name__)
        detail = str(error.get("message") or exc.message)
        request_id = f", request {exc.request_id}" if exc.request_id else ""
        hint = ""
        if status in (400, 422) and self._strict:
            hint = " (if this backend rejects strict tool schemas, set WM_OPENAI_STRICT=false)"
        return LlmError(
            f"openai: HTTP {status} {kind}: {detail}{request_id}{hint}", retryable=retryable
        )
