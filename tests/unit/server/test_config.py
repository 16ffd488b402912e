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
        ("WM_TENANT_MAX_CONCURRENT_RPCS", "0"),
        ("WM_TENANT_MAX_STREAMS", "-1"),
        ("WM_ANONYMOUS_MAX_CONCURRENT_RPCS", "none"),
        ("WM_TENANT_MUTATIONS_PER_SECOND", "-5"),
        ("WM_TENANT_MUTATION_BURST", "0"),
        ("WM_PAGE_TOKEN_KEY", "short"),
        ("WM_RECALL_CACHE_MB", "8"),
        ("WM_RECALL_CACHE_MB", "lots"),
    ],
)
def test_bad_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=variable):
        load_settings()


def test_budgets_and_the_page_token_key_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    defaults = load_settings()
    assert (
        defaults.tenant_max_concurrent_rpcs,
        defaults.tenant_max_streams,
        defaults.anonymous_max_concurrent_rpcs,
        defaults.tenant_mutations_per_second,
        defaults.tenant_mutation_burst,
        defaults.page_token_key,
    ) == (256, 128, 16, 1000.0, 2000, None)
    for name, value in {
        "WM_TENANT_MAX_CONCURRENT_RPCS": "8",
        "WM_TENANT_MAX_STREAMS": "4",
        "WM_ANONYMOUS_MAX_CONCURRENT_RPCS": "2",
        "WM_TENANT_MUTATIONS_PER_SECOND": "0",
        "WM_TENANT_MUTATION_BURST": "10",
        "WM_PAGE_TOKEN_KEY": "0123456789abcdef",
    }.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert (
        settings.tenant_max_concurrent_rpcs,
        settings.tenant_max_streams,
        settings.anonymous_max_concurrent_rpcs,
        settings.tenant_mutations_per_second,
        settings.tenant_mutation_burst,
    ) == (8, 4, 2, 0.0, 10)
    assert settings.page_token_key is not None
    assert settings.page_token_key.get_secret_value() == "0123456789abcdef"
    assert "0123456789abcdef" not in repr(settings)
