"""``wm-server``: run the Working Memory Service with settings from the environment."""

from __future__ import annotations

import asyncio
import sys

# The server renders nothing with rich (a dependency of the `wm` CLI only), but structlog
# imports it, with pygments, whenever it is installed: in a developer's venv, where the CLI is,
# that is 0.2 CPU s of every start, and console-format tracebacks unlike those of a server
# installed without the CLI. Marked absent before structlog is first imported.
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]

from wm_server.app import serve  # noqa: E402
from wm_server.config import ConfigurationError, load_settings  # noqa: E402
from wm_server.event_loop import loop_factory  # noqa: E402
from wm_server.telemetry.observability import configure_logging  # noqa: E402


def main() -> int:
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
