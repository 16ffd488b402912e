"""Epoch seconds into a Timestamp keep the second they name, up to the last one a Timestamp
can carry (a product with 1e9 used to truncate 9999-12-31T23:59:59Z to ...58.999998464)."""

from __future__ import annotations

import pytest

from wm_server.api import stored_wire as wire


@pytest.mark.parametrize(
    ("seconds", "whole", "nanos"),
    [
        (253_402_300_799.0, 253_402_300_799, 0),  # 9999-12-31T23:59:59Z
        (-62_135_596_800.0, -62_135_596_800, 0),  # 0001-01-01T00:00:00Z
        (1_700_000_000.25, 1_700_000_000, 250_000_000),
        (-1.5, -2, 500_000_000),
        (0.9999999999, 1, 0),  # rounds up into the next second, never to 1e9 nanos
    ],
)
def test_seconds_become_the_timestamp_they_name(seconds: float, whole: int, nanos: int) -> None:
    stamp = wire.timestamp(seconds)
    assert stamp is not None
    assert (stamp.seconds, stamp.nanos) == (whole, nanos)
