"""Choosing and building the provider from the settings."""

from __future__ import annotations

from wm_server.config import ConfigurationError, LlmProviderName, Settings
from wm_server.llm.offline import OfflineProvider
from wm_server.llm.port import LlmProvider
from wm_server.llm.scripted import ScriptedProvider


class ProviderConfigurationError(ConfigurationError):
    """The settings select a provider that cannot be built (the message names the variable)."""


def build_provider(settings: Settings) -> LlmProvider:
    """The provider in force: explicit ``WM_LLM_PROVIDER``, else anthropic with a key, else offline."""
    chosen = settings.provider
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
    # Imported here: the SDK takes seconds to import, a cost the offline default should not pay.
    import anthropic

    from wm_server.llm.anthropic_provider import AnthropicProvider

    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    try:
        provider = AnthropicProvider(
            api_key=key,
            model=settings.anthropic_model,
            max_tokens=settings.anthropic_max_tokens,
            timeout=settings.anthropic_timeout,
            max_retries=settings.anthropic_max_retries,
        )
    except anthropic.AnthropicError as exc:  # e.g. a broken SDK profile when no key is set
        raise ProviderConfigurationError(f"anthropic credentials: {exc}") from exc
    if not provider.has_credentials:
        # Fail at start, not at the first commit: the SDK found no key, token or profile.
        raise ProviderConfigurationError(
            "WM_LLM_PROVIDER=anthropic needs ANTHROPIC_API_KEY (or SDK credentials)"
        )
    return provider
