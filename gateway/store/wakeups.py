"""Hearing other gateways' writes to the logs this gateway's readers wait on.

A reader about to wait raises the log's wake flag (`keys.wake`, with a TTL) once this gateway
listens on the shard channel named after the log; the first write after the flag publishes once
and lowers it (`lua/includes/entry.lua`). So a write costs one DEL of a missing key unless a reader
elsewhere waits, and a busy log whose readers never wait publishes nothing. Sharded pub/sub keeps
each message on the node that owns the log's slot: one subscriber connection per Redis, or per
primary of a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from redis.asyncio import ConnectionPool, Redis, RedisCluster
from redis.asyncio.client import PubSub

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors

log = logging.getLogger(__name__)

Part = tuple[str, int]
SUBSCRIBE_WAIT = 2.0  # seconds to wait for Redis to confirm a subscription before raising flags anyway


class _Shard:
    """One subscriber connection and the task reading it."""

    def __init__(self, pubsub: PubSub, owner: Redis | None) -> None:
        self.pubsub = pubsub
        self.owner = owner  # a client made for this node alone, closed with the shard
        self.reader: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(BaseException):
                await self.reader
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()
        if self.owner is not None:
            with contextlib.suppress(Exception):
                await self.owner.aclose()


class LogWakeups:
    def __init__(
        self,
        redis: RedisClient,
        on_wake: Callable[[str, int], None],
        *,
        flag_ms: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.on_wake = on_wake
        self.flag_ms = flag_ms
        self.clock = clock
        self._parts: dict[bytes, Part] = {}  # subscribed channel -> its partition
        self._shard_of: dict[bytes, str] = {}  # subscribed channel -> its shard's name
        self._confirmed: dict[bytes, asyncio.Future[None]] = {}
        self._armed: dict[Part, float] = {}  # partition -> when its flag (as far as we know) runs out
        self._shards: dict[str, _Shard] = {}
        self._lock = asyncio.Lock()

    async def arm(self, parts: Iterable[Part]) -> bool:
        """Raise the flags of `parts` not raised already. True when any was raised now: the caller
        must look at those logs again, since a write just before the flag published nothing."""
        now = self.clock()
        todo = [p for p in dict.fromkeys(parts) if self._armed.get(p, 0.0) <= now]
        if not todo:
            return False
        await self._subscribe(todo)
        # marked before the round trip: a wake-up arriving during it must find the mark to clear
        until = now + self.flag_ms / 1000 * 0.8
        for p in todo:
            self._armed[p] = until
        pipe = self.redis.pipeline(transaction=False)
        for topic, partition in todo:
            pipe.set(keys.wake(topic, partition), b"1", px=self.flag_ms)
        try:
            async with storage_errors():
                await pipe.execute()
        except BaseException:
            for p in todo:
                self._armed.pop(p, None)
            raise
        return True

    async def _subscribe(self, parts: list[Part]) -> None:
        waits = []
        async with self._lock:
            for t, p in parts:
                channel = keys.log(t, p).encode()
                if channel in self._parts:
                    if channel in self._confirmed:
                        waits.append(self._confirmed[channel])
                    continue
                name, shard = await self._shard(channel)
                fut = self._confirmed[channel] = asyncio.get_running_loop().create_future()
                self._parts[channel] = (t, p)
                self._shard_of[channel] = name
                waits.append(fut)
                try:
                    async with storage_errors():
                        await shard.pubsub.ssubscribe(channel)  # one at a time: a cluster refuses several slots
                except BaseException:
                    self._forget(channel)
                    raise
                if shard.reader is None:
                    shard.reader = asyncio.create_task(self._read(name, shard), name=f"wake-ups {name}")
        if waits:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SUBSCRIBE_WAIT):
                    await asyncio.gather(*waits)

    async def _shard(self, channel: bytes) -> tuple[str, _Shard]:
        """The subscriber of the node that owns `channel`'s slot (the one Redis, when not a cluster)."""
        if not isinstance(self.redis, RedisCluster):
            name = ""
            if name not in self._shards:
                self._shards[name] = _Shard(self.redis.pubsub(), None)
            return name, self._shards[name]
        async with storage_errors():
            await self.redis.initialize()
        node = self.redis.get_node_from_key(channel.decode())
        assert node is not None  # initialize() maps every slot to a node, or raises
        if node.name not in self._shards:
            pool = ConnectionPool(connection_class=node.connection_class, max_connections=2, **node.connection_kwargs)
            owner = Redis(connection_pool=pool)
            self._shards[node.name] = _Shard(owner.pubsub(), owner)
        return node.name, self._shards[node.name]

    async def _read(self, name: str, shard: _Shard) -> None:
        try:
            while True:
                msg: dict[str, Any] | None = await shard.pubsub.get_message(timeout=None)
                if msg is None:
                    continue
                kind, channel = msg["type"], msg["channel"]
                if kind == "smessage":
                    self._woken(channel)
                elif kind == "ssubscribe":
                    fut = self._confirmed.pop(channel, None)
                    if fut is not None and not fut.done():
                        fut.set_result(None)
                elif kind == "sunsubscribe":  # its slot moved to another node: subscribe there next time
                    self._woken(channel)
                    self._forget(channel)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("wake-up subscriber %s failed (%s); readers there fall back on their own timeouts",
                        name or "redis", exc)
            self._shards.pop(name, None)
            for channel in [c for c, s in self._shard_of.items() if s == name]:
                self._woken(channel)
                self._forget(channel)
            shard.reader = None
            asyncio.get_running_loop().create_task(shard.close())

    def _woken(self, channel: bytes) -> None:
        part = self._parts.get(channel)
        if part is not None:
            self._armed.pop(part, None)  # the write lowered the flag: the next wait raises it again
            self.on_wake(*part)

    def _forget(self, channel: bytes) -> None:
        part = self._parts.pop(channel, None)
        self._shard_of.pop(channel, None)
        fut = self._confirmed.pop(channel, None)
        if fut is not None and not fut.done():
            fut.set_result(None)
        if part is not None:
            self._armed.pop(part, None)

    async def close(self) -> None:
        shards, self._shards = list(self._shards.values()), {}
        for shard in shards:
            await shard.close()
        for channel in list(self._parts):
            self._forget(channel)
