"""The examples are run as their users run them: imported from examples/, not installed."""

from __future__ import annotations

import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))
