"""Which of a Sentinel-watched primary's replicas the Sentinels may promote: those in its in-sync set.

Kafka elects a partition's leader only from its ISR (`unclean.leader.election.enable`, false by
default): a follower that fell behind lacks what was acknowledged since, and electing it would lose
that. The Sentinels rank a failed primary's replicas by `replica-priority` (0: never promoted), then
by replication offset, and know nothing of the gateway's in-sync set (`Replication.in_sync`), which
acks=all produces and durable state changes stop waiting for a replica once it has left. So a replica
that left the set was promoted once the one in it was killed and the primary cut off (soak
sentinel:923530612): 17 KB of replication stream short, it sent a consumer back to its input's start.

Each gateway, as it reads a primary's replicas (once a second while it writes or reads), sets
`replica-priority 0` on every replica out of the set and gives a replica its priority back once it is
in the set again. The priority it had is kept on the primary (`keys.DEMOTED_REPLICAS`), so that any
gateway gives it back and a restarted replica, which comes back with its configured priority, is set
to 0 again while it catches up; a replica an operator gave priority 0 (never to be promoted) is left
as it is. With the primary gone and no replica in the set reachable, the Sentinels promote none
(they log `-failover-abort-no-good-slave` and try again) and the gateway answers retriable errors, as
Kafka's partition stays offline, until the primary or an in-sync replica returns, or an operator
gives a replica its priority back by hand (`CONFIG SET replica-priority 100`: Kafka's unclean
election, losing what that replica lacks). `--unclean-replica-promotion` turns this off.

The Sentinels read a replica's priority from its INFO, every 10 s and every second while its primary
is down, so a replica that leaves the set in the last seconds before its primary fails may still be
ranked by its old priority: the window Kafka closes by shrinking its ISR only through its controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from typing import Any, cast

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.resp import DirectConnections, RespError

log = logging.getLogger(__name__)

_PRIORITY = "replica-priority"


class Promotion:
    """Keeps the replicas out of a primary's in-sync set from being promoted (the module's docstring)."""

    def __init__(self, redis: RedisClient, connections: DirectConnections) -> None:
        self._redis = redis
        self._connections = connections
        self._settling: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._unreachable: set[str] = set()  # replicas last found unreachable, warned of once

    def settle(self, primary: tuple[str, int], replicas: Sequence[str], in_sync: Collection[str]) -> None:
        """Set the priorities of `primary`'s `replicas` (their addresses, as its INFO lists them) by
        whether each is `in_sync`, in the background (one pass at a time per primary): the read of
        the set that called it does not wait on a replica that may not answer."""
        if primary in self._settling or not replicas:
            return
        task = self._settling[primary] = asyncio.ensure_future(self._settle(replicas, in_sync))
        task.add_done_callback(lambda t: self._done(primary, t))

    def _done(self, primary: tuple[str, int], task: asyncio.Task[None]) -> None:
        self._settling.pop(primary, None)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.info("replica priorities of %s:%d not set this time: %s", *primary, exc)

    async def _settle(self, replicas: Sequence[str], in_sync: Collection[str]) -> None:
        async with storage_errors():
            raw = cast("dict[bytes, bytes]", await self._redis.hgetall(keys.DEMOTED_REPLICAS))
        kept = {k.decode(): int(v) for k, v in raw.items()}
        await asyncio.gather(*(self._one(address, address in in_sync, kept.get(address)) for address in replicas))

    async def _one(self, address: str, in_sync: bool, kept: int | None) -> None:
        """One replica's priority set (each on its own: one that does not answer holds up no other)."""
        if in_sync:
            if kept is not None:
                await self._restore(address, kept)
        elif kept is not None:
            await self._on(address, ("CONFIG", "SET", _PRIORITY, 0))  # again: it may have restarted
        else:
            await self._demote(address)

    async def _demote(self, address: str) -> None:
        """Priority 0 for a replica out of the set, its own kept on the primary first: a gateway
        stopped in between leaves one given back to it, never one lost."""
        reply = await self._on(address, ("CONFIG", "GET", _PRIORITY))
        if reply is None:
            return
        priority = int(reply[1]) if isinstance(reply, list) and len(reply) == 2 else 0
        if priority == 0:  # the operator's: never promoted anyway
            return
        async with storage_errors():
            await self._redis.hset(keys.DEMOTED_REPLICAS, address, priority)
        if await self._on(address, ("CONFIG", "SET", _PRIORITY, 0)) is not None:
            log.warning("Redis replica %s is out of its primary's in-sync set: replica-priority 0 until it is "
                        "back, so the Sentinels do not promote it (it lacks what was acknowledged since; "
                        "--unclean-replica-promotion allows it)", address)

    async def _restore(self, address: str, priority: int) -> None:
        if await self._on(address, ("CONFIG", "SET", _PRIORITY, priority)) is None:
            return
        async with storage_errors():
            await self._redis.hdel(keys.DEMOTED_REPLICAS, address)
        log.warning("Redis replica %s is back in its primary's in-sync set: replica-priority %d again", address,
                    priority)

    async def _on(self, address: str, command: tuple[Any, ...]) -> Any:
        """`command`'s reply from the replica at `address`, or None (warned of once) when it cannot be
        had: unreachable from this gateway, or CONFIG refused to the gateway's Redis user."""
        host, _, port = address.rpartition(":")
        try:
            [reply] = await self._connections.on_node((host, int(port)), [command])
            if isinstance(reply, RespError):
                raise reply
        except (OSError, TimeoutError, RespError, ValueError) as exc:
            if address not in self._unreachable:
                self._unreachable.add(address)
                log.warning("Redis replica %s: its replica-priority cannot be set (%s); the Sentinels may "
                            "promote it while it is out of the in-sync set", address, exc or type(exc).__name__)
            return None
        self._unreachable.discard(address)
        return reply

    def close(self) -> None:
        for task in self._settling.values():
            task.cancel()
