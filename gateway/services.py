"""The domain services one gateway process runs, shared by every face."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import Config
from gateway.delay import DelayService
from gateway.fence import FenceService
from gateway.log import LogService
from gateway.store import Store
from gateway.txn import TransactionCoordinator


@dataclass
class Services:
    config: Config
    store: Store
    log: LogService
    txn: TransactionCoordinator
    fence: FenceService
    delay: DelayService

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
        return cls(config, store, log, txn, FenceService(store, txn), delay)

    async def close(self) -> None:
        await self.store.close()
