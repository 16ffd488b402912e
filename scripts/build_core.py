"""Compile the engine (``wm_core``) to C extension modules with mypyc, in place.

Usage: ``python scripts/build_core.py`` (what ``make core`` runs), ``--clean`` to go back to
the pure Python sources, ``--check`` to exit 1 when the compiled modules are missing or stale.

Why: every commit runs a merge whose guards walk the whole working memory line by line and
word by word; interpreted, that costs hundreds of microseconds. ``wm_core`` is pure, fully
typed and ``mypy --strict`` clean, which is what mypyc needs to compile it, unchanged, into
native code that gives the same results. The sources stay the single truth: the compiled
modules sit next to them (Python imports an extension module before a source file of the same
name), and whatever uses the engine first checks that they still match the sources, so an
edit can never run stale native code silently.

The manifest ``wm_core/_native.json`` records a hash of every compiled source;
``wm_server.engine_build`` compares it with the sources on disk before the server, the tests or
the benchmarks use the engine. Both it and the ``.so`` files are build
outputs, ignored by git and removed by ``--clean``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from wm_server.engine_build import (
    MANIFEST_NAME,
    compiled_sources,
    inspect_engine,
    native_modules,
    write_manifest,
)

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "wm_core"
MANIFEST = PACKAGE / MANIFEST_NAME
# Shared runtime of the compiled modules, inside the package so that any installation that
# finds ``wm_core`` finds it too.
GROUP = "wm_core._native"


def clean() -> None:
    for path in native_modules(PACKAGE):
        path.unlink()
    MANIFEST.unlink(missing_ok=True)


def build() -> None:
    # Imported here: only a build needs them (they come with the dev dependencies).
    from mypyc.build import mypycify
    from setuptools import setup

    clean()
    sources = list(compiled_sources(PACKAGE).values())
    cwd = Path.cwd()
    os.chdir(ROOT)  # mypyc names modules after paths relative to the working directory
    try:
        setup(
            name="wm-core-native",
            ext_modules=mypycify(
                [path.relative_to(ROOT).as_posix() for path in sources],
                group_name=GROUP,
                opt_level="3",
                target_dir="build/mypyc",
            ),
            script_args=[
                "--quiet",
                "build_ext",
                "--inplace",
                "--build-temp",
                "build/mypyc/temp",
                "--build-lib",
                "build/mypyc-lib",
            ],
        )
    finally:
        os.chdir(cwd)
        shutil.rmtree(ROOT / "build" / "mypyc-lib", ignore_errors=True)
    write_manifest(PACKAGE)
    print(
        f"wm_core: {len(sources)} modules compiled with mypyc ({len(native_modules(PACKAGE))} .so files)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--clean", action="store_true", help="remove the compiled modules")
    mode.add_argument("--check", action="store_true", help="exit 1 unless built and current")
    args = parser.parse_args()
    if args.clean:
        clean()
        print("wm_core: compiled modules removed; the pure Python sources are in use")
        return 0
    if args.check:
        engine = inspect_engine()
        if not engine.compiled or engine.stale:
            print(f"wm_core: {engine.stale or 'not compiled'}", file=sys.stderr)
            return 1
        return 0
    build()
    return 0


if __name__ == "__main__":
    sys.exit(main())
