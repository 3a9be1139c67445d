"""Connection limits: how many, how long silent, and how much one connection can make the gateway hold."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from kio.schema.errors import ErrorCode as KafkaError

from gateway.client import Client
from gateway.domain.log import MAX_PARTITIONS
from gateway.errors import InvalidPartitions
from gateway.formats.frames import frame as native_frame
from gateway.formats.records import BatchBuilder, build_batch
from gateway.kafka.dispatch import ApiKey
from gateway.pb import gateway_pb2 as pb
from gateway.server.gateway import Gateway
from tests.conftest import eventually, native_url, test_config
from tests.kafka_wire import TIMEOUT, build_request, call, decode, read_response, request


@contextlib.asynccontextmanager
async def started(redis_url: str, **overrides: object) -> AsyncIterator[Gateway]:
    gw = Gateway(test_config(redis_url, **overrides))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


async def kafka_conn(gw: Gateway, rcvbuf: int = 0) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", gw.listeners["kafka"].port))
    return await asyncio.open_connection(sock=sock)


async def api_versions(conn) -> None:
    resp = await call(conn, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert resp.error_code == KafkaError.none


async def until_connections(gw: Gateway, face: str, n: int) -> None:
    listener = gw.listeners[face]
    tcp = listener.listener if face == "kafka" else listener
    await eventually(lambda: tcp.connections == n, what=f"{n} {face} connections")


async def closed_by_gateway(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), TIMEOUT) == b""
    except ConnectionResetError:
        return True


async def test_connections_over_the_limit_are_closed_and_the_others_keep_working(redis_url):
    async with started(redis_url, max_connections=3) as gw:
        for face in ("kafka", "native"):
            port = gw.listeners[face].port
            kept = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
            await until_connections(gw, face, 3)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await closed_by_gateway(reader), f"{face}: a fourth connection must be refused"
            writer.close()
            if face == "kafka":
                await api_versions(kept[0])  # those within the limit are served
            kept[0][1].close()  # room again once one leaves
            await until_connections(gw, face, 2)
            if face == "kafka":
                fresh = await asyncio.open_connection("127.0.0.1", port)
                await api_versions(fresh)
                # closed, not left to the garbage collector: before Python 3.11.5 a dropped
                # StreamWriter keeps its socket open, and the gateway rightly counts it
                fresh[1].close()
            else:
                async with await Client.connect(native_url(gw)) as client:
                    await client.create_producer("room")
            for _, w in kept[1:]:
                w.close()
            await until_connections(gw, face, 0)


async def test_silent_and_half_sent_connections_are_closed_after_the_idle_timeout(redis_url):
    async with started(redis_url, idle_timeout=0.5) as gw:
        silent = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
        half = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
        half[1].write(struct.pack(">i", 100) + b"only part of it")  # a frame never finished
        native = await asyncio.open_connection("127.0.0.1", gw.listeners["native"].port)
        for reader, _ in (silent, half, native):
            assert await closed_by_gateway(reader)
        busy = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
        # a connection that keeps asking stays open, however long it lives
        for _ in range(8):
            await api_versions(busy)
            await asyncio.sleep(0.2)
        busy[1].close()


async def test_native_client_pings_through_idle_periods(redis_url):
    async with started(redis_url, idle_timeout=0.6) as gw:
        async with await Client.connect(native_url(gw), reconnect=False) as client:
            consumer = await client.subscribe("quiet", "s", initial_position="earliest")
            producer = await client.create_producer("quiet")
            await asyncio.sleep(2.0)  # several idle timeouts with nothing to say but pings
            await producer.send(b"after a while")
            assert (await consumer.receive(5)).value == b"after a while"


async def test_a_kafka_client_that_stops_reading_stops_being_read(redis_url):
    """Pipelined fetches of 4 MiB each, never read: the gateway holds one response, not all of them."""
    async with started(redis_url) as gw:
        await gw.services.log.create_topic("big", 1, {"max.message.bytes": "2000000"})
        blob = build_batch([(None, b"x" * 1_000_000, [])])
        await gw.services.log.append([("big", 0, blob)] * 4)
        fetch = build_request(ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 4 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "big", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                        "partition_max_bytes": 4 << 20}]}],
        })
        reader, writer = await kafka_conn(gw, rcvbuf=65536)
        writer.write(b"".join(request(fetch, i) for i in range(100)))  # 400 MB of answers if all were made
        server = gw.listeners["kafka"]
        await eventually(lambda: len(server.connections) == 1, what="the connection")
        [conn] = server.connections
        transport = conn.writer.transport
        await eventually(lambda: transport.get_write_buffer_size() > 0, what="the gateway to be held up by the reader")
        peak = 0
        for _ in range(50):
            peak = max(peak, transport.get_write_buffer_size())
            await asyncio.sleep(0.02)
        assert 0 < peak <= (4 << 20) + 65536, peak
        # meanwhile everyone else is served
        other = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
        md = await call(other, ApiKey.METADATA, 9, {"topics": None})
        assert [t.name for t in md.topics] == ["big"]
        # and the slow reader, once it reads, gets every answer in order
        for i in range(100):
            cid, resp = decode(ApiKey.FETCH, 11, await read_response(reader))
            assert cid == i and len(resp.responses[0].partitions[0].records) > 3_000_000
        writer.close()


async def test_fetch_responses_are_capped_by_fetch_max_bytes(redis_url):
    async with started(redis_url, fetch_max_bytes=1_500_000) as gw:
        await gw.services.log.create_topic("capped", 1, {"max.message.bytes": "2000000"})
        blob = build_batch([(None, b"y" * 400_000, [])])
        await gw.services.log.append([("capped", 0, blob)] * 10)
        conn = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
        resp = await call(conn, ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 100 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "capped", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                           "partition_max_bytes": 100 << 20}]}],
        })
        records = resp.responses[0].partitions[0].records
        assert 400_000 * 3 <= len(records) <= 1_500_000  # three whole batches fit, the fourth does not


async def test_native_sends_read_ahead_are_bounded_while_redis_stalls(redis_url):
    """Redis paused: a client pipelining 8 MiB of sends has at most the buffer's worth read; all are
    stored and answered once Redis is back."""
    budget = 1 << 20
    async with started(redis_url, connection_buffer_bytes=budget) as gw:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.listeners["native"].port)

        async def answer() -> pb.Response:
            (n,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), TIMEOUT))
            return pb.Response.FromString(await reader.readexactly(n))

        writer.write(native_frame(pb.Request(request_id=1, create_producer=pb.CreateProducer(topic="paced"))))
        created = (await answer()).producer_created
        frames = []
        for seq in range(32):
            b = BatchBuilder(producer_id=created.producer_id, producer_epoch=0, base_sequence=seq)
            b.append(b"z" * 256_000)
            send = pb.Send(handle=created.handle, partition=0, batch=b.build())
            frames.append(native_frame(pb.Request(request_id=100 + seq, send=send)))
        admin = aioredis.Redis.from_url(redis_url)
        await admin.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
        try:
            writer.write(b"".join(frames))
            [conn] = gw.listeners["native"]._live
            peak = 0
            await eventually(lambda: conn.queued_bytes > budget // 2, what="sends to queue up")
            for _ in range(40):
                peak = max(peak, conn.queued_bytes)
                await asyncio.sleep(0.02)
            assert budget // 2 < peak <= budget, peak
        finally:
            await admin.execute_command("CLIENT", "UNPAUSE")
            await admin.aclose()
        receipts = [await answer() for _ in frames]
        assert [r.request_id for r in receipts] == [100 + i for i in range(32)]
        assert [r.send_receipt.base_offset for r in receipts] == list(range(32))
        writer.close()


async def test_a_topic_grows_to_at_most_max_partitions(gateway):
    log = gateway.services.log
    await log.create_topic("wide", 2)
    with pytest.raises(InvalidPartitions, match="at most"):
        await log.add_partitions("wide", MAX_PARTITIONS + 1)
    with pytest.raises(InvalidPartitions, match="at most"):
        await log.create_topic("wider", MAX_PARTITIONS + 1)
    assert (await log.topic("wide")).partitions == 2
