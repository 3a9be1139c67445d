"""What every benchmark shares: a row and its table, timing, the raw-Redis baselines, and the Redis
and gateway processes measured.

The benchmarks import this module and nothing of each other. Every raw Redis client of the
baselines comes from `raw_client`, the one place that knows how to reach Redis directly.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TextIO, TypeVar

import redis
from redis.typing import EncodableT, FieldT

from gateway.store.connection import CLUSTER_SCHEMES, is_cluster_url
from gateway.store.embedded import EmbeddedCluster, EmbeddedRedis, free_port, port_free

T = TypeVar("T")


# -- rows and their table --------------------------------------------------------------------------


@dataclass
class Row:
    what: str
    size: int
    records_per_s: float
    baseline: str = ""
    baseline_records_per_s: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    cpu: str = ""  # more of where the time went: the client's CPU, a comparison
    cpu_us: dict[str, float] = field(default_factory=dict)  # each server's CPU µs per record (`CpuSpan`)

    def __post_init__(self) -> None:
        if Progress.active is not None:  # a row is made when its measurement ends
            Progress.active.row_done(self)

    @property
    def mb_per_s(self) -> float:
        return self.records_per_s * self.size / 1e6

    @property
    def ratio(self) -> str:
        return f"{self.records_per_s / self.baseline_records_per_s:.2f}x" if self.baseline_records_per_s else ""


_COLUMNS = (("measurement", "<"), ("size", ">"), ("records/s", ">"), ("MB/s", ">"), ("p50 ms", ">"),
            ("p99 ms", ">"), ("cpu µs/rec", ">"), ("vs baseline", "<"))


def print_table(rows: list[Row]) -> None:
    """The rows, each column as wide as its widest cell; a row's CPU split on a line of its own.
    `cpu µs/rec` is the servers' CPU per record (per transaction in a transaction row) summed."""
    cells = [[r.what, str(r.size), f"{r.records_per_s:,.0f}", f"{r.mb_per_s:.1f}",
              "" if r.p50_ms is None else f"{r.p50_ms:.2f}", "" if r.p99_ms is None else f"{r.p99_ms:.2f}",
              f"{sum(r.cpu_us.values()):.2f}" if r.cpu_us else "",
              f"{r.ratio} of {r.baseline}" if r.baseline else ""] for r in rows]
    widths = [max([len(name), *(len(c[i]) for c in cells)]) for i, (name, _) in enumerate(_COLUMNS)]

    def line(values: list[str]) -> str:
        padded = (f"{v:{align}{w}}" for v, (_, align), w in zip(values, _COLUMNS, widths, strict=True))
        return "  ".join(padded).rstrip()

    head = line([name for name, _ in _COLUMNS])
    print(head)
    print("-" * len(head))
    for r, c in zip(rows, cells, strict=True):
        print(line(c))
        split = ", ".join(f"{name} {us:.2f}" for name, us in r.cpu_us.items()) if len(r.cpu_us) > 1 else ""
        if r.cpu or split:
            print(f"{'':{widths[0]}}  cpu: {'; '.join(filter(None, (r.cpu, split and f'µs/rec {split}')))}")


CLEAR_LINE = "\r\033[K"  # back to the line's start, and erase it


class Progress:
    """What `gateway bench` shows while it measures, on stderr (stdout keeps the table alone): on a
    terminal a bar for the row being measured, filling over `seconds` (then a block moving back and
    forth while it runs longer), and a line for each row measured; elsewhere those lines alone."""

    active: ClassVar[Progress | None] = None
    WIDTH = 24

    def __init__(self, seconds: float, stream: TextIO | None = None) -> None:
        self.seconds = max(seconds, 0.1)
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.rows = 0
        self.since = time.monotonic()
        self.doing = ""  # set while not measuring (starting a process): no expected time then
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._drawer = threading.Thread(target=self._draw, name="bench progress", daemon=True)

    def __enter__(self) -> Progress:
        Progress.active = self
        if self.tty:
            self._drawer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        Progress.active = None
        self._stop.set()
        if self.tty:
            self._drawer.join()
            self._write(CLEAR_LINE)

    @classmethod
    def doing_else(cls, what: str) -> None:
        """Say what runs between measurements (empty: measuring again); the next row's time starts now."""
        if cls.active is not None:
            with cls.active._lock:
                cls.active.doing, cls.active.since = what, time.monotonic()

    def row_done(self, row: Row) -> None:
        with self._lock:
            self.rows += 1
            took = time.monotonic() - self.since
            self.since = time.monotonic()
            size = f", {row.size} B" if row.size else ""
            clear = CLEAR_LINE if self.tty else ""
            self._write(f"{clear}measured {row.what.strip()}{size} in {took:.1f} s\n")

    def bar(self, elapsed: float) -> str:
        if elapsed <= self.seconds and not self.doing:
            filled = int(self.WIDTH * elapsed / self.seconds)
            inside = "#" * filled + "-" * (self.WIDTH - filled)
        else:  # longer than one measurement's time: still working, for how long no one knows
            span = self.WIDTH - 3
            at = int(elapsed * 8) % (2 * span)
            at = at if at < span else 2 * span - at
            inside = "-" * at + "###" + "-" * (span - at)
        return f"[{inside}] {elapsed:5.1f} s  {self.doing or f'measuring row {self.rows + 1}'}"

    def _draw(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                self._write("\r" + self.bar(time.monotonic() - self.since))

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


# -- timing ----------------------------------------------------------------------------------------


def best_of(runs: int, measure: Callable[[], float]) -> float:
    """The best of a few runs: other work on the machine only ever slows a run down."""
    return max(measure() for _ in range(runs))


def timed_loop(seconds: float, step: Callable[[], int], span: CpuSpan | None = None) -> float:
    """Run `step` (returning how many records it did) for `seconds`; records per second. `span`
    reads the servers' CPU when the clock starts and when it stops."""
    done = 0
    span = span or CpuSpan()
    span.start()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += step()
    elapsed = time.perf_counter() - start
    span.stop()
    return done / elapsed


def timed_steps(seconds: float, step: Callable[[], int], span: CpuSpan | None = None) -> tuple[float, list[float]]:
    """`timed_loop`, with the milliseconds of each step (one round trip each, for latencies)."""
    latencies: list[float] = []

    def timed() -> int:
        t0 = time.perf_counter()
        done = step()
        latencies.append((time.perf_counter() - t0) * 1000)
        return done

    return timed_loop(seconds, timed, span), latencies


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run_client(coro: Coroutine[Any, Any, T]) -> T:
    """Run a client coroutine on uvloop when it is there, as the gateway does."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


# -- raw Redis baselines ---------------------------------------------------------------------------


def raw_client(url: str) -> redis.Redis | redis.RedisCluster:
    """A plain client of the same Redis (or cluster) the gateway uses: every baseline's only way in."""
    if is_cluster_url(url):
        scheme, _, rest = url.partition("://")
        return redis.RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme]}://{rest}")
    return redis.Redis.from_url(url)


def streams(kind: str, partitions: int) -> list[str]:
    """One stream per partition, each with its own hash tag: on a cluster they spread as partitions do."""
    run = uuid.uuid4().hex
    return [f"bench:{kind}:{{{run}:{p}}}" for p in range(partitions)]


def _pipelined_xadd(url: str, kind: str, fields: dict[FieldT, EncodableT], per_trip: int, records_per_entry: int,
                    seconds: float, partitions: int, replicas: int = 0,
                    span: CpuSpan | None = None) -> tuple[float, list[float]]:
    """Records per second appended as `per_trip` entries of `fields` per round trip, round-robin
    over one stream per partition, each round trip ending in a WAIT for `replicas` when there are
    any; and each round trip's milliseconds."""
    r = raw_client(url)
    keys = streams(kind, partitions)

    def step() -> int:
        pipe = r.pipeline(transaction=False)
        for i in range(per_trip):
            pipe.xadd(keys[i % partitions], fields)
        if replicas:
            pipe.execute_command("WAIT", replicas, 5000)
        pipe.execute()
        return per_trip * records_per_entry

    try:
        return timed_steps(seconds, step, span)
    finally:
        for key in keys:
            r.delete(key)
        r.close()


def raw_xadd_per_record(url: str, size: int, seconds: float, pipeline: int = 500, partitions: int = 1,
                        span: CpuSpan | None = None) -> float:
    """One entry per record, `pipeline` of them per round trip."""
    return _pipelined_xadd(url, "raw", {"v": os.urandom(size)}, pipeline, 1, seconds, partitions, span=span)[0]


def raw_xadd_blobs(url: str, size: int, seconds: float, per_blob: int = 500, pipeline: int = 8,
                   partitions: int = 1, span: CpuSpan | None = None) -> float:
    """One entry per `per_blob` records: the ceiling of a one-entry-per-batch layout."""
    return _pipelined_xadd(url, "blob", {"b": os.urandom(size * per_blob)}, pipeline, per_blob, seconds,
                           partitions, span=span)[0]


def raw_xadd_waited(url: str, size: int, seconds: float, replicas: int, pipeline: int = 100,
                    partitions: int = 1, span: CpuSpan | None = None) -> tuple[float, list[float]]:
    """`pipeline` XADDs of one record each per round trip, followed (with `replicas`) by a WAIT for
    that many replicas: acks=all's cost in raw Redis. Records per second, and each round trip's ms."""
    return _pipelined_xadd(url, "waited", {"v": os.urandom(size)}, pipeline, 1, seconds, partitions, replicas,
                           span)


def raw_xrange_blobs(url: str, size: int, seconds: float, per_blob: int = 500, span: CpuSpan | None = None) -> float:
    """Reading back one-entry-per-batch blobs with XRANGE: the consume ceiling."""
    r = raw_client(url)
    key = f"bench:read:{uuid.uuid4().hex}"
    blob = os.urandom(size * per_blob)
    pipe = r.pipeline(transaction=False)
    for _ in range(200):
        pipe.xadd(key, {"b": blob})
    pipe.execute()

    def step() -> int:
        entries = r.xrange(key, count=50)
        return len(entries or ()) * per_blob

    try:
        return timed_loop(seconds, step, span)
    finally:
        r.delete(key)
        r.close()


def raw_queue(url: str, size: int, count: int, span: CpuSpan | None = None, per_trip: int = 500) -> float:
    """XREADGROUP of `per_trip` entries then XACK of their ids, until `count` records were taken;
    `span` measures the servers' CPU over the same interval."""
    r = raw_client(url)
    (key,) = streams("queue", 1)
    value = os.urandom(size)
    try:
        for i in range(0, count, per_trip):
            pipe = r.pipeline(transaction=False)
            for _ in range(min(per_trip, count - i)):
                pipe.xadd(key, {"v": value})
            pipe.execute()
        r.xgroup_create(key, "g", id="0")
        got = 0
        if span is not None:
            span.start()
        start = time.perf_counter()
        while got < count:
            reply: Any = r.xreadgroup("g", "c", {key: ">"}, count=per_trip)
            ids = [entry_id for _, entries in reply for entry_id, _ in entries]
            r.xack(key, "g", *ids)
            got += len(ids)
        elapsed = time.perf_counter() - start
        if span is not None:
            span.stop()
        return got / elapsed
    finally:
        r.delete(key)
        r.close()


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a live process (0 for one gone meanwhile), with those of the
    children it has waited for: Redis's AOF rewrites and snapshots run in processes it forks and
    reaps, and their CPU is what Redis's persistence costs, as a Kafka broker's log work is its own
    threads'."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    """The processes `pid` started: a `--workers` supervisor's workers, a Redis's rewrite in progress."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


@dataclass(frozen=True)
class Server:
    """A server process whose CPU a measurement counts, under `name` (processes may share one: a
    cluster's primaries); `tree`: with the processes it started, a `--workers` supervisor's workers."""

    name: str
    pid: int
    tree: bool = False


def redis_servers(url: str) -> list[Server]:
    """The primaries of the Redis at `url` as servers, found by INFO's process_id; one not on this
    machine (no redis-server of that pid here) cannot be read from /proc, and is left out with a line
    saying so on stderr."""
    r = raw_client(url)
    try:
        if isinstance(r, redis.RedisCluster):
            nodes = list(r.info("server", target_nodes=redis.RedisCluster.PRIMARIES).values())
        else:
            nodes = [r.info("server")]
    finally:
        r.close()
    found = []
    for info in nodes:
        pid = int(info["process_id"])
        try:
            local = Path(f"/proc/{pid}/comm").read_text().strip() == "redis-server"
        except OSError:
            local = False
        if local:
            found.append(Server("redis", pid, tree=True))  # a rewrite under way at the start is counted from there
        else:
            print(f"Redis at port {info.get('tcp_port')} runs on another machine: its CPU is not counted",
                  file=sys.stderr)
    return found


class CpuSpan:
    """The CPU seconds each named server spends over one measured interval: utime+stime of every
    thread of its processes, read from /proc/PID/stat when the clock starts and when it stops (in
    clock ticks, 10 ms: a figure wants an interval of seconds). It travels to a client process and
    back (pickled); CLOCK_MONOTONIC is the machine's, so the spans of clients that ran at once join
    (`union`)."""

    def __init__(self, servers: Sequence[Server] = ()) -> None:
        self.servers = list(servers)
        self.before: dict[str, float] = {}
        self.after: dict[str, float] = {}
        self.started = self.stopped = 0.0
        self._pids: list[tuple[str, int]] = []

    def _read(self) -> dict[str, float]:
        seconds = dict.fromkeys((s.name for s in self.servers), 0.0)
        for name, pid in self._pids:
            seconds[name] += _cpu_seconds(pid)
        return seconds

    def start(self) -> None:
        self._pids = [(s.name, pid) for s in self.servers for pid in ((s.pid, *_children(s.pid)) if s.tree else (s.pid,))]
        self.before, self.started = self._read(), time.monotonic()

    def stop(self) -> None:
        self.stopped = time.monotonic()
        self.after = self._read()

    @property
    def wall(self) -> float:
        return self.stopped - self.started

    def per_record(self, rate: float) -> dict[str, float]:
        """Each server's CPU µs per record (or transaction) at `rate` per second over the interval."""
        return self.per(rate * self.wall)

    def per(self, done: float) -> dict[str, float]:
        """Each server's CPU µs per one of the `done` records (or transactions) of the interval."""
        return {name: (self.after[name] - self.before[name]) / done * 1e6 for name in self.before} if done else {}

    @staticmethod
    def union(spans: Sequence[CpuSpan]) -> CpuSpan:
        """The interval from the first span's start to the last one's stop, with the CPU spent in it."""
        first, last = min(spans, key=lambda s: s.started), max(spans, key=lambda s: s.stopped)
        joined = CpuSpan(first.servers)
        joined.before, joined.started, joined.after, joined.stopped = (first.before, first.started,
                                                                       last.after, last.stopped)
        return joined


def client_cpu() -> float:
    """CPU seconds so far of this process (a client) and the programs it ran and waited for (kcat)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def best_run(runs: list[tuple[float, CpuSpan]]) -> tuple[float, dict[str, float]]:
    """The best of a few runs' rates (other work on the machine only ever slows a run down), and
    each server's CPU µs per record in that run."""
    rate, span = max(runs, key=lambda run: run[0])
    return rate, span.per_record(rate)


def best_spanned(runs: int, servers: Sequence[Server], measure: Callable[[CpuSpan], float],
                 ) -> tuple[float, dict[str, float]]:
    """`best_run` of `runs` runs of `measure`, each given a span of `servers`."""
    spans = [CpuSpan(servers) for _ in range(runs)]
    return best_run([(measure(span), span) for span in spans])


# -- the processes measured ------------------------------------------------------------------------


@contextmanager
def bench_redis(redis_url: str | None, cluster: bool) -> Iterator[str]:
    """The Redis to measure on: `redis_url`, else an embedded one in a temporary directory (a local
    three-primary Redis Cluster with `cluster`), stopped afterwards."""
    if redis_url:
        yield redis_url
        return
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
        embedded = EmbeddedCluster(Path(tmp) / "cluster") if cluster else EmbeddedRedis(Path(tmp) / "redis")
        Progress.doing_else("starting Redis Cluster" if cluster else "starting redis-server")
        embedded.start()
        Progress.doing_else("")
        try:
            yield embedded.url
        finally:
            embedded.stop()


@contextmanager
def with_replica(redis_url: str) -> Iterator[None]:
    """Redis at `redis_url` with a replica online: one started here for an embedded loopback Redis
    (stopped afterwards), else the replicas it has already (none: an error saying so)."""
    r = raw_client(redis_url)
    try:
        if int(r.info("replication").get("connected_slaves", 0)):
            yield
            return
        where = urllib.parse.urlparse(redis_url)
        if is_cluster_url(redis_url) or where.hostname not in ("127.0.0.1", "localhost") or not where.port:
            raise SystemExit(f"error: {redis_url} has no replica: give it one to measure acks=all")
        with tempfile.TemporaryDirectory(prefix="gateway-bench-replica-") as tmp:
            Progress.doing_else("starting a replica")
            r.config_set("repl-diskless-sync-delay", 0)  # the full sync at once, not after 5 s
            replica = EmbeddedRedis(Path(tmp) / "replica", replica_of=where.port)
            replica.start()
            try:
                deadline = time.monotonic() + 60
                while not int(r.info("replication").get("connected_slaves", 0)):
                    if time.monotonic() > deadline:
                        raise SystemExit("error: the replica did not come online within 60 s")
                    time.sleep(0.1)
                Progress.doing_else("")
                yield
            finally:
                replica.stop()
    finally:
        r.close()


def free_ports(count: int) -> int:
    """The first of `count` consecutive free ports: a `gateway serve --workers` takes its port + index."""
    for _ in range(100):
        base = free_port()
        if base + count <= 65536 and all(port_free(base + i) for i in range(1, count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports found")


@contextmanager
def running_gateway(redis_url: str, workers: int = 1, registry: bool = False, args: Sequence[str] = (),
                    env: Mapping[str, str] | None = None) -> Iterator[dict[str, int]]:
    """A gateway process, as users run it, on free ports: its `kafka`, `native` and `admin` ports
    (and `registry`'s, when asked for) and its `pid`. With `workers` > 1, `gateway serve --workers`:
    the ports are worker 0's (the others follow them), the pid the supervisor's (`gateway_servers`
    counts its workers with it). `args`: more flags of `gateway serve`; `env`: more variables."""
    ports = {"kafka": free_ports(workers), "native": free_ports(workers), "admin": free_port()}
    if registry:
        ports["registry"] = free_port()
    Progress.doing_else("starting a gateway" if workers == 1 else f"starting a gateway of {workers} workers")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--redis-url", redis_url, "--log-level", "WARNING",
         "--kafka-port", str(ports["kafka"]), "--native-port", str(ports["native"]),
         "--admin-port", str(ports["admin"]), "--workers", str(workers),
         # a registry only when asked for: its fixed default port may be taken by the gateway the user
         # runs beside
         "--schema-registry-port", str(ports.get("registry", 0)), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    said: list[str] = []
    for line in proc.stdout:
        if "listening" in line:
            break
        said.append(line)
    else:
        raise RuntimeError("the gateway did not start: " + "".join(said[-5:]).strip())
    Progress.doing_else("")
    try:
        yield {**ports, "pid": proc.pid}
    finally:
        proc.send_signal(2)
        proc.wait(30)


def gateway_servers(gateways: list[dict[str, int]], redis_url: str) -> list[Server]:
    """The processes of `running_gateway`s (with their workers) and of their Redis primaries."""
    return [*(Server("gateway", g["pid"], tree=True) for g in gateways), *redis_servers(redis_url)]


@contextmanager
def running_gateways(redis_url: str, count: int, workers: int = 1) -> Iterator[list[dict[str, int]]]:
    """`count` gateway processes over one Redis, each on its own ports (and of `workers` workers)."""
    with ExitStack() as stack:
        yield [stack.enter_context(running_gateway(redis_url, workers)) for _ in range(count)]


def admin_json(admin_port: int, path: str, method: str = "GET", body: object = None) -> Any:
    """One call of the gateway's admin API, as a script makes it: its JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{admin_port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def produce_count(bootstrap: str, topic: str, size: int, count: int, conf: dict[str, object] | None = None) -> None:
    """`count` records of `size` random bytes to partition 0 with confluent-kafka (acks=1, linger.ms
    5 unless `conf` says otherwise), all delivered before it returns."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, **(conf or {})})
    value = os.urandom(size)
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                p.poll(0.01)
        p.poll(0)
    if p.flush(120):
        raise RuntimeError(f"records to {topic} left unsent")


def create_topic(admin_port: int, topic: str, partitions: int) -> None:
    """A topic made through the admin API, as an operator would."""
    body = json.dumps({"name": topic, "partitions": partitions}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{admin_port}/admin/v2/topics", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).close()


def kafka_produce(bootstrap: str, topic: str, size: int, seconds: float, acks: str = "all",
                  keys: list[bytes] | None = None, span: CpuSpan | None = None,
                  config: dict[str, object] | None = None) -> tuple[float, int]:
    """Records per second produced with confluent-kafka (acks=all unless told, `config` added), and
    how many were sent; with `keys`, the records take them in turn; `span` over the timed part."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, **(config or {})})
    value = os.urandom(size)
    sent = 0
    span = span or CpuSpan()
    span.start()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i in range(1000):
            while True:
                try:
                    p.produce(topic, value, keys[(sent + i) % len(keys)] if keys else None)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    p.poll(0.01)
        sent += 1000
        p.poll(0)
    p.flush(60)
    elapsed = time.perf_counter() - start
    span.stop()
    return sent / elapsed, sent


def delete_kafka_topic(bootstrap: str, topic: str) -> None:
    """A topic deleted with a Kafka admin client: the next rows start with the broker as small as
    this one's did (a Redis holding gigabytes more forks and rewrites more for each appended byte)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics([topic]).values():
        f.result(30)


def create_kafka_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    """A topic made with a Kafka admin client, as a Kafka user would."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    for f in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})]).values():
        f.result(30)


PER_TXN = 10  # records in each benchmark transaction
SIZE = 100  # bytes of each of them

def kafka_consume(bootstrap: str, topic: str, partitions: int, expected: int, conf: dict[str, object] | None = None,
                  span: CpuSpan | None = None) -> float:
    """The confluent-kafka Python consumer with its default fetch settings (or `conf`), from the
    start; `span` over the timed part."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, **(conf or {})})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    span = span or CpuSpan()
    span.start()
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < expected and time.monotonic() < deadline:
        msgs = c.consume(min(10000, expected - got), 1.0)  # no more than are left: the call ends once they came
        got += sum(1 for m in msgs if m.error() is None)
    elapsed = time.perf_counter() - start
    span.stop()
    c.close()
    return got / elapsed

def kafka_transactions(bootstrap: str, topic: str, partitions: int, per_txn: int, size: int,
                       seconds: float, span: CpuSpan | None = None,
                       ready: Callable[[], object] = lambda: None) -> tuple[float, list[float]]:
    """Committed transactions per second with confluent-kafka, each touching every partition;
    `span` over the timed part; `ready` is called once the producer is initialised, before the
    clock starts (a barrier, so that no producer's start-up falls in another's timed part), and
    again when the clock has stopped."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "linger.ms": 0})
    p.init_transactions(30)
    ready()
    value = os.urandom(size)
    latencies: list[float] = []

    def step() -> int:
        t0 = time.perf_counter()
        p.begin_transaction()
        for i in range(per_txn):
            p.produce(topic, value=value, partition=i % partitions)
        p.commit_transaction(30)
        latencies.append((time.perf_counter() - t0) * 1000)
        return 1

    rate = timed_loop(seconds, step, span)
    ready()
    return rate, latencies
