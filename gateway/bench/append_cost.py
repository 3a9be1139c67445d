"""`gateway bench --append-cost`: what Redis spends per appended record, and where.

Per batch shape (16 records of 100 B, 16 of 1 KB, one of 16 KB), the same batches written six
ways on one Redis, the ways alternated over three rounds and each row the median: raw `XADD` with an
explicit ID + `HSET` of the partition's meta (what an append writes, no script: the floor), the
gateway's append (append-5.lua through `LogStore.append`), the same by an idempotent producer, and a
script that does nothing but is handed the batch, and predicted appends (gateway/store/predicted.py:
a check script and a raw XADD in one MULTI), plain and idempotent. Figures are Redis's CPU (used_cpu_user +
used_cpu_sys, every thread) per batch and per record, and the ratio to raw.

The last row is why a script append cannot come down to raw XADD's cost: Redis's Lua interns every
argument as a Lua string and hashes all its bytes doing so (deps/lua/src/lstring.c, luaS_newlstr,
`step = 1`), one byte after another: measured here, two thirds of what a raw XADD+HSET of a 16 KB
batch costs in all."""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

from gateway.bench.common import raw_client
from gateway.formats.records import build_batch, parse_header
from gateway.store import Store
from gateway.store.log import AppendRequest, TopicInfo

SHAPES = ((100, 16), (1024, 16), (16384, 1))
RECORDS = 32_000  # per row and shape, in batches of the shape's count
ROW_BYTES = 32 << 20  # and at most this much a row: 32,000 records of 16 KB would hold a gigabyte in Redis
ROUNDS = 3
PIPELINE = 50  # appends sent in one round trip, as a busy gateway's pipelined produces are
WAYS = ("raw XADD+HSET", "append-5", "append-5 idempotent", "script given the batch", "predicted", "predicted idempotent")
_RAW = "bench:append-cost:{raw}"


def _redis_cpu(r: Any) -> float:
    """CPU seconds of the Redis so far (of every node, on a Cluster)."""
    cpu = r.info("cpu")
    nodes = [v for v in cpu.values() if isinstance(v, dict)] or [cpu]
    return sum(float(n["used_cpu_user"]) + float(n["used_cpu_sys"]) for n in nodes)


async def _append(store: Store, topic: str, batch: bytes, count: int, batches: int, idempotent: bool,
                  predicted: Any = None) -> None:
    h = parse_header(batch)
    for first in range(0, batches, PIPELINE):
        requests = [
            AppendRequest(topic, 0, batch, count, h.max_timestamp, *((7, 0, i * count) if idempotent else ()))
            for i in range(first, min(first + PIPELINE, batches))
        ]
        replies = await (predicted.append(requests) if predicted else store.log.append(requests))
        failed = [r for r in replies if isinstance(r, Exception)]
        if failed:
            raise failed[0]


def _raw(r: Any, batch: bytes, count: int, batches: int) -> None:
    r.delete(f"{_RAW}:log", f"{_RAW}:meta")
    for first in range(0, batches, PIPELINE):
        pipe = r.pipeline(transaction=False)
        for i in range(first, min(first + PIPELINE, batches)):
            hw = i * count
            pipe.execute_command("XADD", f"{_RAW}:log", f"{hw}-1", "b", batch, "n", count, "t", i, "c", i * len(batch))
            pipe.hset(f"{_RAW}:meta", mapping={"hw": hw + count, "maxts": i, "bytes": (i + 1) * len(batch)})
        pipe.execute()
    r.delete(f"{_RAW}:log", f"{_RAW}:meta")


def _script_only(r: Any, batch: bytes, batches: int) -> None:
    noop = r.register_script("return 0")
    for first in range(0, batches, PIPELINE):
        pipe = r.pipeline(transaction=False)
        for _ in range(first, min(first + PIPELINE, batches)):
            noop(keys=[f"{_RAW}:log"], args=[batch], client=pipe)
        pipe.execute()


async def _measure(url: str, records: int) -> list[dict[str, Any]]:
    store = Store.open(url)
    r = raw_client(url)
    try:
        samples: dict[tuple[int, str], list[float]] = {}
        for size, count in SHAPES:
            batch = build_batch([(None, b"v" * size, [])] * count)
            batches = max(1, min(records // count, ROW_BYTES // len(batch)))
            for round_ in range(ROUNDS):
                topics = [f"bench-append-cost-{size}-{round_}-{k}" for k in range(4)]
                for t in topics:
                    await store.log.create_topic(TopicInfo(t, 1))
                for way in WAYS:
                    before = _redis_cpu(r)
                    if way == WAYS[0]:
                        _raw(r, batch, count, batches)
                    elif way == WAYS[3]:
                        _script_only(r, batch, batches)
                    else:
                        k = WAYS.index(way) - 1 - (way in WAYS[4:])
                        await _append(store, topics[k], batch, count, batches, k % 2 == 1,
                                      store.log.predicted if way in WAYS[4:] else None)
                    samples.setdefault((size, way), []).append((_redis_cpu(r) - before) * 1e6 / batches)
                for t in topics:
                    await store.log.delete_topic(t)
        rows = []
        for size, count in SHAPES:
            raw = statistics.median(samples[(size, WAYS[0])])
            for way in WAYS:
                per_batch = statistics.median(samples[(size, way)])
                rows.append({"shape": f"{count} x {size} B", "way": way, "batch_us": per_batch,
                             "record_us": per_batch / count, "ratio": per_batch / raw if raw > 0 else 0.0})
        return rows
    finally:
        r.close()
        await store.close()


def measure_append_cost(url: str, records: int) -> list[dict[str, Any]]:
    """A row per shape and way: Redis's CPU per batch and per record, and its ratio to raw."""
    return asyncio.run(_measure(url, records))


def format_rows(rows: list[dict[str, Any]]) -> str:
    return "\n".join(f"{row['shape']:12} {row['way']:23} redis cpu {row['batch_us']:7.1f} µs/batch "
                     f"{row['record_us']:6.2f} µs/record  {row['ratio']:4.2f}x raw" for row in rows)
