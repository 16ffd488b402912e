"""What a server process imports before it serves: each optional door's web stack only when
that door is on. aiohttp (with yarl, multidict and the rest) costs about 0.6 CPU s to import,
a third of the imports of ``wm_server.app``; most servers (and every test's server process)
run without the HTTP door and the inspector."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import wm_server.app
from wm_server.embedding.embedded import WordLlamaEmbedder
first, second = WordLlamaEmbedder(), WordLlamaEmbedder()
print(sorted(m for m in ("aiohttp", "wm_server.api.connect", "wm_server.inspector") if m in sys.modules))
print(first._model is second._model)
"""


def test_the_server_imports_no_door_it_has_not_started_and_loads_its_model_once() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    imported, shared = result.stdout.splitlines()
    assert imported == "[]", result.stdout
    assert shared == "True"  # the servers of one process share the read-only weights
