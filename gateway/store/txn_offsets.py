"""Offsets a transaction commits for a consumer group (Kafka's TxnOffsetCommit): pending until the
transaction ends, then applied or dropped by one script in the group's slot."""

from __future__ import annotations

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.groups import CommittedOffset, _field, packed_offsets
from gateway.store.scripts import Scripts


class TxnOffsetStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def stage(self, group_id: str, txn_id: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        if not offsets:
            return
        async with storage_errors():
            # offsets, txn
            await self.scripts.call(
                "txn-offsets-stage-2", [keys.group_txn_offsets(group_id, txn_id), keys.group_txn_open(group_id)],
                [packed_offsets(offsets), txn_id])

    async def settle(self, group_id: str, txn_id: str, commit: bool) -> int:
        async with storage_errors():
            reply = await self.scripts.call(
                "txn-offsets-settle-3",
                [keys.group_txn_offsets(group_id, txn_id), keys.group_offsets(group_id), keys.group_txn_open(group_id)],
                # commit, txn
                [1 if commit else 0, txn_id],
            )
        return int(reply[1])

    async def pending(self, group_id: str, parts: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """Which of `parts` an open transaction has offsets pending for, in this group."""
        if not parts:
            return set()
        async with storage_errors():
            open_txns = await self.redis.smembers(keys.group_txn_open(group_id))
            if not open_txns:
                return set()
            fields = [_field(topic, partition) for topic, partition in parts]
            pipe = self.redis.pipeline(transaction=False)
            for txn_id in sorted(t.decode() if isinstance(t, bytes) else str(t) for t in open_txns):
                pipe.hmget(keys.group_txn_offsets(group_id, txn_id), fields)
            found = await pipe.execute()
        return {part for values in found for part, value in zip(parts, values, strict=True) if value is not None}
