"""The only code that knows Redis key names and calls scripts."""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway import clock
from gateway.store import keys
from gateway.store.client_metrics import ClientMetricsStore
from gateway.store.cluster_config import ClusterConfigStore
from gateway.store.compaction import CleanerStore
from gateway.store.connection import RedisClient, SentinelRedis, connect, storage_errors, wait_reachable
from gateway.store.consumer_groups import ConsumerGroupStore
from gateway.store.delay import DelayStore
from gateway.store.delegation_tokens import DelegationTokenStore
from gateway.store.fence import FenceStore
from gateway.store.groups import GroupStore
from gateway.store.key_shared import KeySharedStore
from gateway.store.lag_history import LagHistoryStore
from gateway.store.log import LogStore
from gateway.store.memory import MemoryStore
from gateway.store.quotas import QuotaStore
from gateway.store.registry import RegistryStore
from gateway.store.replication import DurableScripts, Replication
from gateway.store.roles import RoleStore
from gateway.store.schemas import SchemaAllocStore
from gateway.store.scripts import Scripts
from gateway.store.security import SecurityStore
from gateway.store.share_groups import ShareGroupStore
from gateway.store.streams_groups import StreamsGroupStore
from gateway.store.subscriptions import SubscriptionStore
from gateway.store.tier import TierStore
from gateway.store.txn import TxnStore
from gateway.store.txn_offsets import TxnOffsetStore
from gateway.store.wakeups import LogWakeups
from gateway.store.watermark import WatermarkStore


class Store:
    """Everything persistent, behind one Redis client that no code outside this package sees.

    Each sub-store is built here once, over that client and one script cache; the domain is given
    this object and picks the sub-stores it needs, so nothing else ever holds a raw client."""

    def __init__(self, redis: RedisClient) -> None:
        self._redis = redis
        plain = Scripts(redis)
        self.replication = Replication(redis, plain, plain.specs.values())
        # the state changes a client is told are done wait for the replicas (see `replication`)
        scripts = DurableScripts(plain, self.replication)
        self._scripts = scripts
        self.log = LogStore(redis, scripts, self.replication)
        self.memory = MemoryStore(redis, self.replication)
        self.txn = TxnStore(redis, scripts, self.replication)
        self.txn_offsets = TxnOffsetStore(redis, scripts)
        self.fence = FenceStore(redis, scripts)
        self.delay = DelayStore(redis, scripts)
        self.groups = GroupStore(redis, scripts)
        self.lag_history = LagHistoryStore(redis, scripts)
        self.consumer_groups = ConsumerGroupStore(redis, scripts)
        self.streams_groups = StreamsGroupStore(redis, scripts)
        self.subscriptions = SubscriptionStore(redis, scripts)
        self.key_shared = KeySharedStore(redis, scripts)
        self.watermark = WatermarkStore(redis, scripts)
        self.security = SecurityStore(redis, scripts)
        self.delegation_tokens = DelegationTokenStore(redis, scripts)
        self.roles = RoleStore(redis, scripts)
        self.registry = RegistryStore(redis, scripts)
        self.cluster_config = ClusterConfigStore(redis, scripts)
        self.features = ClusterConfigStore(redis, scripts, keys.FEATURES)
        self.cleaner = CleanerStore(redis, scripts)
        self.tier = TierStore(redis, scripts)
        self.share_groups = ShareGroupStore(redis, scripts)
        self.schemas = SchemaAllocStore(scripts)
        self.client_metrics = ClientMetricsStore(redis, scripts)
        self.quotas = QuotaStore(redis, scripts)

    def broker_config(self, node_id: int) -> ClusterConfigStore:
        """One gateway's own dynamic broker configs, kept as the cluster-wide ones are."""
        return ClusterConfigStore(self._redis, self._scripts, keys.broker_config(node_id))

    @classmethod
    def open(cls, url: str) -> Store:
        return cls(connect(url))

    def open_wakeups(self, on_wake: Callable[[str, int], None]) -> LogWakeups:
        """A listener for other gateways' writes to the logs, calling `on_wake(topic, partition)`.
        It subscribes on connections of its own, so its owner closes it (before the store)."""
        return LogWakeups(self._redis, on_wake)

    async def ping(self) -> bool:
        return bool(await self._redis.ping())

    async def wait_reachable(self, url: str, timeout: float) -> None:
        """Until Redis answers; `StorageUnavailable` after `timeout` seconds of no answer."""
        await wait_reachable(self._redis, url, timeout)

    async def sync_clock(self, readings: int = 3) -> None:
        """Set `gateway.clock` to Redis's `TIME`, taken as read at the midpoint of its round trip: of
        a few readings the one with the shortest, as a busy event loop that resumes late skews the
        midpoint by half its delay. Behind Sentinel that is the primary's clock; on a Cluster one
        node's, so the Redis hosts' clocks are expected to agree (NTP), as Kafka's brokers' are."""
        best = (float("inf"), 0.0, 0.0)  # round trip, Redis's ms, the monotonic moment they go with
        for _ in range(readings):
            sent = time.monotonic()
            async with storage_errors():
                seconds, micros = await self._redis.time()
            got = time.monotonic()
            best = min(best, (got - sent, seconds * 1000 + micros / 1000, (sent + got) / 2))
        clock.follow(best[1], best[2])

    async def follow_primary(self) -> None:
        """Behind Sentinel, for ever: every connection to a node the Sentinels no longer name the
        primary is dropped (`SentinelRedis.follow_primary`); returns at once elsewhere (a Cluster's
        clients follow its MOVED answers, and one Redis has no other)."""
        if isinstance(self._redis, SentinelRedis):
            await self._redis.follow_primary(self._follow)

    def _follow(self, primary: tuple[str, int]) -> None:
        for direct in (self.log.direct, self.log.ordered, self.replication.connections):
            direct.follow(primary)

    async def close(self) -> None:
        self.log.direct.close()
        self.log.ordered.close()
        self.replication.close()
        await self._redis.aclose()
