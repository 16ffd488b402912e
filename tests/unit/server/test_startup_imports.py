"""What a server process imports before it serves: each optional door's web stack only when
that door is on (aiohttp, with yarl, multidict and the rest, is about a fifth of the imports of
``wm_server.app``; most servers, and every test's server process, run without the HTTP door
and the inspector), never rich, which structlog would import when the CLI's extra is
installed beside the server, and not the wordllama package (its downloader's requests, its
configurations and algorithms) for the two model files its wheel ships, nor the offline
memory extractor's rules (their regular expressions: 0.3 CPU s) before a first extraction."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import wm_server.__main__  # what `wm-server` and `python -m wm_server` run
import wm_server.app  # and the application it starts
from wm_server.embedding.embedded import WordLlamaEmbedder
first, second = WordLlamaEmbedder(), WordLlamaEmbedder()
loaded = ("aiohttp", "wm_server.api.connect", "wm_server.inspector", "rich", "pygments",
          "wordllama", "requests", "wm_core._memory.extract", "wm_core._memory.speech")
print(sorted(m for m in loaded if sys.modules.get(m) is not None))
print(first._model is second._model)
"""


def test_a_server_imports_only_what_it_serves_with_and_loads_its_model_once() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    imported, shared = result.stdout.splitlines()
    assert imported == "[]", result.stdout
    assert shared == "True"  # the servers of one process share the read-only weights
