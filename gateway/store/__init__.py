"""The only code that knows Redis key names and calls scripts."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.store.connection import RedisClient, connect
from gateway.store.log import LogStore
from gateway.store.scripts import Scripts


@dataclass
class Store:
    """Everything persistent, behind one Redis client."""

    redis: RedisClient
    scripts: Scripts
    log: LogStore

    @classmethod
    def open(cls, url: str) -> Store:
        redis = connect(url)
        scripts = Scripts(redis)
        return cls(redis, scripts, LogStore(redis, scripts))

    async def ping(self) -> bool:
        return bool(await self.redis.ping())

    async def close(self) -> None:
        self.log.direct.close()
        await self.redis.aclose()
