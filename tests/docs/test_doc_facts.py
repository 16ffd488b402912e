"""What the docs state that a reader acts on without running a block: the API key examples
pass the server's own key rule, the repository paths and relative links they name exist, every
integration page has a Python example that runs, and no setting that works is described as
having no effect."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from blocks import REPO, blocks_of, documents
from pydantic import SecretStr

from wm_server.config import Settings
from wm_server.security.auth import load_keyring

KEY_SOURCES = [*documents(), REPO / "Dockerfile", REPO / "deploy" / "compose.yaml"]
_KEYS = re.compile(r"WM_API_KEYS=(.*)$", re.MULTILINE)
_TOP = ("protos/", "clients/", "server/", "tests/", "bench/", "examples/", "docs/", "deploy/")
_TOP += ("scripts/", "wm_core/", "third_party/")
_PATH = re.compile(r"`((?:" + "|".join(re.escape(t) for t in _TOP) + r")[^`\s]*)`")
_LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)#\s]+)(?:#[^)]*)?\)")


def _key_examples() -> list[tuple[str, str]]:
    found = []
    for path in KEY_SOURCES:
        for match in _KEYS.finditer(path.read_text(encoding="utf-8")):
            value = match[1].removesuffix("\\").strip()
            if not value or value.startswith(("${", "…", "...", "`")):
                continue  # a placeholder or a reference, not an example
            found.append((f"{path.relative_to(REPO)}: {value[:40]}", value))
    return found


def test_the_docs_show_api_key_examples() -> None:
    names = {name.split(":")[0] for name, _ in _key_examples()}
    assert {"README.md", "Dockerfile", "deploy/compose.yaml"} <= names


@pytest.mark.parametrize("example", _key_examples(), ids=lambda e: e[0])
def test_an_api_key_example_meets_the_servers_rule(example: tuple[str, str]) -> None:
    """The shell evaluates the example as a reader's would (quotes, $(openssl rand ...): the
    first word of the rest of the line); the server's own loader must accept the result."""
    _, value = example
    evaluated = subprocess.run(
        ["bash", "-c", f'set -- {value}\nprintf %s "$1"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    keyring = load_keyring(Settings(api_keys=SecretStr(evaluated)))
    assert keyring is not None and len(keyring.tenants) == 1


def test_the_readme_names_only_paths_that_exist() -> None:
    missing = []
    for document in documents():
        for raw in _PATH.findall(document.read_text(encoding="utf-8")):
            path = raw.rstrip(".,:;)")
            if any(c in path for c in "*{<…[") or "=" in path:
                continue  # a pattern or a placeholder, not a path
            if not (REPO / path).exists():
                missing.append(f"{document.relative_to(REPO)}: {path}")
    assert not missing, missing


def test_relative_links_lead_to_files() -> None:
    missing: list[Path] = []
    for document in documents():
        for target in _LINK.findall(document.read_text(encoding="utf-8")):
            if not (document.parent / target).exists():
                missing.append((document.parent / target).resolve())
    assert not missing, [str(p.relative_to(REPO)) for p in missing]


def test_every_integration_page_has_a_python_example_that_runs() -> None:
    """A reader of an integration page gets a Python program to run; test_code_blocks.py
    runs it against a real server (not-run blocks do not count)."""
    pages = sorted((REPO / "docs" / "integrations").glob("*.md"))
    assert {"mcp", "openai-agents", "langchain", "llamaindex"} <= {p.stem for p in pages}
    for page in pages:
        runs = [b for b in blocks_of(page) if b.runner == "python" and b.not_run is None]
        assert runs, f"{page.name} has no Python block that runs"


@pytest.mark.parametrize(
    "path", [REPO / "README.md", *sorted((REPO / "protos" / "wm" / "v1").glob("*.proto"))]
)
def test_working_settings_are_not_described_as_without_effect(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for phrase in ("no effect yet", "not built yet", "reserved for the tool-output store"):
        assert phrase not in text, f"{path.name} still says {phrase!r}"
