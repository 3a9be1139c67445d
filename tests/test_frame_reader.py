"""The Kafka face's frame reader over a real TCP connection, on asyncio's loop and on uvloop, which
the gateway runs: frames of every size (an empty one too), however the client's writes cut them,
come out whole and in order; a connection that ends amid a frame says how much of it came."""

from __future__ import annotations

import asyncio
import os
import struct

import pytest
import uvloop

from gateway.net import FrameReader, TcpListener

SIZES = [0, 1, 100, 65_535, 65_536, 256 * 1024 + 3, 3 * 1024 * 1024]


async def _frames_through(payloads: list[bytes], cut: int | None) -> list[bytes]:
    """What a listener's FrameReader reads of `payloads` sent as size-prefixed frames, written in
    pieces of `cut` bytes (awaiting each), or all at once."""
    got: list[bytes] = []
    done = asyncio.get_running_loop().create_future()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert isinstance(reader, FrameReader)
        for _ in payloads:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            got.append(await reader.readexactly(size))
        done.set_result(None)

    listener = await TcpListener("test", handler, reader=FrameReader).start("127.0.0.1", 0)
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        wire = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
        for at in range(0, len(wire), cut or len(wire)):
            writer.write(wire[at:at + (cut or len(wire))])
            await writer.drain()
        await asyncio.wait_for(done, 30)
        writer.close()
    finally:
        await listener.close(grace=1)
    return got


@pytest.mark.parametrize("cut", [None, 1000, 70_000], ids=["at-once", "1000-byte-writes", "70000-byte-writes"])
async def test_frames_of_every_size_come_out_whole_and_in_order(cut):
    payloads = [os.urandom(size) for size in SIZES] + [os.urandom(size) for size in reversed(SIZES)]
    got = await _frames_through(payloads, cut)
    assert got == payloads
    assert all(type(frame) is bytes for frame in got)  # as the faces' decoders take them


@pytest.mark.parametrize("cut", [None, 1000, 70_000], ids=["at-once", "1000-byte-writes", "70000-byte-writes"])
def test_on_uvloop_as_the_gateway_runs(cut):
    payloads = [os.urandom(size) for size in SIZES] + [os.urandom(size) for size in reversed(SIZES)]
    loop = uvloop.new_event_loop()
    try:
        assert loop.run_until_complete(_frames_through(payloads, cut)) == payloads
    finally:
        loop.close()


async def test_a_connection_ending_amid_a_large_frame_says_how_much_came():
    outcome = asyncio.get_running_loop().create_future()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        try:
            await reader.readexactly(size)
        except asyncio.IncompleteReadError as exc:
            outcome.set_result(exc)
        else:
            outcome.set_result(None)

    listener = await TcpListener("test", handler, reader=FrameReader).start("127.0.0.1", 0)
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        sent = os.urandom(200_000)
        writer.write(struct.pack(">i", 300_000) + sent)
        await writer.drain()
        writer.close()
        exc = await asyncio.wait_for(outcome, 30)
    finally:
        await listener.close(grace=1)
    assert isinstance(exc, asyncio.IncompleteReadError)
    assert (exc.partial, exc.expected) == (sent, 300_000)
