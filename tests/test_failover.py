"""A Redis primary's failover under a gateway found through Sentinel (`redis+sentinel://`), and on a
Redis Cluster with replicas: what acks=all with min.insync.replicas=2 promises is kept, what acks=1
does not promise is counted, and the service resumes on the promoted replica without a restart.

The suite starts the servers itself (Debian's redis-server and redis-sentinel on free ports): a
primary, one replica and three Sentinels that vote a failover after half a second of silence. A
SIGKILLed primary comes back as a replica of the promoted one, as an operator would bring it back:
until it does, the new primary has no replica and a min.insync.replicas=2 topic rightly refuses
acks=all produces (NOT_ENOUGH_REPLICAS, which the producer retries).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
import redis as redis_sync
from kio.schema.errors import ErrorCode as KafkaError
from redis.asyncio.sentinel import MasterNotFoundError

from gateway.client import Client
from gateway.errors import GatewayError
from gateway.kafka.dispatch import ApiKey
from gateway.server.gateway import Gateway
from gateway.store import Store, keys
from gateway.store.connection import SentinelRedis, SentinelUrl, connect
from gateway.store.embedded import EmbeddedCluster, EmbeddedRedis, die_with_parent, free_port
from gateway.store.persistence import warn_restart_loss
from tests.conftest import eventually, kafka_bootstrap, native_url, running_gateway, test_config
from tests.kafka_wire import call
from tests.test_acks_all import _create, _produce
from tests.test_kafka_txn_restart import transform
from tests.test_startup import serve

TIMEOUT = 30.0
SERVICE = "mymaster"
RECORDS = 600  # per failover run: enough to have some in flight when the primary dies


def _info(port: int, section: str = "replication") -> dict[str, Any]:
    with redis_sync.Redis(port=port, socket_connect_timeout=1) as r:
        return r.info(section)  # type: ignore[no-any-return]


def _online_replicas(port: int) -> int:
    info = _info(port)
    return sum(1 for k, v in info.items() if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online")


def _replica_synced(port: int) -> bool:
    """Linked to its primary, and done rewriting its AOF after the sync (it ignores SIGTERM meanwhile)."""
    info = _info(port, "all")
    return info.get("master_link_status") == "up" and not info.get("aof_rewrite_in_progress") and not (
        info.get("aof_rewrite_scheduled"))


@dataclass
class SentinelGroup:
    """A primary and its replica, watched by three Sentinels: all child processes of the test."""

    root: Path
    nodes: dict[int, EmbeddedRedis] = field(default_factory=dict)  # port -> its server
    sentinels: list[tuple[int, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{port}" for port, _ in self.sentinels) + f"/{SERVICE}"

    def start(self) -> None:
        primary = self._node(self.root / "a", None)
        replica = self._node(self.root / "b", primary.port)
        _wait(lambda: _replica_synced(replica.port) and _online_replicas(primary.port) == 1, "the replica's link")
        ports = [free_port() for _ in range(3)]
        for i, port in enumerate(ports):
            self._sentinel(i, port, ports, primary.port, replica.port)
        # each Sentinel knows the replica and the other two (they meet through hello messages on the primary)
        _wait(lambda: all(self._sees_all(port) for port, _ in self.sentinels), "the Sentinels to meet")

    def _node(self, data_dir: Path, replica_of: int | None, port: int | None = None) -> EmbeddedRedis:
        node = EmbeddedRedis(data_dir, port=port, replica_of=replica_of)
        node.start()
        with redis_sync.Redis(port=node.port) as r:  # a replica's full sync starts at once, not after 5 s
            r.config_set("repl-diskless-sync-delay", 0)
        self.nodes[node.port] = node
        return node

    def _sentinel(self, i: int, port: int, ports: list[int], primary: int, replica: int) -> None:
        """Sentinel `i` of those at `ports`, told of the others and of the replica from the start
        (else it learns of them from messages sent every two seconds)."""
        folder = self.root / f"sentinel-{i}"
        folder.mkdir()
        conf = folder / "sentinel.conf"  # Sentinel rewrites it with what it learns
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {folder}\nlogfile {folder / 'sentinel.log'}\n"
            f"sentinel myid {_sentinel_id(i)}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} 500\n"
            f"sentinel failover-timeout {SERVICE} 2000\n"
            f"sentinel known-replica {SERVICE} 127.0.0.1 {replica}\n"
            + "".join(f"sentinel known-sentinel {SERVICE} 127.0.0.1 {other} {_sentinel_id(j)}\n"
                      for j, other in enumerate(ports) if j != i)
        )
        binary = shutil.which("redis-sentinel") or "redis-sentinel"
        proc = subprocess.Popen([binary, str(conf)], preexec_fn=die_with_parent, stdin=subprocess.DEVNULL)
        self.sentinels.append((port, proc))

    def _sees_all(self, port: int) -> bool:
        try:
            with redis_sync.Redis(port=port, socket_connect_timeout=1, decode_responses=True) as s:
                state = s.sentinel_master(SERVICE)
        except redis_sync.RedisError:
            return False
        return int(state["num-other-sentinels"]) == 2 and int(state["num-slaves"]) >= 1

    def primary_port(self) -> int:
        """The primary's port as the Sentinels name it."""
        with redis_sync.Redis(port=self.sentinels[0][0], decode_responses=True) as s:
            return int(s.sentinel_get_master_addr_by_name(SERVICE)[1])

    def replica_port(self) -> int:
        primary = self.primary_port()
        return next(port for port in self.nodes if port != primary)

    def caught_up(self) -> bool:
        """The replica has applied everything the primary wrote."""
        return bool(_info(self.replica_port())["master_repl_offset"] == _info(self.primary_port())["master_repl_offset"])

    def kill_primary(self) -> int:
        """SIGKILL the primary; returns its port."""
        port = self.primary_port()
        node = self.nodes[port]
        assert node.proc is not None
        node.proc.kill()
        node.stop()  # reaps it and gives its data dir back
        return port

    async def promoted(self, old: int) -> int:
        """Until every Sentinel names the replica as the primary and it acts as one; its port."""
        def done() -> int | None:
            try:
                ports = {self._named_by(port) for port, _ in self.sentinels}
                new = ports.pop()
                return new if not ports and new != old and _info(new)["role"] == "master" else None
            except redis_sync.RedisError:
                return None
        return int(await eventually(done, TIMEOUT, "the replica's promotion") or 0)

    def _named_by(self, sentinel: int) -> int:
        with redis_sync.Redis(port=sentinel, socket_connect_timeout=1, decode_responses=True) as s:
            return int(s.sentinel_get_master_addr_by_name(SERVICE)[1])

    async def rejoin(self, port: int, primary: int) -> None:
        """Start the killed node again as a replica of the new primary, and wait for its link."""
        node = self.nodes[port]
        await asyncio.to_thread(self._node, node.data_dir, primary, port)
        await eventually(lambda: _replica_synced(port) and _online_replicas(primary) == 1, TIMEOUT, "the rejoin")

    def stop(self) -> None:
        for _, proc in self.sentinels:
            proc.terminate()
        for _, proc in self.sentinels:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for node in self.nodes.values():
            if node.proc is not None and node.proc.poll() is None:
                os.kill(node.proc.pid, signal.SIGCONT)  # stopped by a failed test: SIGTERM needs it running
            node.stop()


def _sentinel_id(i: int) -> str:
    return f"{i + 1:040x}"


def _wait(check: Callable[[], object], what: str) -> None:
    """For set-up before any event loop serves a gateway."""
    deadline = time.monotonic() + TIMEOUT
    while not _quiet(check):
        assert time.monotonic() < deadline, f"{what} not reached within {TIMEOUT}s"
        time.sleep(0.05)


def _quiet(check: Callable[[], object]) -> object:
    try:
        return check()
    except redis_sync.RedisError:
        return False


@pytest.fixture
def group(tmp_path: Path) -> Iterator[SentinelGroup]:
    g = SentinelGroup(tmp_path)
    try:
        g.start()
        yield g
    finally:
        g.stop()


@pytest.fixture
async def gateway(group: SentinelGroup) -> AsyncIterator[Gateway]:
    async with running_gateway(test_config(group.url)) as gw:
        yield gw


def _log_values(bs: str, topic: str, isolation: str = "read_uncommitted") -> list[bytes]:
    """Every record of the topic's one partition that a reader from offset 0 finds: up to the high
    watermark, or read_committed the last stable offset, leaving out aborted records."""
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": "unused-manual-assignment", "enable.auto.commit": False,
                     "isolation.level": isolation})
    out: list[bytes] = []
    try:
        _, end = c.get_watermark_offsets(ck.TopicPartition(topic, 0), TIMEOUT)
        c.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        while c.position([ck.TopicPartition(topic, 0)])[0].offset < end and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
    finally:
        c.close()
    return out


@dataclass
class Load:
    """A producer that sends the first half of its records, lets the test kill the primary once a
    quarter are acknowledged, then sends the rest and waits for every delivery."""

    bs: str
    topic: str
    conf: dict[str, Any]
    acked: list[bytes] = field(default_factory=list)
    failed: list[tuple[bytes, str]] = field(default_factory=list)
    quarter: threading.Event = field(default_factory=threading.Event)
    killed: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        producer = ck.Producer({"bootstrap.servers": self.bs, "linger.ms": 2, "message.timeout.ms": 90_000,
                                "retry.backoff.max.ms": 200, **self.conf})

        def delivered(err: ck.KafkaError | None, msg: ck.Message) -> None:
            if err is None:
                self.acked.append(msg.value())
            else:
                self.failed.append((msg.value(), err.name()))
            if len(self.acked) >= RECORDS // 4:
                self.quarter.set()

        values = [b"v%d" % i for i in range(RECORDS)]
        for v in values[:RECORDS // 2]:
            producer.produce(self.topic, v, on_delivery=delivered)
            producer.poll(0)
        while not self.killed.wait(0.02):
            producer.poll(0)
        for v in values[RECORDS // 2:]:
            producer.produce(self.topic, v, on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(120) == 0


async def _failover_under_load(group: SentinelGroup, gateway: Gateway, topic: str, **conf: Any) -> Load:
    """Kill the primary amid the load; bring it back as a replica once the other is promoted."""
    load = Load(kafka_bootstrap(gateway), topic, conf)
    producing = asyncio.create_task(asyncio.to_thread(load.run))
    await asyncio.to_thread(load.quarter.wait, TIMEOUT)
    old = group.kill_primary()
    load.killed.set()
    new = await group.promoted(old)
    await group.rejoin(old, new)
    await producing
    return load


@pytest.mark.parametrize("run", range(3))
async def test_acks_all_keeps_every_acknowledged_record_once_through_a_failover(group, gateway, run):
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 2)
    load = await _failover_under_load(group, gateway, "t", acks="all", **{"enable.idempotence": True})
    assert load.failed == []
    assert sorted(load.acked) == sorted(b"v%d" % i for i in range(RECORDS))
    stored = Counter(await asyncio.to_thread(_log_values, bs, "t"))
    assert stored == Counter(load.acked)  # each acknowledged record there, once, and nothing else


def _gateway_connections(port: int) -> list[str]:
    """The names of the gateway's connections to the Redis at `port` (they name themselves)."""
    with redis_sync.Redis(port=port, decode_responses=True) as r:
        return sorted(c["name"] for c in r.client_list() if c["name"].startswith("gateway-"))


async def test_a_demoted_primary_is_left_for_the_promoted_one(group, gateway):
    """A handover by the Sentinels, the old primary living on as a replica: the records sent after it
    go to the new primary, every record is there once, and no gateway connection stays on the old."""
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 2)
    old = group.primary_port()
    load = Load(bs, "t", {"acks": "all", "enable.idempotence": True})
    producing = asyncio.create_task(asyncio.to_thread(load.run))
    await asyncio.to_thread(load.quarter.wait, TIMEOUT)
    with redis_sync.Redis(port=group.sentinels[0][0]) as s:
        s.execute_command("SENTINEL", "FAILOVER", SERVICE)
    new = await group.promoted(old)
    await eventually(lambda: _quiet(lambda: _replica_synced(old) and _online_replicas(new) == 1), TIMEOUT,
                     "the old primary to follow the new")
    load.killed.set()  # the second half, on the new primary
    await producing
    assert load.failed == []
    assert Counter(await asyncio.to_thread(_log_values, bs, "t")) == Counter(b"v%d" % i for i in range(RECORDS))
    assert "gateway-append-replicated" in _gateway_connections(new)
    assert _gateway_connections(old) == []


def _connected_to(gateway: Gateway, port: int) -> list[str]:
    """The gateway's connections to the Redis at `port` as the gateway holds them (a paused node
    cannot list its clients): redis-py's pool, and those beside it."""
    assert gateway.store is not None
    pool = gateway.store._redis.connection_pool
    held = [*pool._available_connections, *pool._in_use_connections]  # type: ignore[attr-defined]
    named = [f"redis-py {c.port}" for c in held if c.is_connected and int(c.port) == port]
    sides = (gateway.store.log.direct, gateway.store.log.ordered, gateway.store.replication.connections)
    return named + [f"direct {addr[1]}" for d in sides for addr, conn in d._conns.items()
                    if conn.usable and addr[1] == port]


async def test_a_primary_paused_through_a_failover_is_dropped_before_it_resumes(group, gateway):
    """A primary SIGSTOPped past the Sentinels' patience still holds the gateway's connections, and
    the requests in them; resumed, it answers them from its own log until the Sentinels demote it,
    seconds later (tests/jepsen's primary-paused: reads of records the new primary never got, and
    consumers told OFFSET_OUT_OF_RANGE by its shorter log). The gateway asks the Sentinels where the
    primary is and drops every connection to a replaced one while it is still stopped."""
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 2)
    await asyncio.to_thread(_produce, bs, [b"a", b"b"], acks="all")
    assert await asyncio.to_thread(_log_values, bs, "t") == [b"a", b"b"]
    old = group.primary_port()
    assert _connected_to(gateway, old)
    node = group.nodes[old].proc
    assert node is not None
    os.kill(node.pid, signal.SIGSTOP)
    try:
        await group.promoted(old)
        await eventually(lambda: not _connected_to(gateway, old), TIMEOUT, "the paused primary's connections dropped")
    finally:
        os.kill(node.pid, signal.SIGCONT)


def _lone_sentinel(root: Path, primary: int) -> tuple[int, subprocess.Popen[bytes]]:
    """A Sentinel that watches `primary` under SERVICE and meets no other: as one cut off with the old
    primary goes on naming it, at the config epoch from before the failover."""
    port = free_port()
    root.mkdir()
    conf = root / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {root}\nlogfile {root / 'sentinel.log'}\n"
                    f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n")
    proc = subprocess.Popen([shutil.which("redis-sentinel") or "redis-sentinel", str(conf)],
                            preexec_fn=die_with_parent, stdin=subprocess.DEVNULL)
    _wait(lambda: redis_sync.Redis(port=port, socket_connect_timeout=1).sentinel_masters(), "the lone Sentinel")
    return port, proc


async def test_the_newest_sentinel_epoch_is_followed_and_never_an_older_one(group, tmp_path):
    """Soak sentinel:1026397558 and sentinel:477648183: a Sentinel cut off with the old primary named it
    when the cut healed (redis-py took the first Sentinel's answer, and waited for it through the cut),
    the gateway went back to it and a consumer, told OFFSET_OUT_OF_RANGE by its shorter log, reset to
    its input's start. Whichever Sentinel is listed first, the highest config epoch is followed, and an
    older one is not taken from a minority even when it alone answers (the others stopped)."""
    old = group.primary_port()
    with redis_sync.Redis(port=group.sentinels[0][0]) as s:
        s.execute_command("SENTINEL", "FAILOVER", SERVICE)  # config epoch 1
    new = await group.promoted(old)
    stale = EmbeddedRedis(tmp_path / "stale")
    stale.start()
    port, lone = _lone_sentinel(tmp_path / "lone", stale.port)
    client = connect(group.url.replace("://", f"://127.0.0.1:{port},"))
    assert isinstance(client, SentinelRedis)
    try:
        assert await client.discover_primary() == ("127.0.0.1", new)
        for _, proc in group.sentinels:
            os.kill(proc.pid, signal.SIGSTOP)  # they take the question and never answer
        try:
            with pytest.raises(MasterNotFoundError, match="older than epoch 1"):
                await client.discover_primary()
        finally:
            for _, proc in group.sentinels:
                os.kill(proc.pid, signal.SIGCONT)
    finally:
        await client.aclose()
        lone.terminate()
        lone.wait(10)
        stale.stop()


async def test_a_connection_opened_to_a_primary_replaced_meanwhile_serves_nothing(group):
    """A connection that opened to the primary as it stopped waits in its handshake, the pool's lock
    held, until it resumes; the Sentinels promoted the replica meanwhile, and the request that asked
    for the connection is sent to the new primary, not answered from the old one's log."""
    client = connect(group.url)
    assert isinstance(client, SentinelRedis)
    following = asyncio.create_task(client.follow_primary(lambda _: None))
    old = group.primary_port()
    node = group.nodes[old].proc
    assert node is not None
    os.kill(node.pid, signal.SIGSTOP)
    try:
        asked = asyncio.create_task(client.info("server"))  # the pool's first connection, to the stopped one
        new = await group.promoted(old)
        await eventually(lambda: client.primary_seen() == ("127.0.0.1", new), TIMEOUT, "the pool told")
    finally:
        os.kill(node.pid, signal.SIGCONT)
    try:
        assert (await asked)["tcp_port"] == new
    finally:
        following.cancel()
        await client.aclose()


async def test_a_primary_without_its_replicas_does_not_say_an_offset_is_past_its_end(group, gateway):
    """Soak sentinel:1026397558: the old primary, back from a cut with its replicas dropped, answered a
    fetch past its shorter log OFFSET_OUT_OF_RANGE and the consumer reset to its input's start. A
    primary answers that only once the replicas confirm where its log ends; until they are back the
    fetch is refused, retriably."""
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 2)
    await asyncio.to_thread(_produce, bs, [b"a", b"b"], acks="all")
    conn = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)

    async def fetch(offset: int) -> KafkaError:
        resp = await call(conn, ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": offset,
                                                      "partition_max_bytes": 1 << 20}]}]})
        return KafkaError(resp.responses[0].partitions[0].error_code)

    try:
        assert await fetch(5) == KafkaError.offset_out_of_range  # the replica confirms the end
        primary = group.primary_port()
        group.nodes[group.replica_port()].stop()
        await eventually(lambda: _online_replicas(primary) == 0, TIMEOUT, "the replica dropped")
        assert await fetch(5) == KafkaError.kafka_storage_error
        assert await fetch(1) == KafkaError.none  # what it holds is still read (Guarantees)
    finally:
        conn[1].close()


async def test_acks_1_may_lose_acknowledged_records_in_a_failover(group, gateway, record_property):
    """What acks=all prevents: the count acknowledged and then lost is recorded, not asserted (Redis
    replicates within a fraction of a millisecond on one machine, so it is often none)."""
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t1", 1)
    load = await _failover_under_load(group, gateway, "t1", acks=1, **{"enable.idempotence": False})
    stored = set(await asyncio.to_thread(_log_values, bs, "t1"))
    lost = len(set(load.acked) - stored)
    record_property("acks_1_acknowledged_then_lost", lost)
    print(f"acks=1 failover: {len(load.acked)} acknowledged, {lost} of them lost")
    assert stored <= {b"v%d" % i for i in range(RECORDS)}


def test_a_malformed_sentinel_url_is_one_line_saying_what_is_wrong(tmp_path):
    url = "redis+sentinel://127.0.0.1:26379"
    code, lines = serve(tmp_path / "data", "--redis-url", url)
    assert code != 0
    assert lines == [f"gateway: bad Sentinel URL {url!r}: name the primary after the Sentinels: .../mymaster"]


@pytest.mark.parametrize(("url", "problem"), [
    ("redis+sentinel://127.0.0.1:x/mymaster", "'127.0.0.1:x' is not host:port"),
    ("redis+sentinel:///mymaster", "name at least one Sentinel, as host:port[,host:port...]"),
    ("redis+sentinel://127.0.0.1/mymaster/one", "the database after the primary's name is a number, not 'one'"),
    ("redis+sentinel://h/m?sentinel_pasword=x", "unknown option sentinel_pasword"),
])
def test_what_is_wrong_with_a_sentinel_url_is_said(url, problem):
    with pytest.raises(GatewayError) as refused:
        connect(url)
    assert str(refused.value) == f"bad Sentinel URL {url!r}: {problem}"


def test_a_sentinel_url_names_sentinels_primary_database_and_credentials():
    parsed = SentinelUrl.parse("rediss+sentinel://app:s%40cret@10.0.0.1,[::1]:26380/orders/2"
                               "?sentinel_password=watch&ssl_cert_reqs=none")
    assert parsed == SentinelUrl([("10.0.0.1", 26379), ("::1", 26380)], "orders", 2, "app", "s@cret",
                                 {"password": "watch"}, {"ssl": True, "ssl_cert_reqs": "none"})


def test_sentinels_that_do_not_answer_are_one_line_naming_the_url_flag(tmp_path):
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/mymaster"  # nothing listens there
    code, lines = serve(tmp_path / "data", "--redis-url", url)
    assert code != 0
    assert lines == [f"gateway: cannot reach Redis at {url}: no Sentinel named there answers with a primary "
                     "called 'mymaster': check --redis-url (GATEWAY_REDIS_URL)"]


async def test_acks_all_is_refused_while_the_replica_is_away_and_served_once_it_is_back(group, gateway):
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 2)
    primary, replica = group.primary_port(), group.replica_port()
    group.nodes[replica].stop()
    await eventually(lambda: _online_replicas(primary) == 0, TIMEOUT, "the replica gone")
    # one try, its WAIT bounded by the request's timeout
    once = {"acks": "all", "enable.idempotence": False, "retries": 0, "request.timeout.ms": 1000}

    def refused() -> bool:  # the gateway reads the replica count again within a second
        [(err, _)] = _produce(bs, [b"x"], **once)
        return err is not None and err.code() == ck.KafkaError.NOT_ENOUGH_REPLICAS
    await eventually(lambda: asyncio.to_thread(refused), TIMEOUT, "NOT_ENOUGH_REPLICAS")
    assert group.primary_port() == primary  # a replica away is no failover
    before = await asyncio.to_thread(_log_values, bs, "t")  # an x appended before the count was read again
    [(err, _)] = await asyncio.to_thread(_produce, bs, [b"x"], **once)
    assert err is not None and err.code() == ck.KafkaError.NOT_ENOUGH_REPLICAS
    assert await asyncio.to_thread(_log_values, bs, "t") == before  # nothing written

    await group.rejoin(replica, primary)
    [(err, offset)] = await asyncio.to_thread(_produce, bs, [b"y"], acks="all")  # retried until read again
    assert err is None and offset == len(before)
    assert await asyncio.to_thread(_log_values, bs, "t") == [*before, b"y"]


async def test_consume_transform_produce_stays_exactly_once_through_a_failover(group, gateway):
    """The primary is killed with a transaction's records sent and its offsets not yet committed;
    the rest of the input arrives through the failover. Each input is transformed exactly once."""
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "in", 2)
    await asyncio.to_thread(_create, bs, "out", 2)
    inputs = [b"in-%d" % i for i in range(200)]
    await asyncio.to_thread(_produce, bs, inputs[:100], "in", acks="all")
    killed: list[int] = []

    def kill_in_second_batch(n: int) -> None:
        if n == 2:
            killed.append(group.kill_primary())

    transforming = asyncio.create_task(asyncio.to_thread(
        transform, bs, "in", "out", "eos", len(inputs), after_batch=kill_in_second_batch))
    await eventually(lambda: killed, TIMEOUT, "the kill")
    # the rest of the input arrives through the failover: the application reads it after the switch
    feeding = asyncio.create_task(asyncio.to_thread(
        _produce, bs, inputs[100:], "in", acks="all", **{"enable.idempotence": True, "message.timeout.ms": 90_000}))
    await group.rejoin(killed[0], await group.promoted(killed[0]))
    assert [err for err, _ in await feeding] == [None] * 100
    await transforming
    out = await asyncio.to_thread(_log_values, bs, "out", "read_committed")
    assert sorted(out) == sorted(v.upper() for v in inputs)  # each once, none lost


@pytest.fixture
def replicated_cluster(tmp_path: Path) -> Iterator[EmbeddedCluster]:
    """Three primaries with one replica each; a primary silent for a second is replaced."""
    cluster = EmbeddedCluster(tmp_path / "cluster", replicas=1, node_timeout_ms=1000)
    try:
        cluster.start()
        yield cluster
    finally:
        for node in cluster.nodes:
            node.stop()


def _slot_owner(cluster: EmbeddedCluster, key: str, but: int = 0) -> int:
    """The port of the primary that owns `key`'s slot, as a node (not the one at port `but`) says now."""
    asked = next(n.port for n in cluster.nodes if n.port != but)
    with redis_sync.Redis(port=asked, decode_responses=True) as r:
        slot = int(r.cluster("keyslot", key))  # type: ignore[no-untyped-call]
        for start, end, primary, *_ in r.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(primary[1])
    raise AssertionError(f"no node owns slot {slot}")


async def test_a_cluster_primary_whose_restart_can_drop_what_its_replica_held_is_warned_of(replicated_cluster, caplog):
    """Soak cluster:270253204: a primary killed and restarted (everysec) before its replica's promotion
    came back without two acknowledged batches, resynced its replica, which held them, in full, and
    that replica was then promoted. Each primary with a replica on everysec is named at start-up;
    on `appendfsync always` (which answers only what its AOF holds) none is."""
    cluster = replicated_cluster
    store = Store(connect(cluster.url))
    try:
        primaries = [n.port for n in cluster.nodes if _info(n.port).get("role") == "master"]
        await eventually(lambda: all(_online_replicas(p) == 1 for p in primaries), TIMEOUT, "the replicas")
        with caplog.at_level(logging.WARNING, logger="gateway.store.persistence"):
            warned = await warn_restart_loss(store.replication)
        assert sorted(int(a.rsplit(":", 1)[1]) for a in warned) == sorted(primaries)
        assert len(caplog.records) == 3 and "appendfsync everysec" in caplog.records[0].getMessage()
        for port in primaries:
            with redis_sync.Redis(port=port) as r:
                r.config_set("appendfsync", "always")
        assert await warn_restart_loss(store.replication) == []
    finally:
        await store.close()


async def test_acks_all_keeps_every_acknowledged_record_once_through_a_cluster_failover(replicated_cluster):
    """The same promise on a Redis Cluster: WAIT counts the replicas of the partition's slot owner,
    whose replica takes the slots over when it is killed."""
    cluster = replicated_cluster
    nodes = {n.port: n for n in cluster.nodes}
    async with running_gateway(test_config(cluster.url)) as gw:
        bs = kafka_bootstrap(gw)
        await asyncio.to_thread(_create, bs, "t", 2)
        old = _slot_owner(cluster, keys.log("t", 0))
        await eventually(lambda: _online_replicas(old) == 1, TIMEOUT, "the owner's replica")
        load = Load(bs, "t", {"acks": "all", "enable.idempotence": True})
        producing = asyncio.create_task(asyncio.to_thread(load.run))
        await asyncio.to_thread(load.quarter.wait, TIMEOUT)
        killed = nodes[old]
        assert killed.proc is not None
        killed.proc.kill()
        killed.stop()
        load.killed.set()
        new = int(await eventually(lambda: _quiet(lambda: (p := _slot_owner(cluster, keys.log("t", 0), old)) != old and p),
                                   TIMEOUT, "the replica's promotion") or 0)
        # back as a replica of the promoted node (the cluster tells it so), for min.insync.replicas=2
        back = EmbeddedRedis(killed.data_dir, port=old, cluster=True, node_timeout_ms=killed.node_timeout_ms)
        back.cluster_port = killed.cluster_port
        nodes[old] = cluster.nodes[cluster.nodes.index(killed)] = back
        await asyncio.to_thread(back.start)
        await eventually(lambda: _quiet(lambda: _replica_synced(old) and _online_replicas(new) == 1), TIMEOUT,
                         "the rejoin")
        await producing
        assert load.failed == []
        assert sorted(load.acked) == sorted(b"v%d" % i for i in range(RECORDS))
        stored = Counter(await asyncio.to_thread(_log_values, bs, "t"))
        assert stored == Counter(load.acked)


async def test_the_native_client_rides_a_failover(group, gateway):
    """Native sends during the switch are retried on the client's retriable error and land; both
    gateways then serve on the promoted replica without a restart, and a reader waiting on one is
    woken by the other's writes through the new primary. (The native face does not wait for
    replicas: the replica is let catch up before the kill, for what is there to stay.)"""
    await gateway.services.log.create_topic("n", 1)
    async with (running_gateway(test_config(group.url)) as other,
                await Client.connect(native_url(gateway)) as reading,
                await Client.connect(native_url(other)) as writing):
        producer = await writing.create_producer("n", send_timeout=60)
        consumer = await reading.subscribe("n", "s", initial_position="earliest")
        await producer.send(b"before")
        await eventually(lambda: group.caught_up(), TIMEOUT, "the replica to catch up")
        old = group.kill_primary()
        during = asyncio.gather(*(producer.send(b"during-%d" % i) for i in range(20)))
        await group.rejoin(old, await group.promoted(old))
        await during  # each send answered without an error
        sent = {b"before", *(b"during-%d" % i for i in range(20))}
        got: set[bytes] = set()
        while not sent <= got:
            got.add((await consumer.receive(TIMEOUT)).value)  # raises TimeoutError when one is missing
        assert got == sent
        # the reader waits, listening for the other gateway's writes on the new primary alone
        waiting = asyncio.create_task(consumer.receive(TIMEOUT))
        await eventually(lambda: _shard_subscribers(group.primary_port(), keys.log("n", 0)) == 1, TIMEOUT,
                         "the wake-up subscription on the new primary")
        assert _shard_subscribers(old, keys.log("n", 0)) == 0
        await producer.send(b"after")
        assert (await waiting).value == b"after"


def _shard_subscribers(port: int, channel: str) -> int:
    with redis_sync.Redis(port=port) as r:
        return int(r.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1])
