"""No path vanishes from Files & Context without a decision, whatever its shape: absolute,
home-relative, hidden directories and files, unknown extensions, with the suffixes tools and
the offline summarizer write after them (" — in bash output"), in backticks or with trailing
punctuation (issue: a home-relative path under a hidden directory was dropped silently)."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from wm_core import SECTIONS, SectionOp, merge, render_document
from wm_core._document.paths import references

FILES = "Files & Context"
SETTINGS = settings(max_examples=200, deadline=None)

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
_segment = st.one_of(
    _word,
    _word.map(lambda w: "." + w),  # hidden: .local, .config
    st.tuples(_word, _word).map(lambda t: f"{t[0]}_{t[1]}"),
    st.tuples(_word, _word).map(lambda t: f"{t[0]}-{t[1]}"),
)
_file = st.one_of(
    st.tuples(_word, st.sampled_from(["py", "db", "sqlite3", "toml", "log", "bak", "pem"])).map(
        lambda t: f"{t[0]}.{t[1]}"
    ),
    _word.map(lambda w: "." + w),  # .env, .bashrc
    st.tuples(_word, _word).map(lambda t: f"{t[0]}_{t[1]}"),  # no extension: id_ed25519
)
_anchor = st.sampled_from(["/", "~/", "./", "../"])
_anchored = st.tuples(_anchor, st.lists(_segment, max_size=4), _file).map(
    lambda t: t[0] + "/".join([*t[1], t[2]])
)
_relative = st.tuples(st.lists(_segment, min_size=1, max_size=4), _file).map(
    lambda t: "/".join([*t[0], t[1]])
)
_path = st.one_of(_anchored, _relative)
_wrap = st.sampled_from(["{}", "`{}`", "{},", "{}.", "({})", "{}:12", '"{}"'])
_suffix = st.sampled_from(["", " — in bash output", " - read by the tool", " (edited)", ""])


def _document(files: str) -> str:
    bodies = {name: "" for name in SECTIONS} | {"Session Title": "Paths", FILES: files}
    return render_document(bodies)


@SETTINGS
@given(path=_path, wrap=_wrap, suffix=_suffix)
def test_a_path_is_recognized_in_every_spelling(path: str, wrap: str, suffix: str) -> None:
    line = "- " + wrap.format(path) + suffix
    found = references(line)
    assert found, line
    assert any(path.rstrip(".").endswith(ref.lstrip("./")) or ref in path for ref in found), (
        line,
        found,
    )


@SETTINGS
@given(kept=_path, dropped=_path, wrap=_wrap, suffix=_suffix)
def test_an_update_that_leaves_a_path_out_restores_it_with_a_decision(
    kept: str, dropped: str, wrap: str, suffix: str
) -> None:
    assume(dropped.lstrip("./") != kept.lstrip("./"))  # two files, not one spelled twice
    lost = "- " + wrap.format(dropped) + suffix
    previous = _document(f"- {kept} — entry point\n{lost}")
    result = merge(previous, {FILES: SectionOp.update(f"- {kept} — entry point, edited")})
    assert lost.strip() in result.document
    [decision] = [d for d in result.decisions if d.section == FILES]
    assert decision.guard.value == "files" and lost.strip() in decision.items_restored


def test_the_line_the_offline_summarizer_writes_is_restored() -> None:
    files = (
        "- /var/lib/app/state.db\n- ledgerline/main.py — entry point\n"
        "- ~/.local/share/ledgerline/ledger.db — in bash output"
    )
    result = merge(_document(files), {FILES: SectionOp.update("- ledgerline/main.py — edited")})
    [decision] = [d for d in result.decisions if d.section == FILES]
    assert set(decision.items_restored) == {
        "- /var/lib/app/state.db",
        "- ~/.local/share/ledgerline/ledger.db — in bash output",
    }


def test_prose_is_not_taken_for_paths() -> None:
    assert references("e.g. i.e., ... .5 v1.2.3 a.b 2024/05/01 / ~ 3.14") == set()
