"""`gateway bench --tier`: what the object stores themselves give, the denominators of tiered storage.

For each backend (the local directory in a temporary directory; S3 on s3s-fs, a real S3-compatible
server on loopback that ./dev builds; and the store `--object-store` names, if any): raw PUTs of
segment-sized objects and raw ranged GETs of a Fetch's slice of them, through the same
`ObjectStore` the tiering code uses, one request at a time as a partition's copier and a remote
read issue them. Copy MB/s is to be read against the raw PUT row of the same store, remote fetch
MB/s against its raw ranged GET row: `tiered_rows` is where those rows go, beside these."""

from __future__ import annotations

import contextlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from gateway.bench.common import Progress, Row, percentile, run_client
from gateway.bench.s3_server import BINARY, S3Server
from gateway.store.objects import ObjectStore, ObjectStoreUnavailable
from gateway.store.objects.local import LocalDirStore
from gateway.store.objects.open import open_object_store
from gateway.store.objects.s3 import S3Store

SEGMENT = 8 * 2**20  # a segment object of the size a copier writes
SLICE = 2**20  # what a remote Fetch reads of it at a time (fetch.max.bytes of one partition)
NOTE = ("raw object-store baselines: PUT of whole 8 MiB segments, ranged GET of 1 MiB slices at random offsets, "
        "one request at a time; size is bytes per request, records/s requests per second")


def measure_tier(redis_url: str, seconds: float, object_store: str | None = None) -> list[Row]:
    """The raw rows of every backend, each followed by its tiered rows. Without s3s-fs built (a
    package installed by pip rather than ./dev), the S3 rows are those of `object_store` alone."""
    if object_store:
        try:
            open_object_store(object_store)
        except (ValueError, ObjectStoreUnavailable) as exc:
            raise SystemExit(f"--object-store: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="gateway-bench-tier-") as tmp, contextlib.ExitStack() as stack:
        backends: list[tuple[str, Callable[[], ObjectStore]]] = [("local dir", lambda: LocalDirStore(Path(tmp) / "tier"))]
        if BINARY.is_file():
            Progress.doing_else("starting s3s-fs")
            server = stack.enter_context(S3Server(Path(tmp) / "s3"))
            backends.append(("S3 (s3s-fs)", lambda: S3Store(server.bucket, "bench", endpoint=server.endpoint,
                                                            access_key_id=server.access_key,
                                                            secret_access_key=server.secret_key)))
        else:
            print(f"s3s-fs is not built ({BINARY}; ./dev gateway bench --tier builds it): measuring without it",
                  file=sys.stderr)
        if object_store:
            backends.append(("", lambda: open_object_store(object_store)))  # named by its description
        return run_client(_measure(redis_url, seconds, backends))


async def _measure(redis_url: str, seconds: float,
                   backends: list[tuple[str, Callable[[], ObjectStore]]]) -> list[Row]:
    rows: list[Row] = []
    for name, opened in backends:
        store = opened()
        try:
            name = store.description if name == "" else name
            put, get = await raw_rows(store, name, seconds)
            rows += [put, get, *await tiered_rows(redis_url, store, name, put, get, seconds)]
        finally:
            await store.close()
    return rows


async def tiered_rows(redis_url: str, store: ObjectStore, name: str, raw_put: Row, raw_get: Row,
                      seconds: float) -> list[Row]:
    """Tiered storage's own figures on `store`, to be read against these raw ones: copy MB/s against
    `raw_put`, remote fetch MB/s against `raw_get` (a Row with baseline=raw_put.what and
    baseline_records_per_s in requests of the same size). None yet: the copier and remote reads
    add theirs here."""
    return []


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
