"""Cross-site request protection for the inspector's few state-changing forms (forget a memory).

Why both a token and a same-origin check: a browser sends the inspector's Basic credentials
with any request to it, including a form another site posts. A POST is accepted only when its
hidden token is the HMAC, under a secret of this process, of the caller's API key and the
form's target (so a token taken from one page neither works for another memory nor for
another key), and when the browser does not say the request came from another site
(``Sec-Fetch-Site``, else ``Origin``). Stateless: nothing is stored per form; a token outlives
nothing but the process (a restarted inspector asks for the page again).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from aiohttp import web

FIELD = "csrf"


class FormGuard:
    """Makes and checks the tokens of one inspector process."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def token(self, key: str | None, target: str) -> str:
        """The token a form posting to ``target`` carries for the holder of ``key``."""
        mac = hmac.new(self._secret, f"{key or ''}\x00{target}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def check(self, request: web.Request, key: str | None, presented: str) -> None:
        """403 unless the request comes from this site with the token of ``key`` for its
        own path."""
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise web.HTTPForbidden(text=f"cross-site form refused (Sec-Fetch-Site: {site})")
        origin = request.headers.get("Origin")
        if site is None and origin and urlsplit(origin).netloc != request.host:
            raise web.HTTPForbidden(text=f"cross-site form refused (Origin: {origin})")
        if not hmac.compare_digest(presented, self.token(key, request.path)):
            raise web.HTTPForbidden(text="the form's token is missing or not this page's")
