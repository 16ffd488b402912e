"""The RPC series are plain numbers turned into Prometheus families at scrape time: what a
scrape shows must be what ``prometheus_client``'s own Counter and Histogram would show for
the same calls."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from wm_server.telemetry.metrics import RPC_BUCKETS, Metrics

METHOD = "wm.v1.WorkingMemoryService/AddMessages"
CALLS = [
    ("OK", 0.0004),
    ("OK", 0.001),  # on a bound: counted in that bucket (le is "less or equal")
    ("OK", 0.0031),
    ("OK", 7.0),
    ("OK", 1000.0),  # above every bound: +Inf only
    ("NOT_FOUND", 0.02),
]


def samples(text: bytes, prefix: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for line in text.decode().splitlines():
        if not line.startswith(prefix) or "_created" in line:
            continue
        name_labels, value = line.rsplit(" ", 1)
        name, _, labels = name_labels.partition("{")
        pairs = tuple(sorted(tuple(p.split("=", 1)) for p in labels.rstrip("}").split(",") if p))
        out[(name, pairs)] = float(value)
    return out


def test_a_scrape_matches_prometheus_clients_own_series() -> None:
    metrics = Metrics()
    series = metrics.rpc_series(METHOD)
    assert metrics.rpc_series(METHOD) is series  # one series per method
    reference = CollectorRegistry()
    counter = Counter("wm_rpcs", "x", ["method", "code"], registry=reference)
    histogram = Histogram(
        "wm_rpc_duration_seconds", "x", ["method", "code"], buckets=RPC_BUCKETS, registry=reference
    )
    for code, seconds in CALLS:
        series.finished(code, seconds)
        counter.labels(METHOD, code).inc()
        histogram.labels(METHOD, code).observe(seconds)

    ours = generate_latest(metrics.registry)
    theirs = generate_latest(reference)
    for prefix in ("wm_rpcs_total", "wm_rpc_duration_seconds"):
        assert samples(ours, prefix) == samples(theirs, prefix)
    got = samples(ours, "wm_rpc_duration_seconds_count")
    assert (
        got[("wm_rpc_duration_seconds_count", (("code", '"OK"'), ("method", f'"{METHOD}"')))] == 5
    )


def test_a_method_never_called_has_no_series() -> None:
    metrics = Metrics()
    metrics.rpc_series(METHOD)
    assert b"wm_rpcs_total{" not in generate_latest(metrics.registry)
