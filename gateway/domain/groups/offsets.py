"""Committed offsets of a group (Kafka's OffsetCommit and OffsetFetch), whatever its protocol.

The store's commit script checks the committer (member, generation, static instance) and writes in
one step; here are the checks that need no group state (metadata size, partitions that exist). A
classic group's member may commit any partition, owned or not, as Kafka's
`ClassicGroup.validateOffsetCommit` checks only its member id and generation: clients commit what
they consumed just before a rebalance, and a refusal would make them rejoin once more.
Transactional offset commits go through the transaction coordinator instead.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

from gateway.clock import now_ms
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.store.groups import CommittedOffset, GroupStore

MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes

Partition = tuple[str, int]


class OffsetManager:
    """Checks commits before they are written; `partitions` (topic -> partition count, 0 when the
    topic does not exist) makes commits to partitions that do not exist fail, as with Kafka."""

    def __init__(self, store: GroupStore, partitions: Callable[[str], Awaitable[int]] | None = None) -> None:
        self.store = store
        self.partitions = partitions

    async def check(
        self, group_id: str, generation: int, member_id: str, offsets: dict[Partition, tuple[int, int, str | None]]
    ) -> tuple[dict[Partition, GroupErrorKind | None], dict[Partition, CommittedOffset]]:
        """The outcome per partition, and what may be written: (offset, leader epoch, metadata) of
        the partitions that passed."""
        if not group_id:
            raise GroupError(GroupErrorKind.INVALID_GROUP_ID, "the group id is empty")
        outcome: dict[Partition, GroupErrorKind | None] = {}
        good: dict[Partition, CommittedOffset] = {}
        now = now_ms()
        counts: dict[str, int] = {}
        for (topic, partition), (offset, epoch, metadata) in offsets.items():
            if self.partitions is not None and topic not in counts:
                counts[topic] = await self.partitions(topic)
            if metadata is not None and len(metadata.encode()) > MAX_METADATA_BYTES:
                outcome[(topic, partition)] = GroupErrorKind.OFFSET_METADATA_TOO_LARGE
            elif self.partitions is not None and not 0 <= partition < counts[topic]:
                outcome[(topic, partition)] = GroupErrorKind.UNKNOWN_TOPIC_OR_PARTITION
            else:
                outcome[(topic, partition)] = None
                good[(topic, partition)] = CommittedOffset(offset, epoch, metadata or "", now)
        return outcome, good

    async def write(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[Partition, CommittedOffset],
    ) -> None:
        """Store checked offsets; raises when the store refuses the committer."""
        code = await self.store.commit(group_id, generation, member_id, instance_id, offsets)
        if code:
            raise GroupError(GroupErrorKind(code))

    async def fetch(
        self, group_id: str, parts: list[Partition] | None = None
    ) -> dict[Partition, CommittedOffset | None]:
        """Committed offsets; with `parts`, every asked partition appears (None: nothing committed)."""
        found = await self.store.offsets(group_id, parts)
        if parts is None:
            return dict(sorted(found.items()))
        return {p: found.get(p) for p in parts}


def consumer_subscription(raw: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: the topics come first), or None
    when it is not one."""
    try:
        (topics,) = struct.unpack_from(">i", raw, 2)  # after the version
        pos = 6
        out: set[str] = set()
        for _ in range(topics):
            (n,) = struct.unpack_from(">h", raw, pos)
            if n < 0 or pos + 2 + n > len(raw):
                return None
            out.add(raw[pos + 2:pos + 2 + n].decode())
            pos += 2 + n
        return out
    except (struct.error, UnicodeDecodeError):
        return None


def consumer_assignment(raw: bytes) -> set[Partition] | None:
    """The partitions of a ConsumerProtocolAssignment (v0-v3), or None when it is not one."""
    try:
        pos = 2  # version
        (topics,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        out: set[Partition] = set()
        for _ in range(topics):
            (n,) = struct.unpack_from(">h", raw, pos)
            topic = raw[pos + 2:pos + 2 + n].decode()
            pos += 2 + n
            (count,) = struct.unpack_from(">i", raw, pos)
            out.update((topic, p) for p in struct.unpack_from(f">{count}i", raw, pos + 4))
            pos += 4 + 4 * count
        return out
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def encode_consumer_subscription(topics: list[str]) -> bytes:
    """A ConsumerProtocolSubscription v0 of `topics` (no user data)."""
    return struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics) + struct.pack(">i", -1)


def encode_consumer_assignment(partitions: dict[str, frozenset[int]]) -> bytes:
    """A ConsumerProtocolAssignment v0 of `partitions` (no user data)."""
    out = bytearray(struct.pack(">hi", 0, len(partitions)))
    for topic, ps in sorted(partitions.items()):
        out += _string(topic) + struct.pack(f">i{len(ps)}i", len(ps), *sorted(ps))
    return bytes(out + struct.pack(">i", -1))
