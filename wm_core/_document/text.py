"""Line breaks as the document reader sees them, defined once for every reader of model text."""

from __future__ import annotations


def normalize_newlines(text: str) -> str:
    """``text`` with Windows and old Mac line ends turned into ``\\n``."""
    if "\r" not in text:  # the usual text: 1 us instead of 25 us of replace() on 16 KB
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")
