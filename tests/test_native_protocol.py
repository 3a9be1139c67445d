"""The native wire: framing, hostile frames, the hand-written Messages encoder, Redis outages."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.client import Client, StorageUnavailable
from gateway.errors import ErrorCode
from gateway.formats.frames import OutgoingEntry, frame, messages_frame, range_frame
from gateway.native.dispatch import before_connect, in_order, load_handlers, lookup
from gateway.pb import gateway_pb2 as pb
from gateway.server.gateway import Gateway
from gateway.store.embedded import EmbeddedRedis
from tests.conftest import native_url, test_config


async def raw(gw):
    return await asyncio.open_connection("127.0.0.1", gw.listeners["native"].port)


async def read_response(reader) -> pb.Response:
    (n,) = struct.unpack(">I", await reader.readexactly(4))
    return pb.Response.FromString(await reader.readexactly(n))


def test_every_request_has_one_handler_and_only_connect_and_ping_come_before_authentication():
    load_handlers()
    bodies = [f.name for f in pb.Request.DESCRIPTOR.oneofs_by_name["body"].fields]
    assert [b for b in bodies if (lookup(b) is None) == (in_order(b) is None)] == []
    assert sorted(b for b in bodies if in_order(b) is not None) == ["send", "send_watermark"]
    assert sorted(b for b in bodies if before_connect(b)) == ["connect", "ping"]


async def healthy(gw) -> None:
    """A well-behaved client still produces and consumes."""
    async with await Client.connect(native_url(gw)) as client:
        c = await client.subscribe("health", "s", initial_position="latest")
        p = await client.create_producer("health")
        mid = await p.send(b"ok")
        m = await c.receive(5)
        assert (m.value, m.message_id) == (b"ok", mid)


async def test_malformed_frame_gets_an_error_and_others_are_undisturbed(gateway):
    async with await Client.connect(native_url(gateway)) as bystander:
        reader, writer = await raw(gateway)
        garbage = b"\xff\xff\xff\xff\x0f"
        writer.write(struct.pack(">I", len(garbage)) + garbage)
        resp = await read_response(reader)
        assert resp.error.code == ErrorCode.INVALID_REQUEST
        writer.write(frame(pb.Request(request_id=9, ping=pb.Ping())))  # the connection carries on
        assert (await read_response(reader)).request_id == 9
        writer.close()
        await bystander.create_producer("bystander")
    await healthy(gateway)


async def test_oversized_frame_closes_that_connection_only(gateway):
    gateway.services.config.max_frame_bytes = 4096
    async with await Client.connect(native_url(gateway)) as bystander:
        reader, writer = await raw(gateway)
        writer.write(struct.pack(">I", 50_000_000))
        resp = await read_response(reader)
        assert resp.error.code == ErrorCode.MESSAGE_TOO_LARGE
        assert await reader.read() == b""  # closed
        p = await bystander.create_producer("bystander")
        await p.send(b"still here")
    await healthy(gateway)


async def test_unknown_request_type_gets_an_error(gateway):
    reader, writer = await raw(gateway)
    # request_id 7 and a field number no Request body uses
    body = pb.Request(request_id=7).SerializeToString() + b"\xf8\x06\x01"
    writer.write(struct.pack(">I", len(body)) + body)
    resp = await read_response(reader)
    assert (resp.request_id, resp.error.code) == (7, ErrorCode.INVALID_REQUEST)
    writer.close()
    await healthy(gateway)


entries = st.lists(
    st.builds(
        OutgoingEntry,
        st.integers(0, 1000),
        st.integers(0, 2**62),
        st.binary(max_size=300),
        st.lists(st.integers(0, 2**31), max_size=5),
        st.integers(0, 50),
    ),
    max_size=4,
)


@given(st.integers(0, 2**63), entries)
def test_messages_encoder_matches_protobuf(consumer_id, outgoing):
    expected = pb.Response(
        messages=pb.Messages(
            consumer_id=consumer_id,
            entries=[
                pb.EntryBatch(partition=e.partition, base_offset=e.base_offset, batch=e.batch,
                              skip=e.skip, redelivery_count=e.redelivery_count)
                for e in outgoing
            ],
        )
    )
    assert b"".join(messages_frame(consumer_id, outgoing)) == frame(expected)


async def test_redis_outage_is_a_retriable_storage_error(tmp_path: Path):
    redis = EmbeddedRedis(tmp_path / "redis")
    await asyncio.to_thread(redis.start)
    gw = Gateway(test_config(redis.url))
    await gw.start()
    try:
        async with await Client.connect(native_url(gw), operation_timeout=3.0) as client:
            producer = await client.create_producer("outage", batching=False, send_timeout=0.5)
            assert (await producer.send(b"before")).offset == 0
            await asyncio.to_thread(redis.stop)
            with pytest.raises(StorageUnavailable) as err:
                await producer.send(b"during")
            assert err.value.retriable and type(err.value) is StorageUnavailable  # the class its code names
            with pytest.raises(StorageUnavailable):
                await client.subscribe("outage", "s")
            await asyncio.to_thread(redis.start)
            # the producer carries on with a fresh id, so nothing it sent is stored twice
            await producer.send(b"after")
            c = await client.subscribe("outage", "s", initial_position="earliest")
            values = [(await c.receive(5)).value for _ in range(2)]
            assert values[0] == b"before" and values[-1] == b"after"
    finally:
        await gw.stop()
        await asyncio.to_thread(redis.stop)


@given(st.integers(0, 2**63), entries, st.integers(0, 2**62), st.integers(0, 2**62))
def test_range_encoder_matches_protobuf(request_id, outgoing, next_offset, stable):
    expected = pb.Response(
        request_id=request_id,
        range_read=pb.RangeRead(
            entries=[
                pb.EntryBatch(partition=e.partition, base_offset=e.base_offset, batch=e.batch,
                              skip=e.skip, redelivery_count=e.redelivery_count)
                for e in outgoing
            ],
            next_offset=next_offset,
            last_stable_offset=stable,
        ),
    )
    assert b"".join(range_frame(request_id, outgoing, next_offset, stable)) == frame(expected)
