"""The gateways sharing one Redis, and which of them leads what.

Each gateway registers under a lease (`store.registry`) renewed every third of it; every renewal
brings back the live gateways, and one whose lease runs out drops from this view even before the
next renewal. Partition leadership and coordinators are spread by rendezvous hashing over that
view: every gateway computes the same answer from the same view, and when a gateway goes, only
what it led moves. Leading is advice to clients: every gateway serves every partition correctly,
since each write is one atomic script.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.errors import GatewayError
from gateway.store import Store
from gateway.store.registry import GatewayEntry, address

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Peer:
    """A live gateway: its node id and where clients reach its listeners."""

    node_id: int
    host: str
    kafka_port: int
    native_port: int
    admin_port: int


@functools.lru_cache(maxsize=1 << 16)
def _weight(key: str, node: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{node}\0{key}".encode(), digest_size=8).digest(), "big")


def owner(key: str, peers: Sequence[Peer]) -> Peer:
    """Rendezvous hashing: the peer with the highest weight for `key`; stable under joins and leaves."""
    return max(peers, key=lambda p: _weight(key, p.node_id))


class Registry:
    def __init__(self, store: Store, *, lease_ms: int = 6000, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store.registry
        self.lease_ms = lease_ms
        self.clock = clock
        self.instance = uuid.uuid4().hex  # tells this process from an earlier run with the same node id
        self.node_id = -1
        self.me = Peer(-1, "127.0.0.1", 0, 0, 0)
        self._view: list[tuple[Peer, float]] = []  # other gateways, with when their lease runs out here
        self._stop = asyncio.Event()

    # -- this gateway's lease -------------------------------------------------------------------

    async def claim(self, node_id: int, host: str, kafka_port: int = 0, native_port: int = 0,
                    admin_port: int = 0) -> int:
        """Register under `node_id`, or with -1 under the id this Kafka address had before (else a new
        one); NotAllowed when a live gateway elsewhere holds the id asked for."""
        addr = address(host, kafka_port, native_port, admin_port)
        self.node_id = await self.store.claim(node_id, self.instance, addr, self.lease_ms)
        self.me = Peer(self.node_id, host, kafka_port, native_port, admin_port)
        return self.node_id

    async def advertise(self, host: str, kafka_port: int, native_port: int, admin_port: int) -> None:
        """Where this gateway's listeners are, once they listen; published at once."""
        self.me = Peer(self.node_id, host, kafka_port, native_port, admin_port)
        await self.renew()

    async def renew(self, ttl_ms: int | None = None) -> None:
        me = self.me
        entries = await self.store.renew(me.node_id, self.instance,
                                         address(me.host, me.kafka_port, me.native_port, me.admin_port),
                                         self.lease_ms if ttl_ms is None else ttl_ms)
        # a gateway that has not published its listeners yet is not one clients can be sent to
        self._view = [self._seen(e) for e in entries if e.node_id != self.node_id and e.kafka_port]

    def _seen(self, e: GatewayEntry) -> tuple[Peer, float]:
        return Peer(e.node_id, e.host, e.kafka_port, e.native_port, e.admin_port), self.clock() + e.lease_left_ms / 1000

    async def run(self) -> None:
        """Renew every third of the lease until `stop`."""
        while not self._stop.is_set():
            try:
                await self.renew()
            except GatewayError as exc:
                log.error("could not renew this gateway's registration: %s", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.lease_ms / 3000):
                    await self._stop.wait()

    def stop(self) -> None:
        self._stop.set()

    async def release(self) -> None:
        """Give the lease up (a clean shutdown), so the others stop sending clients here at once."""
        self._stop.set()
        if self.node_id >= 0:
            with contextlib.suppress(GatewayError):
                await self.renew(ttl_ms=0)

    # -- the view -------------------------------------------------------------------------------

    def live(self) -> list[Peer]:
        """Every gateway whose lease runs, this one included, by node id."""
        now = self.clock()
        return sorted([self.me, *(p for p, until in self._view if until > now)], key=lambda p: p.node_id)

    def peers(self) -> bool:
        """Whether another gateway is alive: only then can a log grow without this one hearing of it."""
        now = self.clock()
        return any(until > now for _, until in self._view)

    def leaders(self, topic: str, partitions: int) -> list[Peer]:
        """The gateway leading each partition of a topic."""
        live = self.live()
        return [owner(f"p\0{topic}\0{p}", live) for p in range(partitions)]

    def leader(self, topic: str, partition: int) -> Peer:
        """The gateway leading one partition (as `leaders` names it)."""
        return owner(f"p\0{topic}\0{partition}", self.live())

    def group_coordinator(self, group_id: str) -> Peer:
        """The gateway to coordinate a group nobody coordinates now (it then takes the group's lease)."""
        return owner(f"g\0{group_id}", self.live())

    def txn_coordinator(self, transactional_id: str) -> Peer:
        """The gateway Kafka's transactional producer is sent to (any could serve it: the state is in Redis)."""
        return owner(f"t\0{transactional_id}", self.live())
