"""The read-only web inspector: sessions, commit timelines, working-memory versions with diffs
and guard decisions, archive search; served by the server on ``WM_INSPECTOR_ADDRESS``."""

from wm_server.inspector.web import Inspector, start_inspector

__all__ = ["Inspector", "start_inspector"]
