"""The ``wm-mcp`` console script's entry point.

Why a separate module: the script is installed with the client, but the server needs the MCP
SDK, which only the ``[mcp]`` extra brings. Without it the user gets one line saying what to
install, not an ImportError traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

MCP_EXTRA_HINT = "wm-mcp: the MCP server needs the mcp extra: pip install 'wm-client[mcp]'"
EXIT_MISSING_EXTRA = 2


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from wm_client.integrations.mcp_server import main as run
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] not in ("mcp", "mcp_types"):
            raise
        print(MCP_EXTRA_HINT, file=sys.stderr)
        return EXIT_MISSING_EXTRA
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
