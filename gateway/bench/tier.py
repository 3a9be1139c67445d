"""`gateway bench --tier`: tiered storage against what the object stores themselves give.

For each backend (the local directory in a temporary directory; S3 on s3s-fs, a real S3-compatible
server on loopback that ./dev builds; and the store `--object-store` names, if any): raw PUTs of
segment-sized objects and raw ranged GETs of a Fetch's slice of them, through the same
`ObjectStore` the tiering code uses, one request at a time as a partition's copier and a remote
read issue them; then a gateway process tiering into that store, each of its rows beside its
baseline of the same run (`tiered_rows`), and Redis's memory for a large tiered topic.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from gateway.bench.common import (
    CpuSpan,
    Progress,
    Row,
    Server,
    admin_json,
    create_kafka_topic,
    gateway_servers,
    kafka_consume,
    kafka_produce,
    percentile,
    produce_count,
    raw_client,
    run_client,
    running_gateway,
)
from gateway.bench.s3_server import BINARY, S3Server
from gateway.store.objects import ObjectStore, ObjectStoreUnavailable
from gateway.store.objects.local import LocalDirStore
from gateway.store.objects.open import open_object_store
from gateway.store.objects.s3 import S3Store

SEGMENT = 8 * 2**20  # a segment object of the size a copier writes
SLICE = 2**20  # what a remote Fetch reads of it at a time (fetch.max.bytes of one partition)
PRODUCE_ROUNDS = 3  # untiered and tiered produce runs, interleaved: the ratio is their rounds' median
NOTE = ("raw object-store rows: PUT of whole 8 MiB segments, ranged GET of 1 MiB slices at random offsets, "
        "one request at a time; size is bytes per request, records/s requests per second")


def measure_tier(redis_url: str, seconds: float, object_store: str | None = None,
                 sizes: Sizes | None = None) -> tuple[list[Row], str]:
    """The raw rows of every backend, each followed by its tiered rows; and the note above the
    table, with Redis's memory for a tiered topic of `sizes.memory_bytes` (on the local directory).
    Without s3s-fs built (a package installed by pip rather than ./dev), the S3 rows are those of
    `object_store` alone."""
    sizes = sizes or Sizes()
    if object_store:
        try:
            open_object_store(object_store)
        except (ValueError, ObjectStoreUnavailable) as exc:
            raise SystemExit(f"--object-store: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="gateway-bench-tier-") as tmp, contextlib.ExitStack() as stack:
        local = Path(tmp) / "tier"
        backends = [Backend("local dir", lambda: LocalDirStore(local), str(local))]
        if BINARY.is_file():
            Progress.doing_else("starting s3s-fs")
            server = stack.enter_context(S3Server(Path(tmp) / "s3"))
            backends.append(Backend("S3 (s3s-fs)", lambda: S3Store(server.bucket, "bench", endpoint=server.endpoint,
                                                                   access_key_id=server.access_key,
                                                                   secret_access_key=server.secret_key),
                                    f"s3://{server.bucket}/bench", server.env, server.proc.pid if server.proc else None))
        else:
            print(f"s3s-fs is not built ({BINARY}; ./dev gateway bench --tier builds it): measuring without it",
                  file=sys.stderr)
        if object_store:
            backends.append(Backend("", lambda: open_object_store(object_store), object_store))
        return run_client(_measure(redis_url, seconds, backends, sizes))


async def _measure(redis_url: str, seconds: float, backends: list[Backend], sizes: Sizes) -> tuple[list[Row], str]:
    rows: list[Row] = []
    notes = [NOTE]
    for i, backend in enumerate(backends):
        store = backend.opened()
        try:
            backend.name = backend.name or store.description
            put, get = await raw_rows(store, backend.name, seconds)
            tiered, memory = await tiered_rows(redis_url, store, backend, put, seconds, sizes, memory=i == 0)
            rows += [put, get, *tiered]
            notes += [memory] if memory else []
        finally:
            await store.close()
    return rows, "\n".join(notes)


@dataclass(frozen=True)
class Sizes:
    """What the tiered rows move: a topic of `topic_bytes` in records of `record` bytes, cut into
    segments of `segment` bytes; the memory figure's topic of `memory_bytes`, a tenth kept local."""

    topic_bytes: int = 128 * 2**20
    segment: int = SEGMENT
    record: int = 10_000  # large enough that bytes, not a Python consumer's per-record cost, set the pace
    produce_record: int = 1024  # the produce rows', as `gateway bench --kafka`'s
    memory_bytes: int = 2**30

    @classmethod
    def for_memory(cls, gb: float) -> Sizes:
        """The memory figure's topic of `gb` GB; the other rows' topic no larger (a quick look stays quick)."""
        memory = int(gb * 1e9)
        return cls(topic_bytes=min(cls.topic_bytes, memory), memory_bytes=memory)


@dataclass
class Backend:
    """A store measured: `opened` for the raw rows, `location` (and `env`) for `gateway serve
    --tier-store`, `pid` of its server when it runs on this machine (s3s-fs), whose CPU counts too."""

    name: str
    opened: Callable[[], ObjectStore]
    location: str
    env: dict[str, str] = field(default_factory=dict)
    pid: int | None = None


async def tiered_rows(redis_url: str, store: ObjectStore, backend: Backend, raw_put: Row, seconds: float,
                      sizes: Sizes, memory: bool) -> tuple[list[Row], str]:
    """Tiered storage's own figures on `store`, each a ratio against its baseline of the same run,
    through a gateway process tiering into it (a pass every 50 ms):

    - copy MB/s: the tiering role copying and trimming a topic held back with
      `remote.log.copy.disable` until it is let go, against `raw_put`, a raw PUT of the same
      segment-sized objects to the same store;
    - remote fetch MB/s: confluent-kafka reading the fully remote range [0, local log start) of that
      topic, against raw ranged GETs (SLICE each, in order) of its very segments;
    - consume from the start of that topic once mostly remote (a tenth local) against the same
      consumer reading the same topic before copying, all in Redis;
    - produce with copying running (copy lag 0, one segment kept local) against produce to an
      untiered topic, in PRODUCE_ROUNDS interleaved rounds (`_produce_rounds`);
    - with `memory`, the text of Redis's memory for a topic of `sizes.memory_bytes` with a tenth
      kept local, against the same bytes untiered, extrapolated from the first topic measured
      before copying.

    The rows' CPU lines give the gateway's and Redis's (and s3s-fs's) CPU µs per MB moved."""
    name = backend.name
    args = ["--tier-store", backend.location, "--tier-interval", "0.05"]
    with running_gateway(redis_url, args=args, env=backend.env) as gw:
        bs, admin = f"127.0.0.1:{gw['kafka']}", gw["admin"]
        servers = gateway_servers([gw], redis_url) + ([Server("s3s-fs", backend.pid)] if backend.pid else [])
        topic = f"bench-tier-{uuid.uuid4().hex[:6]}"
        count = max(1, sizes.topic_bytes // sizes.record)
        create_kafka_topic(bs, topic, 1, {"remote.storage.enable": "true", "segment.bytes": str(sizes.segment),
                                          "remote.log.copy.disable": "true"})
        Progress.doing_else(f"producing {sizes.topic_bytes / 1e6:.0f} MB to a tiered topic held in Redis")
        before = used_memory(redis_url)
        produce_count(bs, topic, sizes.record, count)
        untiered = _footprint(admin, topic, used_memory(redis_url) - before)
        per_record = untiered.stored / count
        Progress.doing_else("")
        local, local_span = _consume(bs, topic, count, servers)
        all_local = Row(f"consume from start, all in Redis, {name}", round(per_record), local,
                        cpu=_per_mb(local_span, untiered.stored))

        Progress.doing_else("")
        took, copied, span = _copy(admin, topic, sizes, servers)
        view = _tier(admin, topic)
        segment_size = view["remote_bytes"] / max(1, view["remote_segments"])
        copy = Row(f"copy+trim by the tiering role, {name}", round(segment_size), copied / segment_size / took,
                   baseline=raw_put.what, baseline_records_per_s=raw_put.mb_per_s * 1e6 / segment_size,
                   cpu=_per_mb(span, copied))

        remote_start = view["local_log_start_offset"]
        raw = await _raw_reads(store, topic, name)
        remote, fetch_span = _consume(bs, topic, remote_start, servers)
        fetch = Row(f"remote fetch of the fully remote range, {name}", round(view["remote_bytes"] / remote_start),
                    remote, baseline=raw.what, baseline_records_per_s=raw.mb_per_s * 1e6 * remote_start
                    / view["remote_bytes"], cpu=_per_mb(fetch_span, view["remote_bytes"]))
        mostly, mostly_span = _consume(bs, topic, count, servers)
        mostly_remote = Row(f"consume from start, {remote_start / count:.0%} remote, {name}", round(per_record),
                            mostly, baseline=all_local.what, baseline_records_per_s=local,
                            cpu=_per_mb(mostly_span, untiered.stored))
        admin_json(admin, f"/admin/v2/topics/{topic}", "DELETE")

        untiered_produce, tiered_produce = _produce_rounds(bs, admin, sizes, seconds, servers, name)
        rows = [all_local, mostly_remote, copy, raw, fetch, untiered_produce, tiered_produce]
        return rows, _memory(redis_url, bs, admin, sizes, untiered, name) if memory else ""


@dataclass(frozen=True)
class Footprint:
    """Redis's memory for a topic: `stored` bytes of batches, MEMORY USAGE of its partition's keys
    (`streams`, as the admin API reports it), and how much used_memory grew with it."""

    stored: int
    streams: int
    used_growth: int

    def scaled(self, stored: int) -> Footprint:
        return Footprint(stored, round(self.streams * stored / self.stored), round(self.used_growth * stored / self.stored))


def _footprint(admin: int, topic: str, used_growth: int, stored: int | None = None) -> Footprint:
    """`stored` defaults to the batches' bytes in Redis: right while nothing is tiered."""
    view = admin_json(admin, f"/admin/v2/topics/{topic}")["partitions"][0]
    return Footprint(view["tier"]["local_bytes"] if stored is None else stored, int(view["bytes"]), used_growth)


def used_memory(redis_url: str) -> int:
    r = raw_client(redis_url)
    try:
        return int(r.info("memory")["used_memory"])
    finally:
        r.close()


def _tier(admin: int, topic: str) -> dict[str, int]:
    return dict(admin_json(admin, f"/admin/v2/topics/{topic}")["partitions"][0]["tier"])


def _metrics(admin: int) -> dict[str, float]:
    """The gateway's tiering counters and per-topic copy lags (`...copy_lag_bytes{topic="t"}`)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return {name: float(value) for name, value in
            (line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("gateway_tier_"))}


def _copied(admin: int, topic: str, segment: int) -> tuple[float, bool]:
    """Bytes copied so far, and whether the topic's last pass left less than a segment uncopied."""
    m = _metrics(admin)
    lag = m.get(f'gateway_tier_copy_lag_bytes{{topic="{topic}"}}')
    return m["gateway_tier_bytes_copied_total"], lag is not None and lag < segment


def _copy(admin: int, topic: str, sizes: Sizes, servers: list[Server]) -> tuple[float, float, CpuSpan]:
    """Let the held-back topic's copying go (a tenth kept local) and time it until a pass leaves
    under a segment uncopied: (seconds, bytes copied, span). The clock starts at the first segment
    seen copied (the wait for the next pass left out), unless all was copied by the first look."""
    span = CpuSpan(servers)
    first, _ = _copied(admin, topic, sizes.segment)
    span.start()
    t0 = time.perf_counter()
    admin_json(admin, f"/admin/v2/topics/{topic}/config", "PATCH",
               {"remote.log.copy.disable": "false", "local.retention.bytes": str(sizes.topic_bytes // 10)})
    seen: tuple[float, float] | None = None  # (when, bytes copied) at the first progress seen
    deadline = time.monotonic() + 600
    while True:
        copied, done = _copied(admin, topic, sizes.segment)
        now = time.perf_counter()
        if done:
            break
        if seen is None and copied > first:
            seen = (now, copied)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the tiering role did not copy {topic} within 600 s")
        time.sleep(0.01)
    span.stop()
    if seen is None or seen[1] == copied:  # all copied by the first look: the clock from the config change
        seen = (t0, first)
    return now - seen[0], copied - seen[1], span


def _settled(admin: int, topic: str, segment: int, per_record: float, quiet: float = 1.0) -> None:
    """Wait until the role has copied all of `topic` it may (less than a segment's worth of records,
    `per_record` bytes each, beyond the highest tiered offset) and its local start has not moved for
    `quiet` seconds (the trim that follows a pass's last copy; a pass runs every 50 ms)."""
    deadline = time.monotonic() + 3600
    last: tuple[int, int] | None = None
    since = time.monotonic()
    while True:
        view = admin_json(admin, f"/admin/v2/topics/{topic}")["partitions"][0]
        now = (view["tier"]["local_log_start_offset"], view["tier"]["highest_tiered_offset"])
        if now != last:
            last, since = now, time.monotonic()
        elif (view["high_watermark"] - now[1] - 1) * per_record < segment and time.monotonic() - since >= quiet:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the tiering role did not copy {topic} within an hour")
        time.sleep(0.1)


async def _raw_reads(store: ObjectStore, topic: str, name: str) -> Row:
    """Raw ranged GETs, SLICE bytes each and in order, of every data object of `topic`'s segments."""
    objects = [o for o in await store.list(f"{topic}-") if o.key.endswith(".log")]
    took: list[float] = []
    for obj in objects:
        for at in range(0, obj.size, SLICE):
            t0 = time.perf_counter()
            await store.get_range(obj.key, at, min(SLICE, obj.size - at))
            took.append((time.perf_counter() - t0) * 1000)
    size = sum(o.size for o in objects) / max(1, len(took))
    return Row(f"raw ranged GETs of its segments, {name}", round(size), len(took) / (sum(took) / 1000),
               p50_ms=percentile(took, 0.5), p99_ms=percentile(took, 0.99))


def _produce_rounds(bs: str, admin: int, sizes: Sizes, seconds: float, servers: list[Server],
                    name: str) -> tuple[Row, Row]:
    """Produce to an untiered topic and, with copying running, to a tiered one, PRODUCE_ROUNDS times,
    the pair's order swapped each round (ABBA...), so the two runs compared are seconds apart: on a
    shared machine the produce rate alone swings a few times over between runs minutes apart. The
    rows are the round whose ratio is the median, every round's ratio printed beside it, with
    copying's own CPU per MB copied: what the servers spent during the tiered runs beyond the
    untiered runs' CPU per MB produced, over the bytes copied meanwhile."""
    tiered_config = {"remote.storage.enable": "true", "segment.bytes": str(sizes.segment),
                     "local.retention.bytes": str(sizes.segment)}
    runs: dict[bool, list[tuple[float, CpuSpan, float]]] = {False: [], True: []}  # (rate, span, bytes copied)
    for i in range(PRODUCE_ROUNDS):
        for tiers in ((False, True) if i % 2 == 0 else (True, False)):
            copied_before = _metrics(admin)["gateway_tier_bytes_copied_total"]
            rate, span = _produce(bs, admin, tiered_config if tiers else {}, sizes, seconds, servers)
            runs[tiers].append((rate, span, _metrics(admin)["gateway_tier_bytes_copied_total"] - copied_before))
    ratios = [t[0] / u[0] for u, t in zip(runs[False], runs[True], strict=True)]
    median = ratios.index(percentile(ratios, 0.5))

    def produced(run: tuple[float, CpuSpan, float]) -> float:
        return run[0] * run[1].wall * sizes.produce_record

    untiered_cpu = {n: sum(r[1].after[n] - r[1].before[n] for r in runs[False]) / sum(produced(r) for r in runs[False])
                    for n in runs[False][0][1].before}  # seconds per byte produced
    copied = sum(r[2] for r in runs[True])
    extra = {n: (sum(r[1].after[n] - r[1].before[n] - untiered_cpu[n] * produced(r) for r in runs[True]))
             / (copied / 1e6) * 1e6 for n in untiered_cpu} if copied else {}
    untiered_row = Row(f"produce, untiered topic, {name}", sizes.produce_record, runs[False][median][0],
                       cpu=f"the rate of the median round; CPU over all {PRODUCE_ROUNDS} runs, µs/MB "
                           + ", ".join(f"{n} {s_per_byte * 1e12:,.0f}" for n, s_per_byte in untiered_cpu.items()))
    tiered_row = Row(f"produce with copying running, {name}", sizes.produce_record, runs[True][median][0],
                     baseline=untiered_row.what, baseline_records_per_s=untiered_row.records_per_s,
                     cpu=f"the median of {PRODUCE_ROUNDS} interleaved rounds: " + " ".join(f"{r:.2f}x" for r in ratios)
                         + "; "
                         f"{copied / 1e6:.0f} MB copied meanwhile, copying's own CPU µs/MB copied "
                         + ", ".join(f"{n} {us:,.0f}" for n, us in extra.items()))
    return untiered_row, tiered_row


def _consume(bs: str, topic: str, count: int, servers: list[Server]) -> tuple[float, CpuSpan]:
    span = CpuSpan(servers)
    return kafka_consume(bs, topic, 1, count, span=span), span


def _produce(bs: str, admin: int, config: dict[str, str], sizes: Sizes, seconds: float,
             servers: list[Server]) -> tuple[float, CpuSpan]:
    topic = f"bench-tier-produce-{uuid.uuid4().hex[:6]}"
    create_kafka_topic(bs, topic, 1, config)
    span = CpuSpan(servers)
    rate, _ = kafka_produce(bs, topic, sizes.produce_record, seconds, acks="1", span=span)
    admin_json(admin, f"/admin/v2/topics/{topic}", "DELETE")  # its bytes leave Redis before the next measurement
    return rate, span


def _per_mb(span: CpuSpan, moved: float) -> str:
    return "µs/MB " + ", ".join(f"{name} {us:,.0f}" for name, us in span.per(moved / 1e6).items())


def _memory(redis_url: str, bs: str, admin: int, sizes: Sizes, untiered: Footprint, name: str) -> str:
    """Redis's memory once a topic of `sizes.memory_bytes` (copy lag 0, a tenth kept local) is
    produced and copied, beside the same bytes untiered, extrapolated from `untiered`."""
    topic = f"bench-tier-memory-{uuid.uuid4().hex[:6]}"
    local = sizes.memory_bytes // 10
    create_kafka_topic(bs, topic, 1, {"remote.storage.enable": "true", "segment.bytes": str(sizes.segment),
                                      "local.retention.bytes": str(local)})
    before = used_memory(redis_url)
    Progress.doing_else(f"producing {sizes.memory_bytes / 1e9:.1f} GB to a tiered topic, {local / 1e9:.2f} GB local")
    produce_count(bs, topic, sizes.record, max(1, sizes.memory_bytes // sizes.record))
    Progress.doing_else("waiting for the tiering role to copy and trim it")
    per_record = untiered.stored / max(1, sizes.topic_bytes // sizes.record)  # the same records, batched alike
    _settled(admin, topic, sizes.segment, per_record)
    Progress.doing_else("")
    after = used_memory(redis_url)
    tiered = _footprint(admin, topic, after - before, round(per_record * max(1, sizes.memory_bytes // sizes.record)))
    view = _tier(admin, topic)
    flat = untiered.scaled(tiered.stored)
    admin_json(admin, f"/admin/v2/topics/{topic}", "DELETE")
    gb = 1e9
    return "\n".join([
        f"Redis memory of a {tiered.stored / gb:.2f} GB topic tiered to the {name} with local.retention.bytes "
        f"{local / gb:.3f} GB, once copied and trimmed ({view['remote_bytes'] / gb:.2f} GB remote in "
        f"{view['remote_segments']} segments, {view['local_bytes'] / gb:.3f} GB of batches in Redis):",
        f"  tiered:   used_memory grew {tiered.used_growth / gb:.3f} GB (to {after / gb:.3f} GB), the topic's keys' "
        f"MEMORY USAGE {tiered.streams / gb:.3f} GB",
        f"  untiered, extrapolated from {untiered.stored / gb:.3f} GB measured in this run: used_memory grows "
        f"{flat.used_growth / gb:.3f} GB, MEMORY USAGE {flat.streams / gb:.3f} GB "
        f"(tiered: {tiered.used_growth / flat.used_growth:.3f}x and {tiered.streams / flat.streams:.3f}x of it)"])


async def raw_rows(store: ObjectStore, name: str, seconds: float) -> tuple[Row, Row]:
    """PUTs of SEGMENT bytes for `seconds`, then ranged GETs of SLICE bytes from what was written."""
    data = os.urandom(SEGMENT)
    keys: list[str] = []
    Progress.doing_else("")
    put_ms = await _timed(seconds, lambda: _put(store, keys, data))
    put = Row(f"raw PUT, {name}", SEGMENT, len(put_ms) / (sum(put_ms) / 1000),
              p50_ms=percentile(put_ms, 0.5), p99_ms=percentile(put_ms, 0.99))
    rng = random.Random(1)
    get_ms = await _timed(seconds, lambda: store.get_range(rng.choice(keys), rng.randrange(SEGMENT - SLICE), SLICE))
    get = Row(f"raw ranged GET, {name}", SLICE, len(get_ms) / (sum(get_ms) / 1000),
              p50_ms=percentile(get_ms, 0.5), p99_ms=percentile(get_ms, 0.99))
    Progress.doing_else(f"deleting {name}'s objects")
    for key in keys:
        await store.delete(key)
    return put, get


async def _put(store: ObjectStore, keys: list[str], data: bytes) -> None:
    key = f"bench/{len(keys):08d}.log"
    await store.put(key, data)
    keys.append(key)


async def _timed(seconds: float, call: Callable[[], Awaitable[object]]) -> list[float]:
    """Milliseconds of each `call()`, awaited one after another for `seconds` (at least once)."""
    latencies: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or not latencies:
        t0 = time.perf_counter()
        await call()
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies
