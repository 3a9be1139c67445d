"""`gateway bench --append-cost`: a tiny run's table has a row per batch shape and way, each with
Redis's CPU per batch and per record beside raw XADD+HSET (figures, not their size: nothing here is
timed), and it leaves nothing behind on the Redis it measured."""

from __future__ import annotations

import asyncio

from gateway.bench import append_cost
from gateway.store import Store


def test_the_append_cost_bench_has_a_row_per_shape_and_way_and_cleans_up(redis_server):
    rows = append_cost.measure_append_cost(redis_server, 32)
    assert [(r["shape"], r["way"]) for r in rows] == [
        (f"{count} x {size} B", way) for size, count in append_cost.SHAPES for way in append_cost.WAYS]
    assert all(r["batch_us"] >= 0 and r["record_us"] >= 0 for r in rows)
    assert append_cost.format_rows(rows).count("µs/record") == len(rows)

    async def left() -> list[str]:
        store = Store.open(redis_server)
        try:
            return [t.name for t in await store.log.list_topics() if t.name.startswith("bench-append-cost-")]
        finally:
            await store.close()

    assert asyncio.run(left()) == []
