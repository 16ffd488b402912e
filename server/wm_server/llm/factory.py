"""Choosing and building the providers from the settings.

Several providers can be configured at once (offline always, a vendor whenever its key is
set, scripted when it has responses); they are built at start into a :class:`ProviderRegistry`
by name, and ``WM_LLM_PROVIDER`` (or the first key found) names the default one. Whatever
would make a commit fail later for a reason known now (a missing key, a model the server
knows nothing about) is a :class:`ProviderConfigurationError` at start instead, and
:func:`check_choice` is the same check for a provider and model named later (a session's
configuration, when it exists).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from wm_server.config import ConfigurationError, LlmProviderName, Settings
from wm_server.llm.models import known_context_window
from wm_server.llm.offline import OfflineProvider
from wm_server.llm.port import LlmProvider
from wm_server.llm.scripted import ScriptedProvider


class ProviderConfigurationError(ConfigurationError):
    """The settings select a provider that cannot be built (the message names the variable)."""


# The variable that sets each vendor's model, for messages.
_MODEL_VARIABLE = {
    LlmProviderName.ANTHROPIC: "WM_ANTHROPIC_MODEL",
    LlmProviderName.OPENAI: "WM_OPENAI_MODEL",
}


def check_model(settings: Settings, name: LlmProviderName, model: str) -> int | None:
    """The context window of ``model`` on provider ``name``; raises when it is unknown.

    Offline and scripted have no model to check (None). A vendor's model must match the
    table of known models, or, for ``openai``, come with ``WM_OPENAI_CONTEXT_WINDOW``.
    """
    if name not in _MODEL_VARIABLE:
        return None
    if not model.strip():
        raise ProviderConfigurationError(f"{_MODEL_VARIABLE[name]} must name a model")
    window = known_context_window(name.value, model)
    if window is None and name == LlmProviderName.OPENAI:
        window = settings.openai_context_window
    if window is None:
        extra = (
            " or set WM_OPENAI_CONTEXT_WINDOW to its context window"
            if name == LlmProviderName.OPENAI
            else ""
        )
        raise ProviderConfigurationError(
            f"{_MODEL_VARIABLE[name]}={model!r} is not a model this server knows for {name.value}; "
            f"use a known model{extra}"
        )
    return window


class ProviderRegistry:
    """The providers built at start, by name, and the default one."""

    def __init__(self, providers: Mapping[str, LlmProvider], default: str) -> None:
        if default not in providers:
            raise ValueError(f"default provider {default!r} is not among {sorted(providers)}")
        self._providers = dict(providers)
        self._default = default

    @classmethod
    def single(cls, provider: LlmProvider) -> ProviderRegistry:
        """A registry of one provider (tests that bring their own)."""
        return cls({provider.name: provider}, provider.name)

    @property
    def default(self) -> LlmProvider:
        return self._providers[self._default]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._providers)

    def get(self, name: str) -> LlmProvider:
        """The provider called ``name``; raises when it is not configured."""
        try:
            return self._providers[name]
        except KeyError:
            configured = ", ".join(self._providers)
            raise ProviderConfigurationError(
                f"provider {name!r} is not configured (configured: {configured})"
            ) from None

    def __iter__(self) -> Iterator[LlmProvider]:
        return iter(self._providers.values())

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()


def check_choice(
    registry: ProviderRegistry, settings: Settings, name: str, model: str | None = None
) -> LlmProvider:
    """The configured provider ``name``, after checking that ``model`` (when given) is known.

    For a caller that lets a user pick a provider and model after start (UpdateSession):
    the same errors as at start, before anything is stored.
    """
    provider = registry.get(name)
    try:
        kind = LlmProviderName(name)
    except ValueError:
        return provider  # a provider brought by a test: nothing to check against
    check_model(settings, kind, model if model is not None else provider.model)
    return provider


async def build_registry(settings: Settings) -> ProviderRegistry:
    """Every configured provider, built and checked; see the module docstring."""
    built: dict[str, LlmProvider] = {}
    try:
        for name in settings.configured_providers:
            built[name.value] = _build(settings, name)
    except BaseException:
        for provider in built.values():
            await provider.aclose()
        raise
    return ProviderRegistry(built, settings.provider.value)


def build_provider(settings: Settings) -> LlmProvider:
    """The default provider alone (explicit ``WM_LLM_PROVIDER``, else the first key found)."""
    return _build(settings, settings.provider)


def _build(settings: Settings, chosen: LlmProviderName) -> LlmProvider:
    if chosen == LlmProviderName.OFFLINE:
        return OfflineProvider()
    if chosen == LlmProviderName.SCRIPTED:
        path = settings.scripted_responses
        if path is None:
            raise ProviderConfigurationError(
                "WM_LLM_PROVIDER=scripted needs WM_SCRIPTED_RESPONSES (a JSON or JSON Lines file)"
            )
        try:
            return ScriptedProvider.from_file(path, delay=settings.scripted_delay)
        except (OSError, ValueError) as exc:
            raise ProviderConfigurationError(f"WM_SCRIPTED_RESPONSES: {exc}") from exc
    if chosen == LlmProviderName.OPENAI:
        return _openai(settings)
    return _anthropic(settings)


def _openai(settings: Settings) -> LlmProvider:
    # Imported here: the SDKs take seconds to import, a cost the offline default should not pay.
    from wm_server.llm.openai_provider import OpenAIProvider

    if settings.openai_api_key is None or not settings.openai_api_key.get_secret_value():
        raise ProviderConfigurationError(
            "WM_LLM_PROVIDER=openai needs OPENAI_API_KEY (a local server that wants no key "
            "accepts any value)"
        )
    window = check_model(settings, LlmProviderName.OPENAI, settings.openai_model)
    return OpenAIProvider(
        api_key=settings.openai_api_key.get_secret_value(),
        model=settings.openai_model,
        max_tokens=settings.openai_max_tokens,
        timeout=settings.openai_timeout,
        max_retries=settings.openai_max_retries,
        base_url=settings.openai_base_url,
        strict=settings.openai_strict,
        context_window=window,
    )


def _anthropic(settings: Settings) -> LlmProvider:
    import anthropic

    from wm_server.llm.anthropic_provider import AnthropicProvider

    check_model(settings, LlmProviderName.ANTHROPIC, settings.anthropic_model)
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    try:
        provider = AnthropicProvider(
            api_key=key,
            model=settings.anthropic_model,
            max_tokens=settings.anthropic_max_tokens,
            timeout=settings.anthropic_timeout,
            max_retries=settings.anthropic_max_retries,
            strict=settings.anthropic_strict,
        )
    except anthropic.AnthropicError as exc:  # e.g. a broken SDK profile when no key is set
        raise ProviderConfigurationError(f"anthropic credentials: {exc}") from exc
    if not provider.has_credentials:
        # Fail at start, not at the first commit: the SDK found no key, token or profile.
        raise ProviderConfigurationError(
            "WM_LLM_PROVIDER=anthropic needs ANTHROPIC_API_KEY (or SDK credentials)"
        )
    return provider
