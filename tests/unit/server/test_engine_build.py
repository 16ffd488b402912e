"""Which engine build is loaded, and the refusal of a compiled engine older than its sources."""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

import pytest

from wm_server import engine_build
from wm_server.app import start_application
from wm_server.config import ConfigurationError, Settings
from wm_server.engine_build import (
    StaleEngineError,
    inspect_engine,
    require_current_engine,
    write_manifest,
)

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for the installed ``wm_core`` directory, with two modules."""
    root = tmp_path / "wm_core"
    (root / "guards").mkdir(parents=True)
    (root / "__init__.py").write_text('"""facade"""\n')
    (root / "merging.py").write_text("def merge() -> None: ...\n")
    (root / "guards" / "title.py").write_text("RULE = 1\n")
    monkeypatch.setattr(engine_build, "package_dir", lambda: root)
    return root


def compile_fake(package: Path) -> None:
    """What ``make core`` leaves behind: extension modules and the manifest."""
    (package / f"merging{SUFFIX}").write_bytes(b"\x7fELF")
    (package / "guards" / f"title{SUFFIX}").write_bytes(b"\x7fELF")
    write_manifest(package)


def test_sources_alone_are_the_interpreted_engine(package: Path) -> None:
    engine = inspect_engine()
    assert (engine.compiled, engine.stale) == (False, None)
    assert engine.label == "interpreted (pure Python)"


def test_a_fresh_build_is_compiled_and_current(package: Path) -> None:
    compile_fake(package)
    engine = require_current_engine()
    assert (engine.compiled, engine.stale) == (True, None)
    assert engine.label == "compiled (mypyc)"


def test_the_package_init_is_not_part_of_the_build(package: Path) -> None:
    compile_fake(package)
    (package / "__init__.py").write_text('"""facade, reworded"""\n')
    assert inspect_engine().stale is None


def test_an_edited_source_makes_the_build_stale(package: Path) -> None:
    compile_fake(package)
    (package / "guards" / "title.py").write_text("RULE = 2\n")
    assert inspect_engine().stale == "wm_core/guards/title.py changed since the build"
    with pytest.raises(StaleEngineError, match=r"guards/title\.py changed.*make core"):
        require_current_engine()


def test_a_new_module_makes_the_build_stale(package: Path) -> None:
    compile_fake(package)
    (package / "paths.py").write_text("X = 1\n")
    assert inspect_engine().stale == "modules were added or removed since the build"


def test_compiled_modules_without_a_manifest_are_stale(package: Path) -> None:
    compile_fake(package)
    (package / "_native.json").unlink()
    assert inspect_engine().stale == "compiled modules without _native.json"


def test_the_installed_engine_is_current() -> None:
    """Whatever build this suite runs on (``make pytest`` asks for the compiled one), it
    matches the sources on disk."""
    assert inspect_engine().stale is None


async def test_the_server_refuses_to_start_on_a_stale_engine(package: Path, tmp_path: Path) -> None:
    compile_fake(package)
    (package / "merging.py").write_text("def merge() -> int: ...\n")
    settings = Settings(address="127.0.0.1:0", data_dir=tmp_path / "data", llm_provider="offline")  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match=r"compiled engine is stale: wm_core/merging\.py"):
        await start_application(settings)
