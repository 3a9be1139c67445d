"""Offsets a transaction commits for a consumer group (Kafka's TxnOffsetCommit): pending until the
transaction ends, then applied or dropped by one script in the group's slot."""

from __future__ import annotations

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.groups import CommittedOffset, packed_offsets
from gateway.store.scripts import Scripts


class TxnOffsetStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def stage(self, group_id: str, txn_id: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        if not offsets:
            return
        async with storage_errors():
            # offsets
            await self.scripts.call(
                "txn-offsets-stage-1", [keys.group_txn_offsets(group_id, txn_id)], [packed_offsets(offsets)])

    async def settle(self, group_id: str, txn_id: str, commit: bool) -> int:
        async with storage_errors():
            reply = await self.scripts.call(
                "txn-offsets-settle-2",
                [keys.group_txn_offsets(group_id, txn_id), keys.group_offsets(group_id)],
                # commit
                [1 if commit else 0],
            )
        return int(reply[1])
