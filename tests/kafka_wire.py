"""Raw Kafka frames for tests that need what no client sends (or a precise look at a response)."""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from gateway.formats.records import BatchBuilder
from gateway.kafka import codec

TIMEOUT = 10

# A DescribeConfigs v4 body whose first array claims four billion resources: kio's reader would try
# to allocate 32 GB for it and abort the whole process.
LYING_ARRAY = bytes.fromhex("dca3b4fd0ef7a9e10e9afd3e09be5adbda172bab2e3130e6cfd2a59c0b819cda")


def frame(api_key: int, version: int, correlation_id: int, body: bytes, *, flexible_header: bool = False) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    if flexible_header:
        head += b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + body


def idempotent_batch(value: bytes, seq: int, pid: int = 4242, epoch: int = 0) -> bytes:
    """One record from idempotent producer `pid` at sequence `seq`, as a client's batch carries it."""
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    b.append(value, None, [], None)
    return b.build()


def request(req: Any, correlation_id: int) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(req))(buf, req)
    return frame(req.__api_key__, req.__version__, correlation_id, buf.getvalue(),
                 flexible_header=req.__header_schema__.__flexible__)


def build_request(api_key: int, version: int, values: dict[str, Any] | None = None) -> Any:
    return codec.build(codec.request_class(api_key, version), values or {})


async def read_response(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), TIMEOUT))
    return await asyncio.wait_for(reader.readexactly(size), TIMEOUT)


def decode(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """(correlation id, kio response) from a response payload."""
    (cid,) = struct.unpack_from(">i", payload)
    offset = 5 if codec.response_header_flexible(api_key, version) else 4
    resp, _ = entity_reader(codec.response_class(api_key, version))(payload, offset)
    return cid, resp


async def call(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], api_key: int, version: int,
               values: dict[str, Any] | None = None) -> Any:
    """Send one request and return its decoded response."""
    reader, writer = conn
    writer.write(request(build_request(api_key, version, values), 99))
    cid, resp = decode(api_key, version, await read_response(reader))
    assert cid == 99
    return resp
