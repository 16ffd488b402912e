"""Finding the file paths and URLs a Files & Context body refers to.

The Files guard promises that no reference disappears, so what counts as "the same
reference" matters: ``./src/a.py`` and ``src/a.py`` are one file, ``App.tsx`` is not
``App.ts``, and a URL is one reference rather than a handful of path-like fragments of it.
The reference system's rules (an extension from a list, or two slash-separated segments that
start with a letter) are kept, with word boundaries and a longer extension list, and widened
to every path an agent or the offline summarizer writes down: a home-relative (``~/…``) or
absolute path is a path whatever its segments look like (``~/.local/share/app/ledger.db``,
``/var/lib/app/state``), a segment may be a dot directory (``.github/workflows``) and a bare
dotfile (``.env``, ``.gitignore``) is one reference. A line whose path the finder missed
would be dropped by a rewrite with no decision (issue 36): what counts as a path is decided
here only, for the guard and the summarizer alike.

Text is split on whitespace first (paths and URLs contain none): ``str.split`` plus a check on
each token is several times cheaper than scanning a whole section with a path regex.
"""

from __future__ import annotations

import re
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
)
EXTENSIONS: Final = frozenset(_EXTENSION_TEXT.split())

_URL = re.compile(r"\b(?:[A-Za-z][A-Za-z0-9+.\-]*://|www\.)[^\s<>\"'`]+")
_URL_TRAILING: Final = ".,;:!?)]}>*_"
_PATH_RUN = re.compile(r"[\w.~/\\@+-]+")
_SURROUNDING: Final = "()[]{}<>\"'`,;:!?*|"
_PREFIX_SEGMENTS: Final = frozenset({"", ".", "..", "~"})
# A path anchored at the home or root directory (or its parent), after normalization: its
# segments need not look like words (``~/.cache/2024/x``). Home needs one segment, the
# others two (``/tmp`` alone and ``../x`` are too often prose).
_HOME: Final = "~/"
_ANCHORED: Final = ("/", "../")
_LETTER = re.compile(r"[^\W\d_]")
# Bare dotfiles that are one reference on their own (".env", ".env.local", ".gitignore"). A
# leading dot alone is not enough: code is full of ".replace(" and ".date".
_DOTFILE_TEXT: Final = (
    "env envrc gitignore gitattributes gitmodules gitkeep dockerignore npmrc nvmrc yarnrc "
    "bashrc bash_profile zshrc zprofile profile inputrc vimrc netrc pgpass htaccess "
    "editorconfig prettierrc eslintrc babelrc stylelintrc pylintrc flake8 coveragerc "
    "python-version node-version ruby-version tool-versions pre-commit-config"
)
DOTFILES: Final = frozenset(_DOTFILE_TEXT.split())
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
    if not segment:
        return False
    first = segment[0]
    if first == "." and len(segment) > 1:
        first = segment[1]  # a dot directory or dotfile: ".github", ".env"
    return first.isalpha() or first == "_"


def _is_dotfile(core: str) -> bool:
    return core.startswith(".") and core[1:].split(".", 1)[0].lower() in DOTFILES


def _anchored(normal: str) -> str | None:
    """The home-relative or absolute path ``normal`` denotes, if it is one (see _HOME)."""
    if normal.startswith(_HOME):
        need = 1
    elif normal.startswith(_ANCHORED):
        need = 2
    else:
        return None
    normal = normal.rstrip("/")
    segments = [s for s in normal.split("/") if s not in _PREFIX_SEGMENTS]
    if len(segments) < need or not _LETTER.search(segments[-1]):
        return None
    return normal


def _path(run: str) -> str | None:
    """The path a run of path characters denotes, if any.

    Either it ends in a known extension (so ``a.json`` is not ``a.js``, and ``a.py.bak`` is
    not ``a.py``), or it has two or more slash-separated segments that start with a letter or
    an underscore (after an optional ``./``; later ones may be dot directories), or it is
    anchored at home or root (``_anchored``), or it is a known bare dotfile.
    """
    core = run.lstrip("-").rstrip(".")
    stem, dot, extension = core.rpartition(".")
    if dot and stem and stem[-1] != "." and extension.lower() in EXTENSIONS:
        if "\\" in core or "//" in core or core.startswith("./") or "/./" in core:
            return _normalize_path(core)
        return core  # already normal: the common case, without a call
    if "/" not in core and "\\" not in core:
        return core if _is_dotfile(core) else None
    normal = _normalize_path(core)
    anchored = _anchored(normal)
    if anchored is not None:
        return anchored
    segments = normal.split("/")
    start = 0
    while start < len(segments) - 1 and segments[start] in _PREFIX_SEGMENTS:
        start += 1
    end = start
    while end < len(segments) and _opens_segment(segments[end]):
        end += 1
    if end - start < 2 or segments[start].startswith("."):
        # A relative path starts with a word: ".local/share/x" is the tail of a home path
        # written in code (``Path.home() / ".local/..."``), the home path is the reference.
        return None
    while end < len(segments) and segments[end]:
        end += 1  # once it is a path, later segments belong to it ("notes/2024/q1")
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
        runs = (core,) if _PATH_RUN.fullmatch(core) else _PATH_RUN.findall(core)
        for run in runs:
            path = _path(run)
            if path:
                found.append(path)
    return found


def references(text: str) -> set[str]:
    """The normalized paths and URLs mentioned in ``text``."""
    found: set[str] = set()
    for token in text.split():
        if might_reference(token):
            found.update(token_references(token))
    return found
