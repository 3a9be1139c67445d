"""`gateway bench --compaction`: what compacted topics cost, beside the same work done without them.

- produce: confluent-kafka (acks=all) sending keyed records to a compacted topic against the same
  records to a delete-policy topic, in the same gateway process (goal: at least 0.9x). The
  compacted topic's `min.compaction.lag.ms` keeps the cleaner off it: the rows measure the produce
  path (the key check) alone.
- cleaner: a pass over a changelog of `UPDATES` updates over `KEYS` keys (drawn at random: a key's
  latest update is mostly among the last few thousand, as in a changelog), in MB of log per second,
  against raw XRANGE of the same batch bytes (goal: at least 0.5x), each the best of two (the pass
  on two copies of the changelog); and the partition's Redis memory (MEMORY USAGE of its streams)
  before and after, against the bytes of the live keys and values (goal: within 1.5x).
- the cleaner's peak memory over `DISTINCT` distinct keys: tracemalloc's peak over the first pass
  (the pass's allocations through Python's allocators, the C offset map's included; not the
  process's RSS).

The cleaner runs in this process, on a gateway of its own started once the measured gateway process
has stopped (no role of another gateway touches its topics).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import tracemalloc
import uuid
from dataclasses import dataclass
from typing import Any, cast

from gateway.bench.common import (
    CpuSpan,
    Progress,
    Row,
    Server,
    create_kafka_topic,
    kafka_produce,
    raw_client,
    run_client,
    running_gateway,
    streams,
)
from gateway.clock import now_ms
from gateway.config import Config
from gateway.domain.compaction import MAX_KEYS, Policy
from gateway.formats.records import BatchBuilder, Compression
from gateway.server.gateway import Gateway

UPDATES = 200_000  # the changelog a pass cleans
KEYS = 2_000
CHANGELOG_VALUE = 100  # bytes per value in it
DISTINCT = 1_000_000  # keys of the peak-memory changelog, one record each
PER_BATCH = 500  # records per batch written for the cleaner rows
PRODUCE_KEYS = 10_000  # distinct keys the produce rows cycle over
APPEND_GROUP = 50  # batches per append

NOTE = ("(produce: confluent-kafka, acks=all, linger.ms 5, keyed records, best of 2 runs each, in turns; cleaner rows "
        "(best of 2 each): "
        "size = log bytes per record, MB/s = MB of log scanned per second; goals: produce >= 0.9x of delete, "
        "cleaner >= 0.5x of XRANGE, memory after cleaning <= 1.5x of the live keys' bytes)")


def measure_produce(sizes: list[int], seconds: float, url: str) -> list[Row]:
    """Compacted against delete-policy produce, each size in the same gateway process, with the
    gateway's CPU per record: on a busy machine it varies far less than throughput does."""
    rows: list[Row] = []
    keys = [b"key-%06d" % i for i in range(PRODUCE_KEYS)]
    with running_gateway(url) as ports:
        bootstrap = f"127.0.0.1:{ports['kafka']}"
        gateway = [Server("gateway", ports["pid"], tree=True)]
        for size in sizes:
            run = uuid.uuid4().hex[:6]
            plain, compacted = f"bench-delete-{run}", f"bench-compact-{run}"
            create_kafka_topic(bootstrap, plain, 1)
            create_kafka_topic(bootstrap, compacted, 1, {"cleanup.policy": "compact",
                                                         "min.compaction.lag.ms": str(2**62)})
            rates: dict[str, list[float]] = {plain: [], compacted: []}
            cpu: dict[str, list[float]] = {plain: [], compacted: []}  # gateway us per record
            for _ in range(2):  # taken in turns: a busy moment of the machine falls on both
                for topic in (plain, compacted):
                    span = CpuSpan(gateway)
                    rate, sent = kafka_produce(bootstrap, topic, size, seconds, keys=keys, span=span)
                    rates[topic].append(rate)
                    cpu[topic].append(span.per(sent)["gateway"])
            base, us_base = max(rates[plain]), min(cpu[plain])
            rows.append(Row("kafka produce, delete topic", size, base, cpu=f"gateway {us_base:.2f} us/record"))
            us = min(cpu[compacted])
            rows.append(Row("kafka produce, compacted topic", size, max(rates[compacted]), "delete topic", base,
                            cpu=f"gateway {us:.2f} us/record: {us_base / us:.2f}x the delete topic's rate by CPU"))
    return rows


@dataclass
class Changelog:
    batches: list[bytes]
    live_bytes: int  # keys and values of the latest record of each key
    records: int


def changelog(updates: int, keys: int, value_size: int, *, distinct: bool = False) -> Changelog:
    """`updates` records in batches of `PER_BATCH`, keys drawn at random from `keys` (`distinct`:
    each key once)."""
    rng = random.Random(16)
    value = os.urandom(value_size)
    latest: dict[bytes, int] = {}
    batches: list[bytes] = []
    ts = now_ms() - 60_000
    for lo in range(0, updates, PER_BATCH):
        b = BatchBuilder(Compression.NONE)
        for i in range(lo, min(lo + PER_BATCH, updates)):
            key = b"key-%07d" % (i if distinct else rng.randrange(keys))
            b.append(value, key, timestamp=ts)
            latest[key] = len(key) + len(value)
        batches.append(b.build())
    return Changelog(batches, sum(latest.values()), updates)


async def _write(gw: Gateway, topic: str, log: Changelog) -> None:
    assert gw.services is not None
    await gw.services.log.create_topic(topic, 1, {"cleanup.policy": "compact"})
    for lo in range(0, len(log.batches), APPEND_GROUP):
        done = await gw.services.log.append([(topic, 0, b) for b in log.batches[lo:lo + APPEND_GROUP]])
        for d in done:
            if isinstance(d.result, Exception):
                raise d.result


async def _clean_once(gw: Gateway, topic: str) -> float:
    """One pass over partition 0; its seconds."""
    assert gw.services is not None and gw.cleaner is not None
    policy = Policy.of(await gw.services.log.topic_config(topic))
    start = time.perf_counter()
    done = await gw.cleaner.clean(topic, 0, policy)
    took = time.perf_counter() - start
    if done is None:
        raise RuntimeError(f"the cleaner found nothing due on {topic}")
    return took


def raw_xrange(url: str, batches: list[bytes]) -> float:
    """Seconds to read every batch back with XRANGE, 64 at a time, as the cleaner does."""
    r = raw_client(url)
    (key,) = streams("clean", 1)
    for lo in range(0, len(batches), APPEND_GROUP):
        pipe = r.pipeline(transaction=False)
        for b in batches[lo:lo + APPEND_GROUP]:
            pipe.xadd(key, {"b": b, "n": PER_BATCH, "t": 0})
        pipe.execute()
    try:
        start = time.perf_counter()
        low = "-"
        while entries := cast("list[tuple[bytes, Any]]", r.xrange(key, low, "+", count=64)):
            low = "(" + entries[-1][0].decode()
        return time.perf_counter() - start
    finally:
        r.delete(key)
        r.close()


async def measure_cleaner(url: str) -> tuple[list[Row], list[str]]:
    """The cleaner's rows, and lines on memory."""
    cfg = Config(host="127.0.0.1", kafka_port=0, native_port=0, admin_port=0, redis_url=url,
                 cleaner_interval=3600, retention_check_interval=3600)
    gw = Gateway(cfg)
    Progress.doing_else("starting a gateway in this process")
    await gw.start()
    rows: list[Row] = []
    lines: list[str] = []
    try:
        assert gw.services is not None
        memory = gw.services.log.store.cleaner.memory
        Progress.doing_else(f"writing a changelog of {UPDATES:,} updates over {KEYS:,} keys")
        log = changelog(UPDATES, KEYS, CHANGELOG_VALUE)
        size = sum(map(len, log.batches))
        topics = [f"bench-clean-{uuid.uuid4().hex[:6]}" for _ in range(2)]  # a pass each: the best is taken
        for topic in topics:
            await _write(gw, topic, log)
        before = await memory(topics[0], 0)
        xrange_s = min([await asyncio.to_thread(raw_xrange, url, log.batches) for _ in range(2)])
        Progress.doing_else("")
        per_record = size // log.records  # the rows' MB/s are MB of log read per second
        rows.append(Row(f"raw redis: XRANGE of a {size / 1e6:.0f} MB log", per_record, log.records / xrange_s))
        pass_s = min([await _clean_once(gw, topic) for topic in topics])
        topic = topics[0]
        rows.append(Row(f"cleaner pass, {UPDATES:,} updates / {KEYS:,} keys", per_record, log.records / pass_s,
                        "XRANGE", log.records / xrange_s))
        after = await memory(topic, 0)
        lines.append(f"partition memory (MEMORY USAGE of its streams): {before / 1e6:.1f} MB before cleaning, "
                     f"{after / 1e6:.2f} MB after; live keys' bytes {log.live_bytes / 1e6:.2f} MB: "
                     f"{after / log.live_bytes:.2f}x of them (goal <= 1.5x)")
        Progress.doing_else(f"writing {DISTINCT:,} distinct keys")
        many = changelog(DISTINCT, DISTINCT, 10, distinct=True)
        wide = f"bench-wide-{uuid.uuid4().hex[:6]}"
        await _write(gw, wide, many)
        Progress.doing_else("a pass under tracemalloc")
        tracemalloc.start()
        try:
            await _clean_once(gw, wide)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        Progress.doing_else("")
        passes = -(-DISTINCT // MAX_KEYS)
        lines.append(f"cleaner peak memory, {DISTINCT:,} distinct keys: {peak / 1e6:.1f} MB (tracemalloc peak of "
                     f"the first pass; its offset map holds at most {MAX_KEYS:,} keys, so {passes} pass"
                     f"{'es' if passes > 1 else ''} of the same bound clean them)")
    finally:
        await gw.stop()
    return rows, lines


def measure_compaction(url: str, sizes: list[int], seconds: float) -> tuple[list[Row], str]:
    """Every row of `gateway bench --compaction`, and the note printed above the table (memory lines)."""
    rows = measure_produce(sizes, seconds, url)
    cleaner_rows, lines = run_client(measure_cleaner(url))
    return rows + cleaner_rows, "\n".join([NOTE, *lines])
