"""The domain services one gateway process runs, shared by every face."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import Config
from gateway.log import LogService
from gateway.store import Store


@dataclass
class Services:
    config: Config
    store: Store
    log: LogService

    @classmethod
    def open(cls, config: Config, redis_url: str) -> Services:
        store = Store.open(redis_url)
        log = LogService(store, auto_create=config.auto_create_topics, default_partitions=config.default_partitions)
        return cls(config, store, log)

    async def close(self) -> None:
        await self.store.close()
