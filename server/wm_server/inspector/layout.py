"""What every inspector page shares: the frame, escaping, and the caller's API key.

Every value that reaches a page goes through :func:`escape`; the frame loads the one
stylesheet and, on the pages that update live, the one script, both served by the inspector
itself (the Content-Security-Policy of ``web.SECURITY_HEADERS`` allows nothing else).
"""

from __future__ import annotations

import base64
import binascii
import html

from aiohttp import web

REALM = 'Basic realm="Working Memory inspector", charset="UTF-8"'


def presented_key(request: web.Request) -> str | None:
    """The API key of a request: ``Authorization: Bearer <key>``, or Basic with the key as the
    password (what a browser's login prompt sends; the user name is ignored)."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None


def escape(value: object) -> str:
    """``value`` as HTML text or attribute value (quotes escaped too)."""
    return html.escape(str(value), quote=True)


def page(title: str, body: str, *, live: bool = False) -> str:
    """A whole page; ``live`` adds the inspector's script (live commit progress), which the
    page works without."""
    script = '<script src="/static/live.js" defer></script>' if live else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)} · WM inspector</title>"
        f'<link rel="stylesheet" href="/static/inspector.css">{script}</head><body>'
        '<header><h1>Working Memory inspector</h1><a href="/">sessions</a>'
        '<a href="/overview">overview</a><a href="/search">search archives</a>'
        '<a href="/recall">recall</a></header>'
        f"<main>{body}</main></body></html>"
    )
