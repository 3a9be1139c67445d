"""`gateway bench --console`: a tiny run's table has a row per console page, each loaded in
chromium beside its admin-API requests timed raw, with the gateway's and Redis's CPU per load
(figures, not their size: nothing here is timed)."""

from __future__ import annotations

import pytest

from gateway.bench import console
from gateway.bench.common import Progress, bench_redis

pytestmark = [pytest.mark.browser, pytest.mark.kafka]


@pytest.mark.slow
def test_the_console_bench_loads_every_page_beside_its_api_requests(capsys):
    with Progress(0.2), bench_redis(None, False) as url:
        rows = console.measure_console(url, topics=20, groups=3, loads=2)
    assert [r.page for r in rows] == [name for name, _ in console._pages("t", "g")]
    for r in rows:
        assert len(r.loads) == len(r.api) == 2 and all(t > 0 for t in r.loads + r.api)
        assert r.requests >= 1 and r.ratio > 0
        assert set(r.cpu_us) == {"gateway", "redis"}
    by_page = {r.page: r for r in rows}
    assert by_page["groups"].requests == 2 and by_page["group"].requests == 2  # the group, its lag history
    print(console.format_rows(rows, 20, 3))
    out = capsys.readouterr().out
    assert "gateway holding 20 topics and 3 groups" in out and all(r.page in out for r in rows)
