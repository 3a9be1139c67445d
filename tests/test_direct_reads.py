"""Large batches read from Redis without copies: the same answers as redis-py, on a real Redis."""

from __future__ import annotations

import asyncio
import os
import uuid

import redis as redis_sync

from gateway.domain.log import DIRECT_READ_BATCH, LogService
from gateway.formats.records import BatchBuilder, iter_records
from gateway.store import Store
from gateway.store.resp import BIG, DirectConnections, RespError

REDIS_BACKENDS = ("single", "cluster")

SIZES = [0, 1, 100, BIG - 1, BIG, BIG + 1, 256 * 1024 - 3, 256 * 1024 + 7, 3 * 1024 * 1024]


async def test_replies_are_those_redis_gives(raw_redis):
    """Bulk strings on both sides of the in-place threshold and of the receive buffer, nil,
    integers, empty and nested arrays, and an error reply that does not disturb its neighbours."""
    r = raw_redis
    key = "{direct}:s"
    values = [os.urandom(n) for n in SIZES]
    for i, v in enumerate(values):
        await r.xadd(key, {"b": v, "n": i}, id=f"{i + 1}-1")
    await r.set("{direct}:str", b"x")
    commands = [
        ("XRANGE", key, "-", "+"),
        ("HMGET", "{direct}:missing", "a", "b"),
        ("XLEN", key),
        ("XRANGE", "{direct}:empty", "-", "+"),
        ("HVALS", key),  # WRONGTYPE
        ("GET", "{direct}:str"),
    ]
    direct = DirectConnections(r, name="gateway-direct-read")
    conn = await direct._open(direct.address("{direct}:s"))
    assert conn is not None
    replies = await conn.pipeline(commands)
    entries = replies[0]
    assert [bytes(flat[1]) for _, flat in entries] == values
    assert [eid for eid, _ in entries] == [f"{i + 1}-1".encode() for i in range(len(values))]
    assert replies[1] == [None, None]
    assert replies[2] == len(values)
    assert replies[3] == []
    assert isinstance(replies[4], RespError) and "WRONGTYPE" in str(replies[4])
    assert replies[5] == b"x"
    direct.close()


async def test_many_pipelines_in_flight_get_their_own_replies(raw_redis):
    r = raw_redis
    blobs = {f"{{direct}}:k{i}": os.urandom(BIG * (i % 4) + i) for i in range(24)}
    for k, v in blobs.items():
        await r.set(k, v)
    direct = DirectConnections(r, name="gateway-direct-read")
    got = await asyncio.gather(*(direct.pipeline(k, [("GET", k), ("STRLEN", k)]) for k in blobs))
    assert [(bytes(g[0]), g[1]) for g in got if g] == [(v, len(v)) for v in blobs.values()]
    direct.close()


def batch(value: bytes, **producer) -> bytes:
    b = BatchBuilder(**producer)
    b.append(value)
    return b.build()


async def test_direct_and_redis_py_reads_agree(gateway, client):
    """Every offset, read-committed or not, with committed, aborted and open transactions about."""
    big = os.urandom(DIRECT_READ_BATCH * 2)
    producer = await client.create_producer("agree")
    await producer.send(big)
    aborted = await client.new_transaction(timeout=30)
    await producer.send(big, txn=aborted)
    await producer.send(b"small", txn=aborted)
    await aborted.abort()
    committed = await client.new_transaction(timeout=30)
    await producer.send(big, txn=committed)
    await committed.commit()
    still_open = await client.new_transaction(timeout=30)
    await producer.send(big, txn=still_open)
    await still_open.flush()
    await producer.send(big)
    log = gateway.store.log
    _, hw = await log.bounds("agree", 0)
    for offset in range(hw + 1):
        for committed_only in (False, True):
            direct = await log.read("agree", 0, offset, 4, with_aborted=committed_only, direct=True)
            plain = await log.read("agree", 0, offset, 4, with_aborted=committed_only)
            assert direct == plain
            assert all(isinstance(e.batch, bytearray) for e in direct.entries if len(e.batch) >= BIG)
    sl = await log.read("agree", 0, 0, 1, with_aborted=True, direct=True)
    assert len(sl.aborted) == 1 and sl.last_stable_offset < sl.high_watermark
    await still_open.abort()


async def test_a_lost_connection_falls_back_then_reconnects(store, redis_url):
    logs = LogService(store, auto_create=False)
    await logs.create_topic("t", 1)
    value = os.urandom(DIRECT_READ_BATCH * 2)
    for _ in range(3):
        await logs.append([("t", 0, batch(value))])
    first = await store.log.read("t", 0, 0, 3, direct=True)
    assert isinstance(first.entries[0].batch, bytearray)
    _kill_direct_connections(store)
    again = await store.log.read("t", 0, 0, 3, direct=True)  # through redis-py, or a new connection
    assert again == first
    later = await store.log.read("t", 0, 1, 2, direct=True)
    assert isinstance(later.entries[0].batch, bytearray)
    assert [rec.value for e in later.entries for rec in iter_records(e.batch, e.base_offset)] == [value, value]


def _kill_direct_connections(store: Store) -> None:
    for conn in store.log.direct._conns.values():
        conn._transport.abort()


async def test_direct_reads_log_in_with_the_gateway_user(redis_server):
    redis_url = redis_server
    user, password = f"reader{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    admin = redis_sync.Redis.from_url(redis_url)
    admin.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=["*"], commands=["+@all"])
    try:
        host_port = redis_url.split("://", 1)[1]
        s = Store.open(f"redis://{user}:{password}@{host_port}")
        try:
            logs = LogService(s, auto_create=False)
            topic = f"t{uuid.uuid4().hex[:6]}"
            await logs.create_topic(topic, 1)
            value = os.urandom(DIRECT_READ_BATCH * 2)
            await logs.append([(topic, 0, batch(value))])
            sl = await s.log.read(topic, 0, 0, 1, direct=True)
            assert isinstance(sl.entries[0].batch, bytearray)
            assert [rec.value for rec in iter_records(sl.entries[0].batch, 0)] == [value]
            clients = admin.client_list()
            assert any(c["user"] == user and c["name"] == "gateway-direct-read" for c in clients)
        finally:
            await s.close()
    finally:
        admin.acl_deluser(user)
        admin.close()

