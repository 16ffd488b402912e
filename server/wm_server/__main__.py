"""``wm-server``: run the Working Memory Service with settings from the environment."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from importlib.metadata import version

# The server renders nothing with rich (a dependency of the `wm` CLI only), but structlog
# imports it, with pygments, whenever it is installed: in a developer's venv, where the CLI is,
# that is 0.2 CPU s of every start, and console-format tracebacks unlike those of a server
# installed without the CLI. Marked absent before structlog is first imported.
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]

from wm_server.app import serve  # noqa: E402
from wm_server.config import ConfigurationError, load_settings  # noqa: E402
from wm_server.event_loop import loop_factory  # noqa: E402
from wm_server.telemetry.observability import configure_logging  # noqa: E402


def _arguments(argv: Sequence[str] | None) -> None:
    """The command line takes no settings (they come from the environment), only --help and
    --version; anything else is refused before a database is opened or a port bound."""
    parser = argparse.ArgumentParser(
        prog="wm-server",
        description="Run the Working Memory Service. Every setting comes from the environment "
        "(WM_ADDRESS, WM_DATA_DIR, WM_DATABASE_URL, WM_LLM_PROVIDER, ...; see the README's "
        "configuration table); with none set it serves on 127.0.0.1:50051 from an embedded "
        "SQLite file under ./var and the offline provider.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version('working-memory-service')}"
    )
    parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    _arguments(argv)
    try:
        settings = load_settings()
    except ConfigurationError as exc:
        print(f"wm-server: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level.value, settings.log_format.value)
    try:
        with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
            runner.run(serve(settings))
    except ConfigurationError as exc:
        print(f"wm-server: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
