"""``wm-server``: run the Working Memory Service with settings from the environment."""

from __future__ import annotations

import asyncio
import sys

from wm_server.app import serve
from wm_server.config import ConfigurationError, load_settings
from wm_server.event_loop import loop_factory
from wm_server.telemetry.observability import configure_logging


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
