"""The domain services one gateway process runs, shared by every face."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import Config
from gateway.delay import DelayService
from gateway.fence import FenceService
from gateway.groups import GroupCoordinator, open_coordinator
from gateway.log import LogService
from gateway.producer_txn import TransactionalProducers
from gateway.store import Store
from gateway.txn import TransactionCoordinator
from gateway.watermark import WatermarkService


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

    @classmethod
    def open(cls, config: Config, redis_url: str) -> Services:
        store = Store.open(redis_url)
        log = LogService(store, auto_create=config.auto_create_topics, default_partitions=config.default_partitions)
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
        fence = FenceService(store, txn)
        # registers the group-offset settler now, so a roll-forward after a restart applies offsets too
        producers = TransactionalProducers(store, txn, fence)
        watermark = WatermarkService(store, log, snapshot_marks=config.watermark_snapshot_marks)
        txn.partition_settlers.append(watermark.settle_txn)
        return cls(config, store, log, txn, fence, delay, groups, producers, watermark)

    async def close(self) -> None:
        await self.groups.close()  # hands group leases over and answers waiting clients first
        await self.store.close()
