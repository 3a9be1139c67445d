"""Produce requests (v3-v13) read by hand: the records stay views of the request frame.

kio's generic reader copies each partition's records twice (into a Rust buffer and out into new
bytes) and builds an object per field; on the produce path that was most of a request's cost after
the socket reads. This walker reads the few fields the handler uses, hands the records on as
`memoryview`s of the frame (never copied, never decoded), and skips tagged fields. It follows
Kafka's ProduceRequest.json (v3-v13: `TransactionalId`, `Acks`, `TimeoutMs`, `TopicData` of
`Name` (v13: `TopicId`, KIP-516) and `PartitionData` of `Index` and `Records`; compact encodings
and tagged fields from v9)
and is held to kio's decoding of the same bytes in the tests. Anything that runs past the frame is
a MalformedRequest, as kio's failures are.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import NamedTuple

from gateway.formats.varint import VarintError, read_uvarint
from gateway.kafka.errors import MalformedRequest

MIN_VERSION, MAX_VERSION = 3, 13
FLEXIBLE_FROM = 9
TOPIC_IDS_FROM = 13
_ZERO_ID = bytes(16)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class PartitionData:
    index: int
    records: memoryview | None


class TopicData(NamedTuple):
    name: str  # "" from v13, which names the topic by id alone
    partition_data: list[PartitionData]
    topic_id: uuid.UUID | None = None  # from v13


class ProduceRequest(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicData]


def decode_produce_request(frame: bytes | memoryview, version: int, pos: int) -> ProduceRequest:
    """The Produce request of `version` whose body starts at `pos`; trailing bytes are ignored."""
    try:
        return _Walker(frame, version >= FLEXIBLE_FROM, version >= TOPIC_IDS_FROM).request(pos)
    except (struct.error, VarintError, IndexError) as exc:
        raise MalformedRequest(f"cannot decode api 0 v{version}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise MalformedRequest(f"cannot decode api 0 v{version}: a string is not UTF-8") from exc


class _Walker:
    __slots__ = ("buf", "by_id", "end", "flexible", "pos", "view")

    def __init__(self, frame: bytes | memoryview, flexible: bool, by_id: bool) -> None:
        self.buf = frame
        self.view = memoryview(frame)
        self.end = len(frame)
        self.flexible = flexible
        self.by_id = by_id
        self.pos = 0

    def request(self, pos: int) -> ProduceRequest:
        self.pos = pos
        tid = self._string()
        if self.pos + 6 > self.end:
            raise MalformedRequest("produce request ends before its acks and timeout")
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(self.buf, self.pos)
        self.pos += 6
        topics = [self._topic() for _ in range(self._count())]
        self._tags()
        return ProduceRequest(tid, acks, timeout_ms, topics)

    def _topic(self) -> TopicData:
        if self.by_id:
            if self.pos + 16 > self.end:
                raise MalformedRequest("produce request ends inside a topic id")
            raw = bytes(self.view[self.pos:self.pos + 16])
            self.pos += 16
            topic_id = None if raw == _ZERO_ID else uuid.UUID(bytes=raw)  # the zero id names no topic
            parts = [self._partition() for _ in range(self._count())]
            self._tags()
            return TopicData("", parts, topic_id)
        name = self._string()
        if name is None:
            raise MalformedRequest("a produce request names a topic null")
        parts = [self._partition() for _ in range(self._count())]
        self._tags()
        return TopicData(name, parts)

    def _partition(self) -> PartitionData:
        if self.pos + 4 > self.end:
            raise MalformedRequest("produce request ends inside a partition")
        (index,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        n = self._length(wide=True)
        records = None
        if n >= 0:
            records = self.view[self.pos:self.pos + n]
            self.pos += n
        self._tags()
        return PartitionData(index, records)

    def _length(self, *, wide: bool) -> int:
        """A length prefix (-1: null), checked against the bytes left."""
        if self.flexible:
            n = self._uvarint() - 1
        elif wide:
            (n,) = _I32.unpack_from(self.buf, self.pos)
            self.pos += 4
        else:
            (n,) = _I16.unpack_from(self.buf, self.pos)
            self.pos += 2
        if n > self.end - self.pos:
            raise MalformedRequest(f"a field claims {n} bytes with {self.end - self.pos} left")
        return n

    def _uvarint(self) -> int:
        """A compact length or tag: one byte nearly always, read in place."""
        b = self.buf[self.pos]
        if b < 0x80:
            self.pos += 1
            return b
        n, self.pos = read_uvarint(self.buf, self.pos)
        return n

    def _count(self) -> int:
        """An array's length; null counts as empty (kio reads a null array as an empty tuple)."""
        return max(self._length(wide=True), 0)

    def _string(self) -> str | None:
        n = self._length(wide=False)
        if n < 0:
            return None
        s = bytes(self.view[self.pos:self.pos + n]).decode()
        self.pos += n
        return s

    def _tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self._uvarint()):
            self._uvarint()  # the tag
            self.pos += self._uvarint()
            if self.pos > self.end:
                raise MalformedRequest("a tagged field runs past the request")
