"""A pytest plugin (``-p support.marker_listing``) that writes, once the collection ends (after
tests/conftest.py has added its markers and before ``-m`` would select), every collected test's
node id with the names of its markers, as JSON lines to the file ``MARKER_LISTING_OUT`` names.

tests/ci/test_ci_tiers.py collects the paths it looks at once, through this, and selects from
the listing with pytest's own ``-m`` expressions, instead of one collection per expression."""

from __future__ import annotations

import json
import os

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    with open(os.environ["MARKER_LISTING_OUT"], "w", encoding="utf-8") as out:
        for item in items:
            names = sorted({mark.name for mark in item.iter_markers()})
            out.write(json.dumps({"id": item.nodeid, "marks": names}) + "\n")
