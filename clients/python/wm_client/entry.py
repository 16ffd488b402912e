"""The ``wm`` console script's entry point.

Why a separate module: the script is installed with the distribution, but the CLI's rendering
needs ``rich``, which only the ``[cli]`` extra brings. Without it the user gets one line saying
what to install, not an ImportError traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

CLI_EXTRA_HINT = "wm: the command line needs the cli extra: pip install 'wm-client[cli]'"
EXIT_MISSING_EXTRA = 2


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from wm_client.cli import main as run
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != "rich":
            raise
        print(CLI_EXTRA_HINT, file=sys.stderr)
        return EXIT_MISSING_EXTRA
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
