"""Lower-casing long texts quickly.

``str.lower`` walks a non-ASCII text code point by code point through the full Unicode case
tables, which is several times slower than on ASCII text. Bodies are mostly ASCII with a few
accented names ("Tomás", "Malmö"), i.e. within Latin-1, where lower-casing maps one byte to one
byte: a ``bytes.translate`` with the table built from ``str.lower`` itself gives the same text.
"""

from __future__ import annotations

from typing import Final


def _latin1_lower_table() -> bytes:
    table = bytearray(range(256))
    for code in range(256):
        lowered = chr(code).lower()
        if len(lowered) != 1 or ord(lowered) > 0xFF:  # pragma: no cover - not in Latin-1
            raise AssertionError(f"U+{code:04X} does not lower-case within Latin-1")
        table[code] = ord(lowered)
    return bytes(table)


_LATIN1_LOWER: Final = _latin1_lower_table()


def latin1_bytes(text: str) -> bytes | None:
    """``text`` encoded as Latin-1 (a plain copy when every code point is below U+0100), or
    None when it has other code points."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return None


def lower(text: str) -> str:
    """``text.lower()``, computed with one byte translation when ``text`` is Latin-1."""
    if text.isascii():
        return text.lower()
    encoded = latin1_bytes(text)
    if encoded is None:
        return text.lower()
    return encoded.translate(_LATIN1_LOWER).decode("latin-1")
