"""Cross-origin calls to the HTTP door, for browser apps (WM_HTTP_CORS_ORIGINS, parsed by
wm_server.config.parse_origins; off unless set).

A browser sends a Connect call from another origin only after a preflight (``OPTIONS`` with
``Access-Control-Request-Method``), because the call is a POST with a JSON or protobuf body
and headers of its own. The preflight is answered here, before any method runs: 204 with the
allowed method and headers for an allowed origin, 403 otherwise. The call itself is served as
usual; its answer carries ``Access-Control-Allow-Origin`` for an allowed origin (and exposes
the headers a Connect client reads), and nothing for another one, so the browser keeps the
answer from that page. Origins are compared exactly (scheme, host, port); ``*`` allows any,
without credentials (an API key travels in the ``authorization`` header, not in cookies).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

# The request headers a Connect client may send (the protocol's own, the API key, the id).
ALLOWED_HEADERS = (
    "authorization, content-type, content-encoding, connect-protocol-version, "
    "connect-timeout-ms, connect-content-encoding, connect-accept-encoding, x-request-id, "
    "x-user-agent"
)
# The answer headers a page may read: the request id and the encodings.
EXPOSED_HEADERS = "x-request-id, content-encoding, connect-content-encoding"
MAX_AGE_SECONDS = "7200"


@dataclass(frozen=True, slots=True)
class Cors:
    """The door's cross-origin policy; empty ``origins``: off (no header, no preflight)."""

    origins: tuple[str, ...] = ()

    def allows(self, origin: str | None) -> bool:
        return bool(origin) and ("*" in self.origins or origin in self.origins)

    def is_preflight(self, request: web.Request) -> bool:
        return bool(self.origins) and (
            request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers
        )

    def preflight(self, request: web.Request) -> web.Response:
        origin = request.headers.get("Origin")
        if not self.allows(origin):
            return web.Response(status=403, text=f"origin {origin!r} is not allowed\n")
        return web.Response(
            status=204,
            headers={
                **self._allow(origin),
                "Access-Control-Allow-Methods": "POST",
                "Access-Control-Allow-Headers": ALLOWED_HEADERS,
                "Access-Control-Max-Age": MAX_AGE_SECONDS,
            },
        )

    def headers_for(self, request_headers: Mapping[str, str]) -> dict[str, str]:
        """What to add to the answer of a call from ``Origin`` (none when not allowed)."""
        origin = request_headers.get("Origin")
        if not self.origins or not self.allows(origin):
            return {}
        return {**self._allow(origin), "Access-Control-Expose-Headers": EXPOSED_HEADERS}

    def _allow(self, origin: str | None) -> dict[str, str]:
        if "*" in self.origins:
            return {"Access-Control-Allow-Origin": "*"}
        return {"Access-Control-Allow-Origin": origin or "", "Vary": "Origin"}
