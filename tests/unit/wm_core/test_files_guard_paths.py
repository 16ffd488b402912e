"""No path leaves Files & Context without a decision, whatever its shape (issue 36).

The offline summarizer writes lines such as ``~/.local/share/ledgerline/ledger.db — in bash
output``; a rewrite that left that line out used to drop it with no decision, because the
engine's path finder did not see a path in it (a home-relative path through a dot directory,
with an extension it does not list). These properties generate the shapes agents and the
summarizer write: home-relative and absolute paths, dot directories and dotfiles, unknown
extensions, segments that start with a digit, Windows separators, URLs; decorated with a
suffix, backticks, parentheses or trailing punctuation. Every one is a reference, and an
UPDATE that leaves it out gets its line back with a decision that lists it.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wm_core import Guard, SectionOp, merge, references, render_document
from wm_core._document.sections import FILES_CONTEXT, SECTIONS

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_WORD_CHARS = _LETTERS + "0123456789_-"

words = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from(list(_LETTERS)),
    st.text(alphabet=_WORD_CHARS, min_size=0, max_size=8),
)
# A directory: a word, a dot directory (".local", ".config"), or a number ("2024").
directories = st.one_of(
    words,
    words.map(lambda w: "." + w),
    st.integers(0, 9999).map(str),
)
# A file name: a word with a known or unknown extension, a dotfile, or no extension at all.
files = st.one_of(
    st.builds(lambda w, e: f"{w}.{e}", words, st.sampled_from(["py", "md", "db", "sqlite3", "x"])),
    words.map(lambda w: "." + w),
    words,
)
dotfiles = st.builds(
    lambda name, tail: "." + name + tail,
    st.sampled_from(["env", "gitignore", "bashrc", "npmrc", "editorconfig"]),
    st.sampled_from(["", ".local", ".production"]),
)


def _join(prefix: str, dirs: list[str], name: str, separator: str = "/") -> str:
    return prefix + separator.join([*dirs, name])


home_paths = st.builds(_join, st.just("~/"), st.lists(directories, max_size=4), files)
absolute_paths = st.builds(
    _join, st.just("/"), st.lists(directories, min_size=1, max_size=4), files
)
# Relative paths: a word, a word or dot directory, then anything.
relative_paths = st.builds(
    lambda first, second, rest, name: _join("", [first, second, *rest], name),
    words,
    st.one_of(words, words.map(lambda w: "." + w)),
    st.lists(directories, max_size=3),
    files,
)
windows_paths = st.builds(
    lambda drive, dirs, name: _join(f"{drive}:\\", dirs, name, "\\"),
    st.sampled_from(["C", "D"]),
    st.lists(words, min_size=1, max_size=3),
    files,
)
urls = st.builds(
    lambda host, dirs: "https://" + host + ".example.org/" + "/".join(dirs),
    words,
    st.lists(words, max_size=3),
)
paths = st.one_of(home_paths, absolute_paths, relative_paths, windows_paths, urls, dotfiles)

decorations = st.sampled_from(
    [
        "{p}",
        "{p} — in bash output",
        "{p} — read, in bash command",
        "`{p}`",
        "`{p}` (the ledger)",
        "({p})",
        "{p}.",
        "{p},",
        "{p}:",
        "see {p};",
        "**{p}** — edited",
        '"{p}"',
    ]
)


def _document(files_body: str) -> str:
    bodies = {name: "" for name in SECTIONS}
    bodies[FILES_CONTEXT] = files_body
    return render_document(bodies)


@SETTINGS
@given(path=paths, decoration=decorations)
def test_every_generated_path_is_a_reference(path: str, decoration: str) -> None:
    line = decoration.format(p=path)
    assert references(line), line


@SETTINGS
@given(path=paths, decoration=decorations)
def test_a_dropped_path_comes_back_with_a_decision(path: str, decoration: str) -> None:
    line = "- " + decoration.format(p=path)
    kept = "- ledgerline/main.py — edited"
    result = merge(
        _document(f"{kept}\n{line}"),
        {FILES_CONTEXT: SectionOp.update(f"{kept} (tests pass)")},
    )
    body = result.sections[FILES_CONTEXT]
    assert line in body.split("\n"), (line, body)
    files_decisions = [d for d in result.decisions if d.guard is Guard.FILES]
    assert len(files_decisions) == 1
    assert files_decisions[0].items_restored == (line,)


@SETTINGS
@given(path=paths, decoration=decorations)
def test_a_path_the_rewrite_keeps_is_not_restored(path: str, decoration: str) -> None:
    """The other side: a rewrite that keeps the path (re-annotated) needs no restoration, so
    widening what counts as a path does not make the guard restore lines it should not."""
    line = "- " + decoration.format(p=path)
    rewrite = f"- {path} — (checked again)"
    result = merge(_document(line), {FILES_CONTEXT: SectionOp.update(rewrite)})
    assert result.sections[FILES_CONTEXT] == rewrite
    assert not [d for d in result.decisions if d.guard is Guard.FILES]


def test_the_demo_line_of_issue_36_is_restored() -> None:
    old = (
        "- /var/lib/app/state.db — in bash output\n"
        "- ledgerline/main.py — read\n"
        "- ~/.local/share/ledgerline/ledger.db — in bash output"
    )
    result = merge(_document(old), {FILES_CONTEXT: SectionOp.update("- README.md — read")})
    body = result.sections[FILES_CONTEXT].split("\n")
    assert "- ~/.local/share/ledgerline/ledger.db — in bash output" in body
    (decision,) = [d for d in result.decisions if d.guard is Guard.FILES]
    assert "~/.local/share/ledgerline/ledger.db" in decision.reason
    assert len(decision.items_restored) == 3
