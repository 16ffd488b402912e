"""The one-line abstract stored with an archive (wm_core.abstract_of)."""

from __future__ import annotations

from wm_core import SECTIONS, abstract_of, render_document


def _document(**bodies: str) -> str:
    names = {s.split(" ")[0].lower(): s for s in SECTIONS}
    return render_document({names[k]: v for k, v in bodies.items()})


def test_title_and_first_sentence_of_the_current_state() -> None:
    document = _document(
        session="- **Payment retries**",
        current="- Tests pass on CI. Next: the flaky timeout.\n- Second bullet",
    )
    assert abstract_of(document) == "Payment retries — Tests pass on CI."


def test_never_the_document_heading() -> None:
    document = _document(task="1. Ship the importer")
    assert not abstract_of(document).startswith("#")
    assert abstract_of(document) == "Ship the importer"


def test_an_empty_document_still_says_something() -> None:
    assert abstract_of(_document()) == "working memory updated"


def test_long_text_is_cut_with_an_ellipsis() -> None:
    abstract = abstract_of(_document(session="- " + "word " * 100))
    assert len(abstract) == 240
    assert abstract.endswith("…")
