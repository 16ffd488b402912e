"""What a server process imports before it serves: each optional door's web stack only when
that door is on (aiohttp, with yarl, multidict and the rest, is about a fifth of the imports of
``wm_server.app``; most servers, and every test's server process, run without the HTTP door
and the inspector), never rich, which structlog would import when the CLI's extra is
installed beside the server, and not the wordllama package (its downloader's requests, its
configurations and algorithms: 0.4 CPU s) for the two model files its wheel ships."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import wm_server.__main__  # what `wm-server` and `python -m wm_server` run
from wm_server.embedding.embedded import WordLlamaEmbedder
first, second = WordLlamaEmbedder(), WordLlamaEmbedder()
loaded = ("aiohttp", "wm_server.api.connect", "wm_server.inspector", "rich", "pygments",
          "wordllama", "requests")
print(sorted(m for m in loaded if sys.modules.get(m) is not None))
print(first._model is second._model)
"""


def test_a_server_imports_no_door_it_has_not_started_nor_rich_nor_wordllama_and_loads_its_model_once() -> (
    None
):
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    imported, shared = result.stdout.splitlines()
    assert imported == "[]", result.stdout
    assert shared == "True"  # the servers of one process share the read-only weights
