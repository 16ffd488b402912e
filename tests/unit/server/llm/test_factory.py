"""Choosing the provider from the settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wm_server.config import ConfigurationError, Settings
from wm_server.llm.anthropic_provider import AnthropicProvider
from wm_server.llm.factory import build_provider
from wm_server.llm.offline import OfflineProvider
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
