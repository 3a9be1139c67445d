"""The domain services one gateway process runs, shared by every face."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import Config
from gateway.domain.delay import DelayService
from gateway.domain.fence import FenceService
from gateway.domain.groups.coordinator import GroupCoordinator, open_coordinator
from gateway.domain.log import LogService
from gateway.domain.producer_txn import TransactionalProducers
from gateway.domain.registry import Registry
from gateway.domain.roles import RoleLeases
from gateway.domain.security import SecurityService
from gateway.domain.txn import TransactionCoordinator
from gateway.domain.watermark import WatermarkService
from gateway.store import Store


@dataclass
class Services:
    config: Config
    store: Store
    log: LogService
    txn: TransactionCoordinator
    fence: FenceService
    delay: DelayService
    groups: GroupCoordinator
    txn_producers: TransactionalProducers  # Kafka's transactional.id semantics
    watermark: WatermarkService
    registry: Registry  # the gateways sharing this Redis: Metadata's brokers, who leads what
    roles: RoleLeases  # background roles run by one gateway at a time
    security: SecurityService

    @classmethod
    def open(cls, config: Config, store: Store, registry: Registry) -> Services:
        """Over a store, for a gateway whose node id `registry` has claimed (`config.node_id`)."""
        log = LogService(store, auto_create=config.auto_create_topics, default_partitions=config.default_partitions)
        log.peers = registry.peers
        txn = TransactionCoordinator(
            store,
            coordinator_id=config.node_id,
            default_timeout_ms=config.txn_default_timeout_ms,
            max_timeout_ms=config.txn_max_timeout_ms,
        )
        txn.notify_partition = log.notifier.notify
        delay = DelayService(store, notify_partition=log.notifier.notify)
        txn.partition_settlers.append(delay.settle_txn)
        groups = open_coordinator(store, log, node_id=config.node_id)
        groups.prefers = lambda group_id: registry.group_coordinator(group_id).node_id == config.node_id
        fence = FenceService(store, txn)
        # registers the group-offset settler now, so a roll-forward after a restart applies offsets too
        producers = TransactionalProducers(store, txn, fence)
        watermark = WatermarkService(store, log, snapshot_marks=config.watermark_snapshot_marks)
        txn.partition_settlers.append(watermark.settle_txn)
        roles = RoleLeases(store, config.node_id, registry.instance, lease_ms=config.lease_ms)
        security = SecurityService(
            store, enabled=config.auth, mechanisms=config.sasl_mechanisms.split(","),
            super_users=config.super_users.split(","), admin_token=config.admin_token,
            cache_seconds=config.acl_cache_seconds,
        )
        return cls(config, store, log, txn, fence, delay, groups, producers, watermark, registry, roles, security)

    async def close(self) -> None:
        await self.registry.release()
        await self.groups.close()  # hands group leases over and answers waiting clients first
        await self.log.wakeups.close()
        await self.store.close()
