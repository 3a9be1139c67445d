"""Producer ids, handed out from blocks this process reserved in Redis, as Kafka's brokers hand them
out from blocks their controller quorum committed (KIP-730).

A block is reserved by one durable script (`producer-ids-1`: answered once the replicas hold it, and
vouched for behind Sentinel), so no failover hands an id out twice; ids are then handed out without
a round trip, and a stalled replica does not hold up a new producer while the block lasts. What a
process leaves of its block when it stops is never handed out: ids are skipped, never reused.
"""

from __future__ import annotations

import asyncio
import contextlib

from gateway.errors import GatewayError
from gateway.store import keys
from gateway.store.scripts import Scripts

BLOCK = 1000  # ids a reservation takes (Kafka's broker takes 1000 at a time too)
PREFETCH = 100  # the next block is reserved in the background once this few ids are left


class ProducerIds:
    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self._blocks: list[list[int]] = []  # [next, last] of each reserved block, oldest first
        self._reserving: asyncio.Future[None] | None = None

    async def reserve(self) -> None:
        """One more block, once the replicas hold it; concurrent callers share one reservation."""
        if self._reserving is None or self._reserving.done():
            self._reserving = asyncio.ensure_future(self._reserve())
            self._reserving.add_done_callback(lambda f: f.cancelled() or f.exception())
        await asyncio.shield(self._reserving)

    async def _reserve(self) -> None:
        last = int(await self.scripts.call("producer-ids-1", [keys.PRODUCER_IDS], [BLOCK]))  # count
        self._blocks.append([last - BLOCK + 1, last])

    async def allocate(self) -> int:
        """An id never handed out before, anywhere."""
        while not self._left():
            await self.reserve()
        block = self._blocks[0]
        pid = block[0]
        block[0] += 1
        if block[0] > block[1]:
            self._blocks.pop(0)
        if self._left() < PREFETCH and (self._reserving is None or self._reserving.done()):
            self._reserving = asyncio.ensure_future(self._quietly())
        return pid

    async def _quietly(self) -> None:
        """A reservation ahead of need: one that fails now is made again when it is needed."""
        with contextlib.suppress(GatewayError):
            await self._reserve()

    def _left(self) -> int:
        return sum(last - nxt + 1 for nxt, last in self._blocks)
