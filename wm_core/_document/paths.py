"""Finding the file paths and URLs a Files & Context body refers to.

The Files guard promises that no reference disappears, so what counts as "the same
reference" matters: ``./src/a.py`` and ``src/a.py`` are one file, ``App.tsx`` is not
``App.ts``, and a URL is one reference rather than a handful of path-like fragments of it.
The reference system's rules (an extension from a list, or two slash-separated segments that
start with a letter) are kept, with word boundaries and a longer extension list.

Text is split on whitespace first (paths and URLs contain none): ``str.split`` plus a check on
each token is several times cheaper than scanning a whole section with a path regex.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final

_EXTENSION_TEXT: Final = (
    # code
    "py pyi pyx ipynb ts tsx mts cts js jsx mjs cjs vue svelte rs go java kt kts scala "
    "groovy c h cc cpp cxx hh hpp hxx cs fs swift rb php pl pm lua dart ex exs erl hs "
    "clj elm zig nim sql graphql gql proto thrift sol "
    # scripts and build
    "sh bash zsh fish ps1 psm1 cmd bat gradle make mk cmake bazel bzl nix dockerfile "
    # configuration and data
    "toml ini cfg conf env properties yaml yml json jsonl ndjson xml csv tsv parquet "
    "lock tf tfvars hcl plist "
    # documents and web
    "md mdx rst txt adoc tex html htm css scss sass less pdf docx xlsx pptx odt log "
    # media and archives
    "png jpg jpeg gif svg webp ico bmp mp3 mp4 wav mov zip tar gz tgz bz2 xz whl jar "
    "webm ogg flac avi mkv 7z rar dmg iso deb rpm apk ttf otf woff woff2 "
    # databases, state, keys and build output: what tools write and agents point at
    "db db3 sqlite sqlite3 duckdb mdb dat bin pid sock bak orig tmp swp patch diff pem crt "
    "cer key pub p12 so dylib dll exe wasm pyc class out err service timer socket "
)
EXTENSIONS: Final = frozenset(_EXTENSION_TEXT.split())

_URL = re.compile(r"\b(?:[A-Za-z][A-Za-z0-9+.\-]*://|www\.)[^\s<>\"'`]+")
_URL_TRAILING: Final = ".,;:!?)]}>*_"
_PATH_RUN = re.compile(r"[\w.~/\\-]+")
_SURROUNDING: Final = "()[]{}<>\"'`,;:!?*|"
_PREFIX_SEGMENTS: Final = frozenset({"", ".", "..", "~"})
_REPEATED_SLASH = re.compile(r"/{2,}")
# A token that is already one normal path with an extension, nothing around it: word-character
# segments joined by single "/" or ".", ending in "." and an ASCII extension (group 1). Such a
# token is its own only reference when the extension is known (and it does not hold "www.").
PLAIN_PATH: Final = re.compile(r"\w[\w-]*(?:[./][\w-]+)*\.([A-Za-z0-9]+)")


def is_plain_path(token: str) -> bool:
    """Whether a token (without "www.") is one normal path with a known extension and nothing
    around it, and so its own only reference: the common case, decided by one regex."""
    plain = PLAIN_PATH.fullmatch(token)
    return plain is not None and plain.group(1).lower() in EXTENSIONS


def might_reference(token: str) -> bool:
    """Whether a whitespace-free token can contain a path or URL at all (a cheap filter)."""
    return "/" in token or "." in token or "\\" in token


def _normalize_path(path: str) -> str:
    if "\\" in path:
        path = path.replace("\\", "/")
    if "//" in path:
        path = _REPEATED_SLASH.sub("/", path)
    while path.startswith("./"):
        path = path[2:]
    while "/./" in path:
        path = path.replace("/./", "/")
    return path


def _normalize_url(url: str) -> str:
    url = url.rstrip(_URL_TRAILING)
    scheme_end = url.find("://")
    if scheme_end != -1:
        url = url[:scheme_end].lower() + url[scheme_end:]
    if url.endswith("/") and not url.endswith("://"):
        url = url.rstrip("/")
    return url


def _opens_segment(segment: str) -> bool:
    """A path segment starts with a letter or "_", or is a hidden name (".local", ".env")."""
    if not segment:
        return False
    first = segment[0]
    if first == ".":
        return len(segment) > 1 and (segment[1].isalpha() or segment[1] == "_")
    return first.isalpha() or first == "_"


# A run that starts like a path says it is one: absolute, home-relative or explicitly relative
# (one segment after the prefix is enough: "~/notes", "/etc", "./run.sh").
_ANCHORS: Final = ("/", "~/", "./", "../")
_HAS_LETTER = re.compile(r"[^\W\d_]")


def _path(run: str, *, whole: bool = True) -> str | None:
    """The path a run of path characters denotes, if any.

    Either it ends in a known extension (so ``a.json`` is not ``a.js``, and ``a.py.bak`` is
    not ``a.py``), or it has two or more slash-separated segments that start with a letter, an
    underscore or a dot and a letter (hidden names), or it starts like a path (``/``, ``~/``,
    ``./``, ``../``) and has one such segment after that, or it is a hidden name on its own
    (``.env``, ``.bashrc``) as a ``whole`` token (not a fragment of one: ``x.encode()``).
    """
    core = run.lstrip("-").rstrip(".")
    if not core:
        return None
    stem, dot, extension = core.rpartition(".")
    if dot and stem and stem[-1] != "." and extension.lower() in EXTENSIONS:
        if "\\" in core or "//" in core or core.startswith("./") or "/./" in core:
            return _normalize_path(core)
        return core  # already normal: the common case, without a call
    if "/" not in core and "\\" not in core:
        return core if whole and core[0] == "." and _opens_segment(core) else None
    normal = _normalize_path(core)
    segments = normal.split("/")
    start = 0
    while start < len(segments) - 1 and segments[start] in _PREFIX_SEGMENTS:
        start += 1
    end = start
    while end < len(segments) and _opens_segment(segments[end]):
        end += 1
    anchored = core.startswith(_ANCHORS) or normal.startswith(_ANCHORS)
    if end - start < (1 if anchored else 2) and not (anchored and end == start):
        return None
    opened = end
    while end < len(segments) and segments[end]:
        # Once it is a path, later segments belong to it whatever they start with: else
        # "~/notes/2024/a" and "~/notes/2025/b" would be one reference, "~/notes", and a
        # rewrite could drop one of them with no decision (issue 36).
        end += 1
    if opened == start and (end == start or not _HAS_LETTER.search(segments[end - 1])):
        return None  # anchored, first segment a number: a path if it ends in a name
    return "/".join(segments[:end])


def token_references(token: str) -> list[str]:
    """The normalized paths and URLs in one whitespace-free token."""
    if "://" not in token and "www." not in token:
        if is_plain_path(token):
            return [token]  # the common case: a normal path, nothing to strip or rewrite
        core = token.strip(_SURROUNDING)
        if _PATH_RUN.fullmatch(core):  # the common case: one run, no URL
            path = _path(core)
            return [path] if path else []
    found: list[str] = []
    parts: list[str] | tuple[str] = (token,)
    if "://" in token or "www." in token:
        found.extend(_normalize_url(m.group()) for m in _URL.finditer(token))
        parts = _URL.sub(" ", token).split()
    for part in parts:
        core = part.strip(_SURROUNDING)
        if not core or not might_reference(core):
            continue
        whole = _PATH_RUN.fullmatch(core) is not None
        runs = (core,) if whole else _PATH_RUN.findall(core)
        for run in runs:
            path = _path(run, whole=whole)
            if path:
                found.append(path)
    return found


# PLAIN_PATH with a known extension, over many tokens at once, one per line. The extension is
# checked to be ASCII before the case-insensitive list is tried, as ``is_plain_path`` does.
_PLAIN_LINES = re.compile(
    r"^(\w[\w-]*(?:[./][\w-]+)*\.(?=[A-Za-z0-9]+$)(?i:" + "|".join(sorted(EXTENSIONS)) + r"))$",
    re.MULTILINE,
)


def tokens_references(tokens: Collection[str]) -> set[str]:
    """The normalized paths and URLs in whitespace-free ``tokens``: the union of their
    ``token_references``. The plain paths among them (most tokens of a Files & Context
    body), their own only references, are found by one regex scan over all of them instead
    of a call each: several times faster on a body of 240 paths."""
    text = "\n".join(tokens)
    plain = frozenset(_PLAIN_LINES.findall(text))
    if "www." in text:
        plain = frozenset(token for token in plain if "www." not in token)
    found = set(plain)
    for token in tokens:
        if token not in plain and might_reference(token):
            found.update(token_references(token))
    return found


def references(text: str) -> set[str]:
    """The normalized paths and URLs mentioned in ``text``."""
    return tokens_references(text.split())
