"""Range reads, whose positions the reader keeps: ListPartitions and ReadRange."""

from __future__ import annotations

from gateway import telemetry
from gateway.domain.security import Operation, ResourceType
from gateway.errors import InvalidRequest
from gateway.formats.frames import OutgoingEntry, range_frame
from gateway.native.dispatch import Encoded, Session, handles
from gateway.pb import gateway_pb2 as pb

_RANGE_BYTES = 1 << 20  # a range read's answer when the reader names no size


@handles("list_partitions")
async def list_partitions(s: Session, req: pb.Request) -> pb.Response:
    await s.authorize(ResourceType.TOPIC, req.list_partitions.topic, Operation.DESCRIBE)
    bounds = await s.services.log.partition_bounds(req.list_partitions.topic)
    infos = [
        pb.PartitionInfo(partition=b.partition, log_start=b.log_start, high_watermark=b.high_watermark,
                         last_stable_offset=b.last_stable_offset)
        for b in bounds
    ]
    return pb.Response(partitions=pb.Partitions(partitions=infos))


@handles("read_range")
async def read_range(s: Session, req: pb.Request) -> Encoded:
    """Answered as chunks: the batches go to the socket uncopied."""
    r = req.read_range
    await s.authorize(ResourceType.TOPIC, r.topic, Operation.READ)
    if r.start < 0 or (r.end >= 0 and r.end < r.start):
        raise InvalidRequest(f"no offset range [{r.start}, {r.end})")
    max_bytes = min(r.max_bytes or _RANGE_BYTES, s.services.config.max_frame_bytes // 2)
    got = await s.services.log.read_range(r.topic, r.partition, r.start, r.end, max_bytes)
    entries = [OutgoingEntry(r.partition, e.base_offset, e.batch) for e in got.entries]
    telemetry.fetched("native", r.topic, sum(len(e.batch) for e in got.entries))
    return Encoded(range_frame(req.request_id, entries, got.next_offset, got.last_stable_offset))
