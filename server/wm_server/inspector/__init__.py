"""The web inspector: sessions, commit timelines with live progress, working-memory versions
with diffs and guard decisions, long-term memories (with forgetting), a tenant overview, archive
search and a recall playground; served by the server on ``WM_INSPECTOR_ADDRESS``."""

from wm_server.inspector.config_view import ConfigDefaults
from wm_server.inspector.web import Inspector, start_inspector

__all__ = ["ConfigDefaults", "Inspector", "start_inspector"]
