"""`gateway bench --registry`: a short run's table times registering and looking up schemas beside a
raw Redis round trip, with the gateway's and Redis's CPU per request (figures, not their size:
nothing here is timed)."""

from __future__ import annotations

import pytest

from gateway.bench import registry
from gateway.bench.common import Progress, bench_redis, print_table


@pytest.mark.slow
def test_the_registry_bench_times_register_and_lookup_beside_a_redis_round_trip(capsys):
    with Progress(0.2), bench_redis(None, False) as url:
        rows = registry.measure_registry(url, 20)
    floor, register, lookup = rows
    assert floor.what == "raw redis: GET round trip" and floor.p50_ms is not None
    for row in (register, lookup):
        assert row.baseline == floor.what and row.records_per_s > 0
        assert row.p50_ms is not None and row.p99_ms is not None and row.p50_ms <= row.p99_ms
        assert set(row.cpu_us) == {"gateway", "redis"}
    print_table(rows)
    assert "registry: look a schema up by id" in capsys.readouterr().out
