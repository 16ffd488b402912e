"""Choosing the provider from the settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wm_server.app import start_application
from wm_server.config import ConfigurationError, Settings, load_settings
from wm_server.llm.anthropic_provider import AnthropicProvider
from wm_server.llm.factory import (
    ProviderConfigurationError,
    build_provider,
    build_registry,
    check_choice,
)
from wm_server.llm.offline import OfflineProvider
from wm_server.llm.openai_provider import OpenAIProvider
from wm_server.llm.scripted import ScriptedProvider


def test_offline_without_a_key():
    assert isinstance(build_provider(Settings()), OfflineProvider)


async def test_anthropic_with_a_key(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("WM_ANTHROPIC_MODEL", "claude-other")
    provider = build_provider(Settings())
    try:
        assert isinstance(provider, AnthropicProvider)
        assert provider.model == "claude-other"
        assert provider.name == "anthropic"
    finally:
        await provider.aclose()


def test_explicit_anthropic_without_credentials_fails_at_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.setenv("HOME", str(tmp_path))  # no SDK profile either
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        build_provider(Settings(llm_provider="anthropic"))


def test_broken_sdk_profile_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "missing"))
    with pytest.raises(ConfigurationError, match="anthropic credentials"):
        build_provider(Settings(llm_provider="anthropic"))


def test_scripted_from_file(tmp_path: Path):
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"text": "x"}) + "\n", encoding="utf-8")
    provider = build_provider(
        Settings(llm_provider="scripted", scripted_responses=script, scripted_delay=0.5)
    )
    assert isinstance(provider, ScriptedProvider)
    assert provider.remaining == 1


def test_scripted_needs_a_file(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="WM_SCRIPTED_RESPONSES"):
        build_provider(Settings(llm_provider="scripted"))
    with pytest.raises(ConfigurationError, match="WM_SCRIPTED_RESPONSES"):
        build_provider(Settings(llm_provider="scripted", scripted_responses=tmp_path / "missing"))


# -- openai, several providers, and the checks at start -------------------------------------------


async def test_openai_with_a_key_when_there_is_no_anthropic_key(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("WM_OPENAI_MODEL", "gpt-4o")
    provider = build_provider(load_settings())
    try:
        assert isinstance(provider, OpenAIProvider)
        assert (provider.name, provider.model) == ("openai", "gpt-4o")
        assert provider.base_url.startswith("http://127.0.0.1:9/v1")
        assert provider.context_window == 128_000
    finally:
        await provider.aclose()


def test_explicit_openai_without_a_key_fails_at_start():
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        build_provider(Settings(llm_provider="openai"))


def test_an_unknown_openai_model_fails_at_start_unless_its_window_is_given(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    monkeypatch.setenv("WM_OPENAI_MODEL", "llama3.1:8b")
    with pytest.raises(ConfigurationError) as caught:
        build_provider(load_settings())
    assert "WM_OPENAI_MODEL='llama3.1:8b'" in str(caught.value)
    assert "WM_OPENAI_CONTEXT_WINDOW" in str(caught.value)

    monkeypatch.setenv("WM_OPENAI_CONTEXT_WINDOW", "32768")
    provider = build_provider(load_settings())
    assert isinstance(provider, OpenAIProvider) and provider.context_window == 32_768


def test_an_unknown_anthropic_model_fails_at_start(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("WM_ANTHROPIC_MODEL", "gpt-4o")
    with pytest.raises(ConfigurationError, match="WM_ANTHROPIC_MODEL='gpt-4o'"):
        build_provider(load_settings())


async def test_several_providers_are_configured_at_once(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    registry = await build_registry(load_settings())
    try:
        assert registry.names == ("offline", "anthropic", "openai")
        assert registry.default.name == "anthropic"  # the first key found, as before
        assert isinstance(registry.get("openai"), OpenAIProvider)
        with pytest.raises(ProviderConfigurationError, match="'scripted' is not configured"):
            registry.get("scripted")
    finally:
        await registry.aclose()

    monkeypatch.setenv("WM_LLM_PROVIDER", "openai")
    registry = await build_registry(load_settings())
    try:
        assert registry.default.name == "openai"
        assert set(registry.names) == {"offline", "anthropic", "openai"}
    finally:
        await registry.aclose()


async def test_a_configured_provider_that_cannot_be_built_stops_the_start(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("WM_OPENAI_MODEL", "no-such-model")
    monkeypatch.setenv("WM_LLM_PROVIDER", "offline")  # not even the default
    with pytest.raises(ProviderConfigurationError, match="WM_OPENAI_MODEL"):
        await build_registry(load_settings())


async def test_check_choice_validates_a_provider_and_model_named_later(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    settings = load_settings()
    registry = await build_registry(settings)
    try:
        assert check_choice(registry, settings, "openai", "gpt-4.1").name == "openai"
        assert check_choice(registry, settings, "offline").name == "offline"
        with pytest.raises(
            ProviderConfigurationError, match="not a model this server knows for openai"
        ):
            check_choice(registry, settings, "openai", "claude-haiku-4-5")
        with pytest.raises(ProviderConfigurationError, match="not configured"):
            check_choice(registry, settings, "anthropic")
    finally:
        await registry.aclose()


async def test_server_start_fails_on_a_missing_key(tmp_path: Path):
    settings = Settings(llm_provider="openai", data_dir=tmp_path / "data", address="127.0.0.1:0")
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        await start_application(settings)
    assert not (tmp_path / "data" / "wm.sqlite3").exists()  # nothing was opened
