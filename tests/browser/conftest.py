"""The browser every inspector test drives: Debian's Chromium through Playwright (no browser
download), one per test module."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from support.postgres import missing_prerequisite


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        missing_prerequisite("the browser tests need Chromium: `apt-get install -y chromium`")
    assert path is not None
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    path = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=path, headless=True)
        yield chromium
        chromium.close()
