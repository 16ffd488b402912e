"""One spelling per file path, for the offline summarizer's Files & Context section.

Why: an agent names the same file in several ways in one session: relative in its tool
inputs (``ledgerline/db.py``), absolute in tracebacks (``/home/dev/ledgerline/ledgerline/db.py``)
and by its bare name in prose (``db.py``). Listed as three files, the section wastes space
and tells the next model there are three files where there is one.

The rules, all deterministic:

1. The project root is inferred from absolute paths that end with a relative path also seen
   in the session (``/home/dev/ledgerline`` + ``ledgerline/db.py``) and from absolute working
   directories given to tools (``cwd``); the root most often implied wins, the shortest on a
   tie. Without such evidence there is no root and absolute paths stay as they are.
2. An absolute path under the root is spelled relative to it; ``./a.py`` is ``a.py``.
3. A bare name (``db.py``) or a shorter relative path (``app/repository.py``, as a service's
   README names it) that ends exactly one longer known path, at a ``/``, is spelled like that
   path; with two candidates (``a/cli.py``, ``b/cli.py``) it stays as written. Nothing is
   lost by folding: the short spelling is still part of the long one.

4. A relative path under a hidden folder that programs keep in the home folder (``.local``,
   ``.config``, ``.cache``, ``.ssh``, ...) is home-relative: code names it as a join to the
   home directory (``Path.home() / ".local/share/x.db"``), output as ``~/.local/share/x.db``.

URLs are left alone; a home-relative path (``~/.local/share/x.db``) is kept as it is and is
the spelling of its tails (``.local/share/x.db``, as code joins it to the home directory).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

_WORKDIR_KEYS = frozenset({"cwd", "workdir", "working_directory", "directory", "root"})
# Hidden folders of the home directory (rule 4); a project's own (.github, .vscode) are not.
_HOME_FOLDERS = frozenset(
    [
        ".local",
        ".config",
        ".cache",
        ".ssh",
        ".aws",
        ".azure",
        ".kube",
        ".docker",
        ".gnupg",
        ".npm",
        ".cargo",
        ".rustup",
        ".pyenv",
        ".m2",
        ".gradle",
        ".terraform.d",
        ".mozilla",
    ]
)


def is_workdir_key(key: str) -> bool:
    """Whether a tool input key names a working directory (evidence for the root)."""
    return key.lower() in _WORKDIR_KEYS


def _plain(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    if path.split("/", 1)[0] in _HOME_FOLDERS and "/" in path:
        return "~/" + path
    return path


def _is_absolute(path: str) -> bool:
    return path.startswith(("/", "~/"))


def _is_url(path: str) -> bool:
    return "://" in path


def infer_root(paths: Iterable[str], workdirs: Iterable[str] = ()) -> str | None:
    """The project root the paths imply (see rule 1), or None."""
    spelled = {_plain(p.rstrip("/")) for p in paths if p and not _is_url(p)}
    absolute = sorted(p for p in spelled if _is_absolute(p))
    relative = sorted(p for p in spelled if not _is_absolute(p) and "/" in p)
    votes: Counter[str] = Counter()
    for full in absolute:
        for tail in relative:
            if full.endswith("/" + tail):
                votes[full[: -len(tail) - 1]] += 1
    for workdir in workdirs:
        workdir = workdir.rstrip("/")
        if _is_absolute(workdir) and workdir.count("/") >= 2:
            votes[workdir] += 1
    candidates = [root for root in votes if root and root not in ("/", "~")]
    if not candidates:
        return None
    return min(candidates, key=lambda root: (-votes[root], len(root), root))


class PathSpellings:
    """The canonical spelling of every path of a session (rules 2 and 3)."""

    def __init__(self, paths: Iterable[str], workdirs: Iterable[str] = ()) -> None:
        known = [p for p in paths if p]
        self.root = infer_root(known, workdirs)
        folded = {self._under_root(p) for p in known}
        by_tail: dict[str, set[str]] = {}
        for path in folded:
            # Relative paths, and home-relative ones: ``Path.home() / ".local/share/x.db"`` in
            # code and ``~/.local/share/x.db`` in output are one file.
            if "/" in path and not _is_url(path) and not path.startswith("/"):
                parts = path.split("/")
                for start in range(1, len(parts)):
                    by_tail.setdefault("/".join(parts[start:]), set()).add(path)
        # A tail folds into the one longer path it ends; the longest such path is the spelling
        # (``b.py`` → ``x/a/b.py`` when ``a/b.py`` itself folds into ``x/a/b.py``).
        self._by_tail: dict[str, str] = {}
        for tail, found in by_tail.items():
            longest = _maximal(found)
            if len(longest) == 1:
                self._by_tail[tail] = next(iter(longest))

    def _under_root(self, path: str) -> str:
        if _is_url(path):
            return path
        path = _plain(path)
        root = self.root
        if root is not None and path.startswith(root + "/") and len(path) > len(root) + 1:
            return path[len(root) + 1 :]
        return path

    def canonical(self, path: str) -> str:
        """How ``path`` is written in the working memory."""
        folded = self._under_root(path)
        if _is_url(folded) or _is_absolute(folded):
            return folded
        return self._by_tail.get(folded, folded)


def _maximal(paths: set[str]) -> set[str]:
    """The paths of ``paths`` that are not a ``/``-tail of another one of them."""
    return {p for p in paths if not any(q != p and q.endswith("/" + p) for q in paths)}
