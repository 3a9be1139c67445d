"""`gateway bench --read-mark`: a tiny run's table has the four rows, each with Redis's CPU and the
read's latency (figures, not their size: nothing here is timed)."""

from __future__ import annotations

import pytest

from gateway.bench import read_mark


@pytest.mark.slow
def test_the_read_mark_bench_has_a_row_for_each_shape_with_and_without_the_mark():
    rows = read_mark.measure_read_mark(20)
    assert [r["label"] for r in rows] == ["sentinel none", "sentinel publish", "cluster none", "cluster script"]
    assert all(r["cpu_us"] >= 0 and r["cmd_us"] > 0 and r["p99_us"] >= r["p50_us"] > 0 for r in rows)
    assert read_mark.format_rows(rows).count("µs/read") == 8
