"""Memory is the budget: a Redis that evicts is refused, a full one refuses produce cleanly and
retriably while the control plane (offset commits, transaction ends, share acknowledgements) goes
on, and produce resumes by itself once memory is freed. Each test runs its own small Redis (a few
MB of maxmemory keeps fills short) with real Kafka clients."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import confluent_kafka as ck
import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.schema.errors import ErrorCode as KafkaError

from gateway.client import Client, StorageFull, StorageUnavailable
from gateway.config import MiB, memory_size
from gateway.formats.records import parse_header
from gateway.kafka.dispatch import ApiKey
from gateway.server.gateway import Gateway
from gateway.store import keys
from gateway.store.connection import RedisClient, connect
from gateway.store.embedded import EmbeddedCluster, EmbeddedRedis, free_port, redis_server_binary
from tests.conftest import (
    GatewayProcess,
    admin_url,
    eventually,
    kafka_bootstrap,
    native_url,
    running_gateway,
    test_config,
)
from tests.kafka_clients import create_topics_retried
from tests.kafka_wire import call
from tests.test_in_sync_replicas import _produce_seq
from tests.test_startup import serve

MAXMEMORY = 12 * MiB
MARK = 0.5  # produce stops near 6 MB: a quick fill, with room above it for the control plane
TIMEOUT = 60.0
VALUE = b"x" * 1000


@contextlib.contextmanager
def small_redis(tmp_path: Path, *, cluster: bool = False) -> Iterator[EmbeddedRedis | EmbeddedCluster]:
    server: EmbeddedRedis | EmbeddedCluster = (
        EmbeddedCluster(tmp_path / "cluster", maxmemory=MAXMEMORY) if cluster
        else EmbeddedRedis(tmp_path / "redis", maxmemory=MAXMEMORY))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def gateway_on(url: str, **overrides: object) -> AsyncIterator[Gateway]:
    async with running_gateway(test_config(url, redis_memory_high_watermark=MARK, **overrides)) as gw:
        yield gw


@contextlib.asynccontextmanager
async def raw(url: str) -> AsyncIterator[RedisClient]:
    r = connect(url)
    try:
        yield r
    finally:
        await r.aclose()


def refusing(gw: Gateway) -> str | None:
    assert gw.services is not None
    return gw.services.memory.reason()


async def sampled_refusing(gw: Gateway) -> str | None:
    """Produce refused as a fresh sample of Redis's memory says."""
    assert gw.services is not None
    if not refusing(gw):
        return None
    await gw.services.memory.sample()
    return refusing(gw)


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl"])
def test_an_evicting_redis_is_refused_at_start_in_one_line(tmp_path: Path, policy: str) -> None:
    with small_redis(tmp_path) as server:
        assert isinstance(server, EmbeddedRedis)
        with connect_sync(server.url) as r:
            r.config_set("maxmemory-policy", policy)
        code, lines = serve(tmp_path / "data", "--redis-url", server.url)
    assert code != 0
    assert lines == [f"gateway: Redis at 127.0.0.1:{server.port} has maxmemory-policy {policy}, which evicts keys "
                     "the gateway needs (acknowledged records among them): set it to noeviction (CONFIG SET "
                     "maxmemory-policy noeviction, and in its redis.conf) or use another Redis"]


@contextlib.contextmanager
def managed_redis(tmp_path: Path, policy: str) -> Iterator[str]:
    """A Redis as managed services run one: CONFIG renamed away (their clients cannot call it), so
    maxmemory and its policy can only be read from INFO memory."""
    port = free_port()
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--dir", str(tmp_path), "--maxmemory", str(MAXMEMORY), "--maxmemory-policy", policy,
                             "--rename-command", "CONFIG", "managed-config-only"], stdout=subprocess.DEVNULL)
    try:
        import redis

        r = redis.Redis(port=port)
        deadline = time.monotonic() + 15
        while True:
            try:
                r.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the Redis did not start"
                time.sleep(0.05)
        with pytest.raises(redis.ResponseError):
            r.config_get("maxmemory")
        r.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def test_without_config_the_policy_is_read_from_info_memory(tmp_path: Path) -> None:
    with managed_redis(tmp_path / "redis", "allkeys-lru") as url:
        code, lines = serve(tmp_path / "data", "--redis-url", url)
    assert code != 0
    assert len(lines) == 1 and "has maxmemory-policy allkeys-lru, which evicts keys" in lines[0]


async def test_without_config_a_noeviction_redis_is_served_and_its_budget_shown(tmp_path: Path) -> None:
    with managed_redis(tmp_path / "redis", "noeviction") as url:
        async with gateway_on(url) as gw:
            assert refusing(gw) is None
            async with await Client.connect(native_url(gw)) as client:
                producer = await client.create_producer("managed")
                assert (await producer.send(b"room enough")).offset == 0
            shown = f'gateway_redis_memory_max_bytes{{primary="{url.split("/")[2]}"}} '

            async def budget_shown() -> bool:  # once a sample (from INFO memory) has been taken
                async with aiohttp.ClientSession() as http, http.get(admin_url(gw) + "/metrics") as resp:
                    text = await resp.text()
                return any(float(line.removeprefix(shown)) == MAXMEMORY
                           for line in text.splitlines() if line.startswith(shown))

            await eventually(budget_shown, what="maxmemory from INFO memory in the metrics")


@contextlib.contextmanager
def connect_sync(url: str) -> Iterator[object]:
    import redis

    r = redis.Redis.from_url(url)
    try:
        yield r
    finally:
        r.close()


def test_memory_sizes_are_bytes_or_a_fraction_of_the_machine() -> None:
    assert memory_size("512mb") == 512 * MiB
    assert memory_size("1000") == 1000
    assert 0 < memory_size("0.25") < memory_size("0.5")
    for bad in ("0", "-1", "1.5", "lots", "0.5gb", "inf", ""):
        with pytest.raises(ValueError):
            memory_size(bad)


async def test_an_evicting_policy_set_while_running_stops_produce_until_set_back(tmp_path: Path) -> None:
    with small_redis(tmp_path) as server:
        async with gateway_on(server.url) as gw, raw(server.url) as r, \
                await Client.connect(native_url(gw)) as client:
            producer = await client.create_producer("evict", send_timeout=1.0)
            before = [await producer.send(b"a%d" % i) for i in range(3)]
            await r.config_set("maxmemory-policy", "allkeys-lru")
            await eventually(lambda: refusing(gw), what="the evicting policy noticed")
            with pytest.raises(StorageUnavailable) as refused:
                await producer.send(b"refused")
            assert refused.value.retriable
            code = await kafka_produce_error(kafka_bootstrap(gw), "evict")
            assert code == ck.KafkaError.KAFKA_STORAGE_ERROR
            await r.config_set("maxmemory-policy", "noeviction")
            await eventually(lambda: not refusing(gw), what="produce resumed")
            after = await producer.send(b"after")
            assert after.offset == before[-1].offset + 1  # the refused record took no offset
            consumer = await client.subscribe("evict", "check", initial_position="earliest")
            got = [(await consumer.receive()).value for _ in range(4)]
            assert got == [b"a0", b"a1", b"a2", b"after"]



async def test_a_batch_behind_one_refused_for_an_evicting_redis_is_refused_alike(tmp_path: Path) -> None:
    """An idempotent producer's batch pipelined behind one refused while Redis was evicting (nothing
    written) met produce resumed, and was refused OUT_OF_ORDER_SEQUENCE_NUMBER: librdkafka answers
    that by bumping its epoch and renumbering what it holds unacknowledged, records maybe stored
    among them. Kafka's failed log directory refuses every batch after alike (KAFKA_STORAGE_ERROR);
    so does the gateway the batch whose partition lacks exactly the one refused, and both, sent again
    in order, are stored once each (LogStore.hold)."""
    with small_redis(tmp_path) as server:
        async with gateway_on(server.url) as gw, raw(server.url) as r:
            port = gw.listeners["kafka"].port
            await asyncio.to_thread(create_topics_retried, kafka_bootstrap(gw), "t", seconds=TIMEOUT)
            await r.config_set("maxmemory-policy", "allkeys-lru")
            await eventually(lambda: refusing(gw), what="the evicting policy noticed")
            assert await _produce_seq(port, 0) == KafkaError.kafka_storage_error  # nothing written
            await r.config_set("maxmemory-policy", "noeviction")
            await eventually(lambda: not refusing(gw), what="produce resumed")
            assert await _produce_seq(port, 1) == KafkaError.kafka_storage_error  # behind it: not out of order
            assert await _produce_seq(port, 0) == KafkaError.none  # the producer's retries, in order
            assert await _produce_seq(port, 1) == KafkaError.none
            headers = [parse_header(f[b"b"]) for _, f in await r.xrange(keys.log("t", 0))]
    assert [h.base_sequence for h in headers if h.producer_id == 4242] == [0, 1]

async def kafka_produce_error(bs: str, topic: str, partition: int = 0) -> int:
    """The error one produce without retries gets (0 when it was stored). KAFKA_STORAGE_ERROR is
    retriable in Kafka's own clients (KafkaStorageException is an InvalidMetadataException, hence a
    RetriableException), and librdkafka retries it; its delivery report carries no retriable flag."""
    def run() -> int:
        p = ck.Producer({"bootstrap.servers": bs, "enable.idempotence": False, "retries": 0, "acks": "all"})
        errors: list[ck.KafkaError] = []
        p.produce(topic, VALUE, partition=partition, on_delivery=lambda err, _msg: errors.append(err))
        assert p.flush(TIMEOUT) == 0
        (err,) = errors
        if err is None:
            return 0
        return int(err.code())

    return await asyncio.to_thread(run)


@dataclass
class Filler:
    """An idempotent acks=all confluent-kafka producer producing 1 KB records to one partition in a
    thread until told to stop, keeping what was acknowledged at which offset. Refused produces it
    retries itself (KAFKA_STORAGE_ERROR is retriable), so it carries on once memory is freed."""

    bs: str
    topic: str
    partition: int = 0
    timeout_ms: int = 120_000  # how long it retries a record
    acked: dict[int, bytes] = field(default_factory=dict)
    failed: list[ck.KafkaError] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        p = ck.Producer({"bootstrap.servers": self.bs, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": self.timeout_ms, "queue.buffering.max.messages": 2000})

        def report(err: ck.KafkaError | None, msg: ck.Message) -> None:
            if err is not None:
                self.failed.append(err)
            else:
                self.acked[msg.offset()] = msg.value()

        i = 0
        while not self.stop.is_set():
            try:
                p.produce(self.topic, VALUE + b"%d" % i, partition=self.partition, on_delivery=report)
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        p.flush(20)

    async def finish(self) -> None:
        self.stop.set()
        assert self.thread is not None
        await asyncio.to_thread(self.thread.join, TIMEOUT)
        assert not self.failed, self.failed[:3]


def read_back(bs: str, topic: str, partition: int, start: int, end: int) -> dict[int, bytes]:
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": "read-back", "enable.auto.commit": False})
    out: dict[int, bytes] = {}
    deadline = time.monotonic() + TIMEOUT
    try:
        c.assign([ck.TopicPartition(topic, partition, start)])
        while len(out) < end - start and time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out[msg.offset()] = msg.value()
    finally:
        c.close()
    return out


def transactional(bs: str, tid: str, topic: str) -> ck.Producer:
    """A transactional producer with a transaction open and records in it (sent before the fill)."""
    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": tid})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, b"%s-%d" % (tid.encode(), i))
    assert p.flush(TIMEOUT) == 0
    return p


def group_consumer(bs: str, topic: str) -> ck.Consumer:
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": "fill-group", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    return c


def consume_and_commit(c: ck.Consumer, n: int) -> None:
    got = 0
    deadline = time.monotonic() + TIMEOUT
    while got < n:
        assert time.monotonic() < deadline, f"{got} records of {n}"
        msg = c.poll(1.0)
        if msg is not None and msg.error() is None:
            got += 1
    c.commit(asynchronous=False)  # raises KafkaException when refused


def share_ack(c: ck.ShareConsumer) -> int:
    """Poll until records come, accept them all and commit the acknowledgements; how many."""
    deadline = time.monotonic() + TIMEOUT
    while not (batch := [m for m in c.poll(1.0) if m.error() is None]):
        assert time.monotonic() < deadline, "no records for the share consumer"
    for m in batch:
        c.acknowledge(m, AcknowledgeType.ACCEPT)
    for tp in c.commit_sync(TIMEOUT) or []:
        assert tp.error is None, tp.error
    return len(batch)


async def run_fill(gw: Gateway, topic: str, partition: int, probe_partition: int | None = None) -> None:
    """Fill the partition's primary to the mark with a producer that keeps going; meanwhile the
    control plane works; DeleteRecords frees memory and the same producer carries on."""
    bs = kafka_bootstrap(gw)
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([ck.admin.NewTopic(t, 6) for t in (topic, "side")]).values():
        await asyncio.to_thread(f.result, TIMEOUT)
    entries = [ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)]
    (f,) = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, "fill-share",
                                                           incremental_configs=entries)]).values()
    await asyncio.to_thread(f.result, TIMEOUT)
    committer = await asyncio.to_thread(transactional, bs, "fill-commit", "side")
    aborter = await asyncio.to_thread(transactional, bs, "fill-abort", "side")
    sharer = ck.ShareConsumer({"bootstrap.servers": bs, "group.id": "fill-share",
                               "share.acknowledgement.mode": "explicit"})
    sharer.subscribe(["side"])
    grouped = group_consumer(bs, "side")
    filler = Filler(bs, topic, partition)
    filler.start()
    try:
        # a sample's word, not only the gateway's own estimate between samples (which counts bytes
        # sent, more than Redis stores, so the next sample may let produce resume)
        await eventually(lambda: sampled_refusing(gw), timeout=TIMEOUT, what="the fill reaching the high-water mark")
        assert await kafka_produce_error(bs, topic, partition) == ck.KafkaError.KAFKA_STORAGE_ERROR
        if probe_partition is not None:  # another primary's partition still takes records
            assert await kafka_produce_error(bs, topic, probe_partition) == 0
        # the control plane, with produce refused
        await asyncio.to_thread(committer.commit_transaction, TIMEOUT)
        await asyncio.to_thread(aborter.abort_transaction, TIMEOUT)
        await asyncio.to_thread(consume_and_commit, grouped, 5)
        assert await asyncio.to_thread(share_ack, sharer) > 0
        acked = dict(filler.acked)
        stored = await asyncio.to_thread(read_back, bs, topic, partition, 0, max(acked) + 1)
        assert {o: stored[o] for o in acked} == acked  # every acknowledged record, at its offset
        filler.stop.set()  # what it holds refused now it sends once memory is freed, unrestarted
        resumed = max(acked)
        (f,) = admin.delete_records([ck.TopicPartition(topic, partition, resumed + 1)]).values()
        await asyncio.to_thread(f.result, TIMEOUT)
        await eventually(lambda: not refusing(gw), timeout=TIMEOUT, what="produce resuming after DeleteRecords")
    finally:
        await filler.finish()
        await asyncio.to_thread(grouped.close)
        await asyncio.to_thread(sharer.close)
    assert max(filler.acked) > resumed, "the producer carried on after DeleteRecords"
    offsets = sorted(filler.acked)
    assert offsets == list(range(offsets[0], offsets[-1] + 1))  # no gap, no offset reused
    tail = await asyncio.to_thread(read_back, bs, topic, partition, resumed + 1, offsets[-1] + 1)
    assert tail == {o: v for o, v in filler.acked.items() if o > resumed}


@pytest.mark.slow
async def test_a_full_redis_refuses_produce_while_the_control_plane_goes_on(tmp_path: Path) -> None:
    with small_redis(tmp_path) as server:
        async with gateway_on(server.url) as gw:
            await run_fill(gw, "fill", 0)


@pytest.mark.slow
async def test_one_full_primary_of_a_cluster_refuses_its_partitions_alone(tmp_path: Path) -> None:
    with small_redis(tmp_path, cluster=True) as server:
        async with gateway_on(server.url) as gw:
            assert gw.services is not None
            where = gw.services.memory.primary_of
            other = next(p for p in range(1, 6) if where("fill", p) != where("fill", 0))
            await run_fill(gw, "fill", 0, probe_partition=other)


async def test_native_sends_get_storage_full_and_delayed_ones_too(tmp_path: Path) -> None:
    with small_redis(tmp_path) as server:
        async with gateway_on(server.url) as gw, await Client.connect(native_url(gw)) as client:
            producer = await client.create_producer("native-fill", send_timeout=1.0)  # retries StorageFull so long
            while not refusing(gw):
                try:
                    await producer.send(VALUE * 32)
                except StorageFull:
                    break
            await eventually(lambda: sampled_refusing(gw), what="the mark")
            sends = (lambda: producer.send(b"x"), lambda: producer.send(b"x", deliver_after=60.0),
                     lambda: producer.send_watermark(1_000))
            for send in sends:
                with pytest.raises(StorageFull) as refused:
                    await send()
                assert refused.value.retriable
            await shows_memory(gw, "native-fill")


@pytest.mark.parametrize("version", [1, 4])
async def test_describe_log_dirs_shows_partition_sizes_and_the_memory_budget(tmp_path: Path, version: int) -> None:
    with small_redis(tmp_path) as server:
        async with gateway_on(server.url) as gw, await Client.connect(native_url(gw)) as client:
            producer = await client.create_producer("sized")
            for _ in range(50):
                await producer.send(VALUE)
            assert gw.services is not None
            await gw.services.memory.sample()
            conn = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
            try:
                every = await call(conn, ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": None})
                some = await call(conn, ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": [
                    {"topic": "sized", "partitions": [0, 7]}, {"topic": "absent", "partitions": [0]}]})
            finally:
                conn[1].close()
    for resp in (every, some):
        (result,) = resp.results
        assert result.error_code == 0 and result.log_dir == server.url
        (topic,) = result.topics  # "absent" and partition 7 are hosted nowhere: left out, as Kafka does
        assert topic.name == "sized" and [p.partition_index for p in topic.partitions] == [0]
        assert 50 * len(VALUE) < topic.partitions[0].partition_size < 4 * 50 * len(VALUE)
        if version >= 4:
            assert result.total_bytes == MAXMEMORY and 0 < result.usable_bytes < MAXMEMORY


async def shows_memory(gw: Gateway, topic: str) -> None:
    """While produce is refused: /health is degraded (still 200), the metrics say so per primary, and
    the topic's partition holds the bytes the fill put there."""
    async with aiohttp.ClientSession() as http:
        async with http.get(admin_url(gw) + "/health") as resp:
            health = await resp.json()
            assert resp.status == 200 and health["status"] == "degraded" and "high-water mark" in health["writes_refused"]
        async with http.get(admin_url(gw) + "/metrics") as resp:
            metrics = await resp.text()
        async with http.get(admin_url(gw) + f"/admin/v2/topics/{topic}") as resp:
            described = await resp.json()
    assert "gateway_redis_memory_produce_refused 1.0" in metrics
    assert "gateway_redis_memory_max_bytes{primary=" in metrics
    assert described["partitions"][0]["bytes"] > MAXMEMORY * MARK / 2  # most of what filled Redis


@pytest.mark.slow
def test_a_gateway_killed_while_redis_is_full_loses_nothing(gateway_process: GatewayProcess) -> None:
    gateway_process.args += ["--redis-maxmemory", str(MAXMEMORY), "--redis-memory-high-watermark", str(MARK)]
    gateway_process.start()
    bs = gateway_process.kafka_bootstrap
    filler = Filler(bs, "killed", timeout_ms=3_000)
    filler.start()
    asyncio.run(wait_refused(bs))
    gateway_process.kill()
    filler.stop.set()
    assert filler.thread is not None
    filler.thread.join(TIMEOUT)  # what was not acknowledged times out in the producer
    acked = dict(filler.acked)
    gateway_process.start()
    stored = read_back(bs, "killed", 0, 0, max(acked) + 1)
    assert {o: stored[o] for o in acked} == acked


async def wait_refused(bs: str) -> None:
    """Until a produce without retries is refused with KAFKA_STORAGE_ERROR."""
    async def refused() -> bool:
        return await kafka_produce_error(bs, "killed") == ck.KafkaError.KAFKA_STORAGE_ERROR

    await eventually(refused, timeout=TIMEOUT, what="the gateway refusing produce")
