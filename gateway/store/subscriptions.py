"""Durable subscription positions: per partition a cursor and the offsets acked above it.

The cursor (Pulsar's mark-delete position) says every offset below it is acknowledged; offsets
acknowledged out of order wait in a sorted set until the acks before them arrive, when a script
moves the cursor over the contiguous run. One script call per partition, all pipelined.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.clock import now_ms
from gateway.errors import ConsumerBusy, ErrorCode, TransactionConflict, error_for
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts


@dataclass(frozen=True)
class Position:
    """Where a subscription stands on one partition when it is opened."""

    cursor: int
    max_acked: int  # the highest offset acked individually above the cursor, -1 if none
    created: bool


@dataclass(frozen=True)
class Settled:
    """What settling a transaction on one partition of a subscription touched."""

    cursor: int  # -1 when the subscription is gone
    upto: int  # the transaction's cumulative ack (every offset below), -1 if none
    offsets: list[int]  # its individual acks


@dataclass(frozen=True)
class Standing:
    """Where some offsets of one partition stand on a subscription (`SubscriptionStore.standing`)."""

    acked: set[int]
    locked: dict[int, str]  # offset: the transaction holding it (PIP-31's PENDING_ACK)
    locks: bool  # whether a transaction holds any offset of the partition


class PendingAckConflict(TransactionConflict):
    """An offset is locked by another transaction (`holder`), or acked already (holder "")."""

    def __init__(self, topic: str, partition: int, holder: str) -> None:
        what = f"transaction {holder}" if holder else "an earlier acknowledgement"
        super().__init__(f"{topic}-{partition}: a message is held by {what}")
        self.partition = partition
        self.holder = holder


class SubscriptionStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    def _keys(self, topic: str, partition: int, name: str) -> list[str]:
        return [
            keys.subscription(topic, partition, name),
            keys.sub_acks(topic, partition, name),
            keys.meta(topic, partition),
            keys.sub_pending(topic, partition, name),
        ]

    async def _run(self, calls: list[tuple[str, str, int, list[str], list[Any]]]) -> list[list[Any]]:
        """(script, topic, partition, keys, argv) calls in one round trip; error codes raised typed."""
        async with storage_errors():
            replies: list[Any] = await self.scripts.call_many([(script, ks, argv) for script, _, _, ks, argv in calls])
        for (_, topic, partition, _, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            if reply[0] == ErrorCode.TRANSACTION_CONFLICT:
                raise PendingAckConflict(topic, partition, reply[1].decode())
            if reply[0] != ErrorCode.OK:
                raise error_for(reply[0], f"{topic}-{partition}")
        return replies

    async def open(
        self, topic: str, partitions: Sequence[int], name: str, *, initial: str, mode: str
    ) -> list[Position]:
        """Create (at `initial`: 'earliest' or 'latest') or load the subscription on each partition."""
        now = now_ms()
        calls = [
            # name, initial, mode, now_ms
            ("sub-open-4", topic, p, [*self._keys(topic, p, name)[:3], keys.subscriptions_of(topic, p)],
             [name, initial, mode, now])
            for p in partitions
        ]
        return [Position(int(r[1]), int(r[2]), bool(r[3])) for r in await self._run(calls)]

    async def ack(
        self, topic: str, name: str, acks: dict[int, tuple[int, list[int]]]
    ) -> dict[int, int]:
        """Per partition (cumulative upto or -1, individual offsets); returns the new cursors."""
        calls = [
            # upto, offsets
            ("sub-ack-4", topic, p, self._keys(topic, p, name), [upto, " ".join(map(str, offsets))])
            for p, (upto, offsets) in acks.items()
        ]
        replies = await self._run(calls)
        return {p: int(r[1]) for p, r in zip(acks, replies, strict=True)}

    async def delivered(self, topic: str, name: str, limit: int,
                        offsets: dict[int, list[int]]) -> dict[int, dict[int, int] | None]:
        """Count a delivery of these offsets (ascending), per partition; each offset's count with it,
        or minus its count for one delivered `limit` times already (not counted again: it is to be
        archived); None for a partition whose offsets all go out for the first time."""
        calls = [
            # limit, offsets
            ("sub-deliver-3", topic, p,
             [keys.subscription(topic, p, name), keys.sub_deliveries(topic, p, name), keys.sub_acks(topic, p, name)],
             [limit, _ranges(offs)])
            for p, offs in offsets.items()
        ]
        replies = await self._run(calls)
        return {p: None if int(r[1]) else dict(zip(offs, map(int, r[2:]), strict=True))
                for (p, offs), r in zip(offsets.items(), replies, strict=True)}

    async def undelivered(self, topic: str, name: str, offsets: dict[int, list[int]]) -> None:
        """Take back the delivery `delivered` counted for these offsets (ascending), per partition:
        they were handed out but never reached a consumer."""
        await self._run([
            # offsets
            ("sub-undeliver-2", topic, p, [keys.subscription(topic, p, name), keys.sub_deliveries(topic, p, name)],
             [_ranges(offs)])
            for p, offs in offsets.items() if offs
        ])

    async def lock(self, topic: str, name: str, txn_id: str, acks: dict[int, tuple[int, list[int]]]) -> None:
        """Lock offsets for a transaction, per partition (cumulative upto or -1, individual offsets).
        PendingAckConflict when another transaction holds one or it is acked already; partitions
        locked before the conflicting one stay locked (the transaction must abort anyway)."""
        calls = [
            # txn, upto, offsets
            ("sub-txn-ack-4", topic, p, self._keys(topic, p, name), [txn_id, upto, " ".join(map(str, offsets))])
            for p, (upto, offsets) in acks.items()
        ]
        await self._run(calls)

    async def settle(self, topic: str, partition: int, name: str, txn_id: str, commit: bool) -> Settled:
        """Ack (commit) or release (abort) what the transaction locked; safe to repeat."""
        # txn, commit
        (r,) = await self._run([("sub-txn-settle-4", topic, partition, self._keys(topic, partition, name),
                                 [txn_id, 1 if commit else 0])])
        return Settled(int(r[1]), int(r[2]), [int(o) for o in r[3:]])

    async def seek(self, topic: str, name: str, targets: dict[int, int]) -> dict[int, int]:
        """Move cursors (offset, -1 log start, -2 high watermark); returns where each landed."""
        calls = [
            # offset
            ("sub-seek-4", topic, p, [*self._keys(topic, p, name)[:3], keys.sub_deliveries(topic, p, name)], [offset])
            for p, offset in targets.items()
        ]
        replies = await self._run(calls)
        return {p: int(r[1]) for p, r in zip(targets, replies, strict=True)}

    async def acked_in(self, topic: str, name: str, ranges: dict[int, tuple[int, int]]) -> dict[int, set[int]]:
        """Offsets acked individually within [lo, hi) of each partition, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for p, (lo, hi) in ranges.items():
            pipe.zrangebyscore(keys.sub_acks(topic, p, name), lo, f"({hi}")
        async with storage_errors():
            replies = await pipe.execute()
        return {p: {int(m) for m in r} for p, r in zip(ranges, replies, strict=True)}

    async def standing(self, topic: str, name: str, offsets: dict[int, set[int]]) -> dict[int, Standing]:
        """Which of these offsets are acknowledged and which a transaction holds, in one round trip.
        The locks are read first: a transaction settles its locks and acks in one script, so an
        offset seen free was acked, if at all, before the acks are read (zset before cursor alike)."""
        parts = [p for p, offs in offsets.items() if offs]
        pipe = self.redis.pipeline(transaction=False)
        for p in parts:
            pipe.hgetall(keys.sub_pending(topic, p, name))
            pipe.zrangebyscore(keys.sub_acks(topic, p, name), min(offsets[p]), max(offsets[p]))
            pipe.hget(keys.subscription(topic, p, name), "cursor")
        async with storage_errors():
            replies = await pipe.execute()
        out: dict[int, Standing] = {}
        for i, p in enumerate(parts):
            pending, acks, cursor = replies[3 * i:3 * i + 3]
            held: dict[int, str] = {}
            upto, cumulative = -1, ""
            for field, holder in pending.items():
                if field == b"c":
                    txn, _, n = holder.decode().partition(" ")
                    upto, cumulative = int(n), txn
                else:
                    held[int(field)] = holder.decode()
            below = int(cursor) if cursor is not None else 0
            offs = offsets[p]
            acked = {o for o in offs if o < below} | {int(m) for m in acks}
            locked = {o: held.get(o) or cumulative for o in offs - acked if o in held or o < upto}
            out[p] = Standing(acked & offs, locked, bool(pending))
        return out

    async def positions(self, topic: str, partitions: range) -> dict[str, dict[int, int]]:
        """Every subscription of the topic with its cursor on each partition, in two round trips."""
        out: dict[str, dict[int, int]] = {}
        for (_, p), cursors in (await self.positions_of([(topic, p) for p in partitions])).items():
            for name, cursor in cursors.items():
                out.setdefault(name, {})[p] = cursor
        return out

    async def positions_of(self, parts: list[tuple[str, int]]) -> dict[tuple[str, int], dict[str, int]]:
        """Per partition, every subscription on it with its cursor, in two round trips however many."""
        pipe = self.redis.pipeline(transaction=False)
        for t, p in parts:
            pipe.smembers(keys.subscriptions_of(t, p))
        async with storage_errors():
            names = await pipe.execute()
        wanted = [(tp, n.decode()) for tp, members in zip(parts, names, strict=True) for n in sorted(members)]
        pipe = self.redis.pipeline(transaction=False)
        for (t, p), name in wanted:
            pipe.hget(keys.subscription(t, p, name), "cursor")
        async with storage_errors():
            cursors = await pipe.execute()
        out: dict[tuple[str, int], dict[str, int]] = {}
        for (tp, name), cursor in zip(wanted, cursors, strict=True):
            if cursor is not None:
                out.setdefault(tp, {})[name] = int(cursor)
        return out

    async def delete(self, topic: str, partitions: range, name: str) -> None:
        """Forget the subscription everywhere: positions, acks, and the dispatch lease."""
        calls = [
            # name
            ("sub-delete-5", topic, p,
             [keys.subscription(topic, p, name), keys.sub_acks(topic, p, name), keys.subscriptions_of(topic, p),
              keys.sub_pending(topic, p, name), keys.sub_deliveries(topic, p, name)],
             [name])
            for p in partitions
        ]
        await self._run(calls)
        async with storage_errors():
            await self.redis.delete(keys.subscription_owner(topic, name), keys.subscription_owners(topic, name))

    async def _lease(self, topic: str, name: str, node: int, ttl_ms: int, partitions: str) -> list[Any]:
        async with storage_errors():
            # node, ttl_ms, partitions
            reply: list[Any] = await self.scripts.call(
                "sub-lease-2", [keys.subscription_owner(topic, name), keys.subscription_owners(topic, name)],
                [node, ttl_ms, partitions])
        return reply

    async def lease(self, topic: str, name: str, node: int, ttl_ms: int) -> None:
        """Take or renew this node's lease on dispatching the whole subscription (ttl 0 releases it);
        ConsumerBusy when another gateway holds it or any of its partitions."""
        reply = await self._lease(topic, name, node, ttl_ms, "*")
        if reply[0] != ErrorCode.OK:
            raise ConsumerBusy(f"subscription {name!r} on {topic!r} is served by gateway {reply[1].decode()}")

    async def lease_partitions(self, topic: str, name: str, node: int, ttl_ms: int,
                               partitions: list[int]) -> dict[int, int]:
        """Take or renew (ttl 0: give up) this node's leases on dispatching some partitions of the
        subscription; those another gateway holds, with its node id (the rest are this node's)."""
        if not partitions:
            return {}
        reply = await self._lease(topic, name, node, ttl_ms, " ".join(map(str, partitions)))
        return {p: int(h) for p, h in zip(partitions, reply[1:], strict=True) if h}


def _ranges(offsets: list[int]) -> str:
    """Ascending offsets as space-separated offsets and first-last runs."""
    out: list[str] = []
    i = 0
    while i < len(offsets):
        j = i
        while j + 1 < len(offsets) and offsets[j + 1] == offsets[j] + 1:
            j += 1
        out.append(str(offsets[i]) if i == j else f"{offsets[i]}-{offsets[j]}")
        i = j + 1
    return " ".join(out)
