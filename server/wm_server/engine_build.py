"""Which build of the engine is loaded, and whether it still matches its sources.

``wm_core`` runs either as its Python sources or compiled by mypyc (``make core``: extension
modules next to the sources, which Python imports first). A compiled module built from an
older source would run old rules without a word, so the build records a hash of every source
it compiled (``wm_core/_native.json``) and the server, the test suite and the benchmarks check
it before they use the engine. The engine itself stays free of I/O; this check lives here.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

MANIFEST_NAME = "_native.json"
# The package's own ``__init__`` is never compiled (it only re-exports the facade).
INTERPRETED = "__init__.py"


@dataclass(frozen=True, slots=True)
class EngineBuild:
    """What ``inspect_engine`` found."""

    compiled: bool  # the engine's modules are native extension modules
    stale: str | None = None  # why the compiled modules do not match the sources

    @property
    def label(self) -> str:
        return "compiled (mypyc)" if self.compiled else "interpreted (pure Python)"


class StaleEngineError(RuntimeError):
    """The compiled engine was built from sources that have changed since."""


def package_dir() -> Path:
    """Where ``wm_core`` is, found without importing it (a broken build must stay fixable)."""
    spec = importlib.util.find_spec("wm_core")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("wm_core is not installed")
    return Path(spec.origin).resolve().parent


def compiled_sources(package: Path) -> dict[str, Path]:
    """The sources a build compiles, by their path inside the package."""
    return {
        path.relative_to(package).as_posix(): path
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).as_posix() != INTERPRETED
    }


def native_modules(package: Path) -> list[Path]:
    """The extension modules a build left in the package."""
    return sorted(package.rglob("*.so"))


def source_hashes(package: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256(path.read_bytes()).hexdigest()
        for name, path in compiled_sources(package).items()
    }


def write_manifest(package: Path) -> None:
    """Record the sources a build just compiled (called by ``scripts/build_core.py``)."""
    manifest = {"sources": source_hashes(package)}
    (package / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def inspect_engine() -> EngineBuild:
    """Whether the engine is compiled and, if so, whether it is current."""
    package = package_dir()
    natives = native_modules(package)
    # Python loads an extension module before a source of the same name: the module every
    # merge runs through tells which engine runs.
    compiled = any(
        (package / f"merging{suffix}").exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )
    if not natives:
        return EngineBuild(compiled=compiled)
    manifest = package / MANIFEST_NAME
    if not manifest.exists():
        return EngineBuild(compiled, f"compiled modules without {MANIFEST_NAME}")
    recorded = json.loads(manifest.read_text()).get("sources", {})
    current = source_hashes(package)
    if set(recorded) != set(current):
        return EngineBuild(compiled, "modules were added or removed since the build")
    for name, digest in current.items():
        if recorded[name] != digest:
            return EngineBuild(compiled, f"wm_core/{name} changed since the build")
    return EngineBuild(compiled)


def require_current_engine() -> EngineBuild:
    """``inspect_engine``, raising when the compiled engine is stale."""
    build = inspect_engine()
    if build.stale:
        raise StaleEngineError(
            f"the compiled engine is stale: {build.stale}. Rebuild it with `make core` "
            "(or remove it with `make core-clean` to run the Python sources)"
        )
    return build
