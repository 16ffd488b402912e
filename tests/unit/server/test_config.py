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
    ],
)
def test_bad_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=variable):
        load_settings()
