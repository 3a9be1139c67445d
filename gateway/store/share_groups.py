"""Share groups' durable state beside their subscriptions: each group's configs (one versioned
msgpack value, as the cluster-wide configs are kept) and the set of share group ids ListGroups
reads. What a share group has delivered and acknowledged is its subscriptions'
(`store.subscriptions`), one per topic it reads."""

from __future__ import annotations

from gateway.store import keys
from gateway.store.cluster_config import ClusterConfigStore
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts


class ShareGroupStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    def configs(self, group_id: str) -> ClusterConfigStore:
        """The group's configs, read and replaced as the cluster-wide ones are."""
        return ClusterConfigStore(self.redis, self.scripts, key=keys.share_group_config(group_id))

    async def remember(self, group_id: str, present: bool = True) -> None:
        """Add the group to the share groups ListGroups finds (or, `present` False, take it out)."""
        async with storage_errors():
            # group, add
            await self.scripts.call("share-group-hint-1", [keys.SHARE_GROUPS], [group_id, 1 if present else 0])

    async def exists(self, group_id: str) -> bool:
        """Whether the id is a share group's (the classic and consumer protocols refuse it)."""
        async with storage_errors():
            return bool(await self.redis.sismember(keys.SHARE_GROUPS, group_id))

    async def known(self) -> set[str]:
        async with storage_errors():
            members: set[bytes] = await self.redis.smembers(keys.SHARE_GROUPS)  # type: ignore[assignment]
        return {m.decode() for m in members}
