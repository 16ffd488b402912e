"""API keys: parsing from WM_API_KEYS and WM_API_KEYS_FILE, hashed storage, lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from wm_server.config import ConfigurationError, Settings
from wm_server.security.auth import load_keyring

KEY_A = "a" * 8 + "-0123456789abcdef"
KEY_B = "b" * 8 + "-fedcba9876543210"


def _settings(**values: object) -> Settings:
    return Settings(**values)  # type: ignore[arg-type]


def test_no_keys_means_authentication_off() -> None:
    assert load_keyring(_settings()) is None
    assert load_keyring(_settings(api_keys="")) is None


def test_keys_map_to_tenants_and_only_digests_are_kept() -> None:
    keyring = load_keyring(_settings(api_keys=f"alpha:{KEY_A},alpha:{KEY_B}x, beta:{KEY_B}"))
    assert keyring is not None
    assert keyring.authenticate(KEY_A) == "alpha"
    assert keyring.authenticate(KEY_B + "x") == "alpha"  # two keys of one tenant (rotation)
    assert keyring.authenticate(KEY_B) == "beta"
    assert keyring.authenticate(KEY_A[:-1]) is None
    assert keyring.authenticate("") is None
    assert keyring.tenants == {"alpha", "beta"} and len(keyring) == 3
    dump = repr(keyring).encode()
    for key in (KEY_A, KEY_B):
        assert key.encode() not in dump
        assert all(key.encode() not in digest for digest, _ in keyring.entries)


def test_a_value_without_any_pair_is_an_error_not_keys_off() -> None:
    with pytest.raises(ConfigurationError, match="WM_API_KEYS: no tenant:key pair"):
        load_keyring(_settings(api_keys=" , ,"))


def test_a_key_may_contain_a_colon() -> None:
    keyring = load_keyring(_settings(api_keys=f"alpha:{KEY_A}:more"))
    assert keyring is not None and keyring.authenticate(f"{KEY_A}:more") == "alpha"


def test_file_and_environment_are_merged(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"# comment\n\n  beta:{KEY_B}\n")
    keyring = load_keyring(_settings(api_keys=f"alpha:{KEY_A}", api_keys_file=path))
    assert keyring is not None
    assert (keyring.authenticate(KEY_A), keyring.authenticate(KEY_B)) == ("alpha", "beta")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "holds no tenant:key line"),
        ("# only a comment\n", "holds no tenant:key line"),
        (f"alpha:{KEY_A}\nbroken\n", "WM_API_KEYS_FILE line 2: expected tenant:key"),
        (f"alpha:{KEY_A}\nbeta:{KEY_A}\n", "WM_API_KEYS_FILE line 2: the same key"),
    ],
)
def test_bad_key_files_name_the_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "keys"
    path.write_text(content)
    with pytest.raises(ConfigurationError) as caught:
        load_keyring(_settings(api_keys_file=path))
    assert message in str(caught.value) and KEY_A not in str(caught.value)


def test_missing_key_file_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="WM_API_KEYS_FILE: cannot read"):
        load_keyring(_settings(api_keys_file=tmp_path / "absent"))


@pytest.mark.parametrize(
    "entry",
    [":" + KEY_A, "alpha:", "alpha:short", "-alpha:" + KEY_A, "alpha:" + KEY_A[:8] + " spaced1"],
)
def test_bad_entries_are_refused(entry: str) -> None:
    with pytest.raises(ConfigurationError, match="WM_API_KEYS entry 1"):
        load_keyring(_settings(api_keys=entry))


def test_settings_read_the_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from wm_server.config import load_settings

    monkeypatch.setenv("WM_API_KEYS", f"alpha:{KEY_A}")
    monkeypatch.setenv("WM_API_KEYS_FILE", str(tmp_path / "k"))
    monkeypatch.setenv("WM_ALLOW_INSECURE", "1")
    monkeypatch.setenv("WM_TLS_CERT", "/c.pem")
    monkeypatch.setenv("WM_TLS_KEY", "/k.pem")
    monkeypatch.setenv("WM_TLS_CLIENT_CA", "/ca.pem")
    monkeypatch.setenv("WM_MAX_CONCURRENT_RPCS", "64")
    settings = load_settings()
    assert settings.api_keys is not None and settings.api_keys.get_secret_value().endswith(KEY_A)
    assert KEY_A not in repr(settings)  # a SecretStr: never printed
    assert settings.api_keys_file == tmp_path / "k" and settings.allow_insecure is True
    assert (settings.tls_cert, settings.tls_key, settings.tls_client_ca) == (
        Path("/c.pem"),
        Path("/k.pem"),
        Path("/ca.pem"),
    )
    assert settings.max_concurrent_rpcs == 64
