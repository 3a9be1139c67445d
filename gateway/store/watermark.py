"""The watermark index of each partition, beside its log: markers by offset, W_SNAPSHOTs, and the
markers of transactions not settled yet. One script per step, all keys under the partition's tag.

What a marker or a snapshot means is `gateway.domain.watermark`'s business; here they are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import ErrorCode, error_for
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts

COUNTS, ABORTED, OPEN = "c", "a", "o"


@dataclass(frozen=True)
class IndexedMark:
    """A marker as the index holds it, with whether it counts now (COUNTS, ABORTED or OPEN)."""

    offset: int
    body: bytes
    status: str


@dataclass(frozen=True)
class MarkAppend:
    """A marker for one partition; `txn_id` with the transaction's producer id and epoch, or ''.
    With `since` >= 0, it is not written if a mark starting with `owner` is at or after that offset."""

    topic: str
    partition: int
    batch: bytes
    body: bytes
    txn_id: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    since: int = -1
    owner: bytes = b""


@dataclass(frozen=True)
class SnapshotWrite:
    """A snapshot of one partition covering the marks below `offset`, with the offsets of the marks
    of transactions then open."""

    topic: str
    partition: int
    offset: int
    pending: list[int]
    data: bytes


@dataclass(frozen=True)
class IndexRead:
    """What the watermark of a partition at `offset` is made of (see `WatermarkStore.read`)."""

    offset: int
    high_watermark: int
    stable: int
    snapshot_offset: int  # -1: none, the marks start at the beginning
    snapshot: bytes | None
    pending: dict[int, str]  # the snapshot's pending marks: offset -> status now
    marks: list[IndexedMark]  # from the snapshot to the offset
    ahead: list[IndexedMark]  # from the offset on, below the last stable offset, if asked for
    ahead_complete: bool  # `ahead` holds every mark up to the last stable offset

    @property
    def entries_read(self) -> int:
        """Index entries this read touched: the work a watermark lookup costs."""
        return (self.snapshot is not None) + len(self.pending) + len(self.marks) + len(self.ahead)


def _marks(flat: list[Any]) -> list[IndexedMark]:
    out = []
    for i in range(0, len(flat), 2):
        member: bytes = flat[i]
        offset, _, body = member.split(b" ", 2)
        out.append(IndexedMark(int(offset), body, flat[i + 1].decode()))
    return out


class WatermarkStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts
        self.entries_read = 0  # by every read so far

    async def append(self, requests: list[MarkAppend]) -> list[tuple[int, int] | Exception]:
        """Each marker into its log and index, all in one round trip: (offset, markers since the
        partition's latest snapshot), (-1, 0) when `since` held it back, or the error that refused it."""
        calls = [
            (
                "watermark-append-7",
                [keys.log(r.topic, r.partition), keys.meta(r.topic, r.partition), keys.open_txns(r.topic, r.partition),
                 keys.producers(r.topic, r.partition), keys.wm_marks(r.topic, r.partition),
                 keys.wm_meta(r.topic, r.partition), keys.wm_txns(r.topic, r.partition)],
                # batch, mark, txn, pid, epoch, since, owner
                [r.batch, r.body, r.txn_id, r.producer_id, r.producer_epoch, r.since, r.owner],
            )
            for r in requests
        ]
        async with storage_errors():
            replies = await self.scripts.call_many(calls)
        out: list[tuple[int, int] | Exception] = []
        for r, reply in zip(requests, replies, strict=True):
            if isinstance(reply, Exception):
                out.append(reply)
            elif reply[0] != ErrorCode.OK:
                out.append(error_for(reply[0], f"{r.topic}-{r.partition}"))
            else:
                out.append((int(reply[1]), int(reply[2])))
        return out

    async def read(
        self, parts: list[tuple[str, int, int]], *, committed: bool = True, ahead: int = 0
    ) -> list[IndexRead]:
        """For each (topic, partition, offset; -1 for the high watermark): the latest snapshot at or
        below the offset and the marks after it up to the offset, in one round trip. `committed`
        reads at most up to the last stable offset; `ahead` also returns that many marks after it."""
        calls = [
            (
                "watermark-read-6",
                [keys.meta(t, p), keys.open_txns(t, p), keys.aborted_txns(t, p), keys.wm_marks(t, p),
                 keys.wm_snapshots(t, p), keys.wm_snapshot_data(t, p)],
                # offset, committed, ahead
                [offset, 1 if committed else 0, ahead],
            )
            for t, p, offset in parts
        ]
        async with storage_errors():
            replies = await self.scripts.call_many(calls)
        out = []
        for (t, p, _), reply in zip(parts, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            if reply[0] != ErrorCode.OK:
                raise error_for(reply[0], f"{t}-{p}")
            _, at, hw, lso, base, blob, pending, found, more = reply
            flat = list(pending)
            later = _marks(more)
            out.append(IndexRead(
                int(at), int(hw), int(lso), int(base), blob or None,
                {int(flat[i]): flat[i + 1].decode() for i in range(0, len(flat), 2)},
                _marks(found), later, len(later) < ahead,
            ))
        self.entries_read += sum(r.entries_read for r in out)
        return out

    async def snapshot(self, writes: list[SnapshotWrite]) -> list[bool]:
        """Store each snapshot (False where a later one exists) and prune what the log start has left
        behind, all in one round trip."""
        calls = [
            (
                "watermark-snapshot-5",
                [keys.meta(w.topic, w.partition), keys.wm_marks(w.topic, w.partition),
                 keys.wm_snapshots(w.topic, w.partition), keys.wm_snapshot_data(w.topic, w.partition),
                 keys.wm_meta(w.topic, w.partition)],
                # offset, pending, snapshot
                [w.offset, " ".join(map(str, w.pending)), w.data],
            )
            for w in writes
        ]
        async with storage_errors():
            replies = await self.scripts.call_many(calls)
        out = []
        for w, reply in zip(writes, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            if reply[0] != ErrorCode.OK:
                raise error_for(reply[0], f"{w.topic}-{w.partition}")
            out.append(bool(reply[1]))
        return out

    async def settle(self, topic: str, partition: int, txn_id: str, commit: bool) -> int:
        """Make a transaction's markers count for good (commit) or drop them (abort); safe to repeat."""
        async with storage_errors():
            reply = await self.scripts.call(
                "watermark-settle-2", [keys.wm_marks(topic, partition), keys.wm_txns(topic, partition)],
                # txn, commit
                [txn_id, 1 if commit else 0],
            )
        return int(reply[1])

    async def unsnapshotted(self, parts: list[tuple[str, int]]) -> list[int]:
        """Markers written since each partition's latest snapshot, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for t, p in parts:
            pipe.hget(keys.wm_meta(t, p), "n")
        async with storage_errors():
            replies = await pipe.execute()
        return [int(r or 0) for r in replies]
