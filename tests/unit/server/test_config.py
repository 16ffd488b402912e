"""Settings come from the environment; bad values name their variable."""

from __future__ import annotations

import pytest

from wm_server.config import ConfigurationError, LlmProviderName, load_settings


def test_defaults_are_the_embedded_setup() -> None:
    settings = load_settings()
    assert settings.address == "127.0.0.1:50051"
    assert str(settings.data_dir) == "var"
    assert settings.database_url is None
    assert settings.provider is LlmProviderName.OFFLINE
    assert settings.sqlite_path.name == "wm.sqlite3"


def test_api_key_selects_anthropic_unless_provider_is_explicit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert load_settings().provider is LlmProviderName.ANTHROPIC
    monkeypatch.setenv("WM_LLM_PROVIDER", "offline")
    assert load_settings().provider is LlmProviderName.OFFLINE


def test_openai_key_selects_openai_when_there_is_no_anthropic_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    settings = load_settings()
    assert settings.provider is LlmProviderName.OPENAI
    assert settings.configured_providers == (LlmProviderName.OFFLINE, LlmProviderName.OPENAI)
    assert (settings.openai_model, settings.openai_max_tokens) == ("gpt-4.1-mini", 8192)
    assert (settings.openai_timeout, settings.openai_strict) == (120.0, True)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    settings = load_settings()
    assert settings.provider is LlmProviderName.ANTHROPIC  # as before: its key comes first
    assert LlmProviderName.OPENAI in settings.configured_providers


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WM_ADDRESS", "no-port"),
        ("WM_ADDRESS", "host:99999"),
        ("WM_LLM_PROVIDER", "gpt"),
        ("WM_LOG_LEVEL", "loud"),
        ("WM_DATABASE_URL", "mysql://x"),
        ("WM_METRICS_ADDRESS", "nowhere"),
        ("WM_MAX_MESSAGE_BYTES", "12"),
        ("OPENAI_BASE_URL", "localhost:11434"),
        ("WM_OPENAI_MAX_TOKENS", "10"),
        ("WM_OPENAI_TIMEOUT", "0"),
        ("WM_OPENAI_CONTEXT_WINDOW", "100"),
        ("WM_OPENAI_STRICT", "maybe"),
    ],
)
def test_bad_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=variable):
        load_settings()
