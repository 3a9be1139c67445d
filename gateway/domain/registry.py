"""The gateways sharing one Redis, and which of them leads what.

Each gateway registers under a lease (`store.registry`) renewed every third of it; every renewal
brings back the live gateways, and one whose lease runs out drops from this view even before the
next renewal. Partition leadership and coordinators are spread by rendezvous hashing over that
view: every gateway computes the same answer from the same view, and when a gateway goes, only
what it led moves. Leading is advice to clients: every gateway serves every partition correctly,
since each write is one atomic script.

A reassignment (Kafka's AlterPartitionReassignments) places a partition instead: its replicas are
the gateways it names, the first preferred, and the leader is stored beside them in Redis (one
hash, read at every renewal). It stays put until an election or another reassignment moves it, as
a Kafka controller leaves a leader be: when it dies, the first live replica takes over, written back
by whichever gateway sees it first (compare and set), so a preferred gateway that returns leads
again only after a preferred election. A placed partition none of whose replicas is alive is led
as an unplaced one is, since any gateway can serve it.
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
from enum import Enum

from gateway.errors import GatewayError, StorageUnavailable
from gateway.store import Store
from gateway.store.registry import GatewayEntry, PartitionKey, Placement, address

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


class Election(Enum):
    """What a preferred-leader election did to one partition (Kafka's ELECTION_NOT_NEEDED and
    PREFERRED_LEADER_NOT_AVAILABLE are the two it may not do)."""

    ELECTED = "elected"
    NOT_NEEDED = "not needed"
    NOT_AVAILABLE = "preferred leader not available"


class Registry:
    def __init__(self, store: Store, *, lease_ms: int = 6000, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store.registry
        self.lease_ms = lease_ms
        self.clock = clock
        self.instance = uuid.uuid4().hex  # tells this process from an earlier run with the same node id
        self.node_id = -1
        self.me = Peer(-1, "127.0.0.1", 0, 0, 0)
        self._view: list[tuple[Peer, float]] = []  # other gateways, with when their lease runs out here
        self._renewed: float | None = None  # when this gateway's lease was last renewed, here
        self._graced: dict[int, tuple[Peer, float]] = {}  # lapsed while this gateway could not renew either
        self._placed: dict[PartitionKey, Placement] = {}  # as Redis held them when last read
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
        view = [self._seen(e) for e in entries if e.node_id != self.node_id and e.kafka_port]
        self._view = view + self._grace(view)
        self._placed = await self.store.placements()
        if ttl_ms != 0:
            await self._fail_over()

    async def _fail_over(self) -> None:
        """Hand each placed partition whose leader is gone to its first live replica, in Redis."""
        live = {p.node_id for p in self.live()}
        moves = []
        for key, placed in self._placed.items():
            if placed.leader not in live and (up := [r for r in placed.replicas if r in live]):
                moves.append((key, placed, Placement(up[0], placed.replicas)))
        if moves:
            await self.store.place(moves)
            await self.reload()

    def _grace(self, view: list[tuple[Peer, float]]) -> list[tuple[Peer, float]]:
        """The gateways whose lease lapsed while this one could not renew its own either (a renewal
        missed: Redis away in a failover, a cut), kept for one lease from now, as Kafka 4.4's newly
        active controller gives every registered broker a whole session again
        (ClusterControlManager.activate) rather than fence those whose heartbeats it could not hear.
        Dropped from Metadata, a gateway is decommissioned by librdkafka, and one that was a
        transactional producer's group coordinator leaves its send_offsets_to_transaction waiting
        for it for ever (librdkafka issue 5511; tests/jepsen soak sentinel:255050520)."""
        now, last = self.clock(), self._renewed
        self._renewed = now
        listed = {p.node_id for p, _ in view}
        if last is not None and now - last > self.lease_ms / 1500:  # twice the renewal period
            until = now + self.lease_ms / 1000
            self._graced = {p.node_id: (p, until) for p, ran in self._view if ran > last and p.node_id not in listed}
        self._graced = {n: g for n, g in self._graced.items() if n not in listed and g[1] > now}
        return list(self._graced.values())

    def _seen(self, e: GatewayEntry) -> tuple[Peer, float]:
        return Peer(e.node_id, e.host, e.kafka_port, e.native_port, e.admin_port), self.clock() + e.lease_left_ms / 1000

    async def run(self) -> None:
        """Renew every third of the lease until `stop`. A Redis away fails every try: said once, at
        WARNING (it is retried, and the other roles say Redis is away too), and its end once."""
        failing = False
        while not self._stop.is_set():
            try:
                await self.renew()
            except GatewayError as exc:
                if not failing:
                    log.warning("could not renew this gateway's registration: %s; retrying", exc)
                failing = True
            else:
                if failing:
                    log.info("this gateway's registration renewed again")
                failing = False
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
        now = self._now()
        return sorted([self.me, *(p for p, until in self._view if until > now)], key=lambda p: p.node_id)

    def peers(self) -> bool:
        """Whether another gateway is alive: only then can a log grow without this one hearing of it."""
        now = self._now()
        return any(until > now for _, until in self._view)

    def _now(self) -> float:
        """The moment the others' leases are read at: now, but never more than a renewal period past
        this gateway's last renewal. A gateway that cannot renew (Redis away, or cut off from it)
        knows nothing newer of the others than it read then, so it keeps them listed, as a Kafka
        broker cut off from its controller keeps answering from its last metadata image; their
        leases running out meanwhile were its own clock's guess. Dropped from its Metadata, a live
        gateway was decommissioned by librdkafka, whose transactional producer then waited on that
        broker's handle for ever (soak sentinel:863862518, a one-way cut of Redis from a gateway).
        Every live gateway renews once a period, so none of them runs out within a period of being
        read; one that stopped renewing before the last read still drops out on time."""
        now = self.clock()
        return now if self._renewed is None else min(now, self._renewed + self.lease_ms / 3000)

    def leaders(self, topic: str, partitions: int) -> list[Peer]:
        """The gateway leading each partition of a topic."""
        live = self.live()
        return [self._leader(topic, p, live) for p in range(partitions)]

    def leader(self, topic: str, partition: int) -> Peer:
        """The gateway leading one partition (as `leaders` names it)."""
        return self._leader(topic, partition, self.live())

    def _leader(self, topic: str, partition: int, live: list[Peer]) -> Peer:
        placed = self._placed.get((topic, partition))
        if placed is not None:
            by_id = {p.node_id: p for p in live}
            for node in (placed.leader, *placed.replicas):
                if node in by_id:
                    return by_id[node]
        return owner(f"p\0{topic}\0{partition}", live)

    async def reload(self) -> None:
        """Read the placements again, so that an answer about them reflects a change another gateway
        just made (a renewal reads them too, but only every third of the lease). With Redis away the
        last ones read stand: Metadata still answers through an outage, as it did before placements."""
        try:
            self._placed = await self.store.placements()
        except StorageUnavailable:
            log.debug("placements not reread: redis unavailable")

    def replicas(self, topic: str, partition: int) -> tuple[int, ...] | None:
        """The replicas a reassignment named for a partition, the preferred first; None if unplaced."""
        placed = self._placed.get((topic, partition))
        return None if placed is None else placed.replicas

    def placed(self, topic: str | None = None) -> list[PartitionKey]:
        """The partitions a reassignment placed (of one topic, or all)."""
        return [k for k in self._placed if topic is None or k[0] == topic]

    async def reassign(self, targets: dict[PartitionKey, tuple[int, ...]]) -> None:
        """Place partitions on the replicas named (live gateways, checked by the caller). The leader
        stays if it is among them, else the first live one leads, as Kafka's controller moves a
        leader only off a replica that goes (ReplicationControlManager's PartitionChangeBuilder)."""
        live = self.live()
        alive = {p.node_id for p in live}
        changes: list[tuple[PartitionKey, Placement | None, Placement | None]] = []
        for (topic, partition), replicas in targets.items():
            current = self._leader(topic, partition, live).node_id
            leader = current if current in replicas else next((r for r in replicas if r in alive), replicas[0])
            changes.append(((topic, partition), None, Placement(leader, replicas)))
        await self.store.place(changes, expect=False)
        await self.reload()

    async def elect_preferred(self, partitions: list[PartitionKey]) -> dict[PartitionKey, Election]:
        """Move each partition's leadership to its preferred replica when that one is alive (an
        unplaced partition's leader is its preferred one: Metadata lists it first)."""
        await self.reload()
        live = self.live()
        alive = {p.node_id for p in live}
        results: dict[PartitionKey, Election] = {}
        changes: list[tuple[PartitionKey, Placement | None, Placement | None]] = []
        for key in partitions:
            placed = self._placed.get(key)
            if placed is None or self._leader(*key, live).node_id == placed.replicas[0]:
                results[key] = Election.NOT_NEEDED
            elif placed.replicas[0] not in alive:
                results[key] = Election.NOT_AVAILABLE
            else:
                results[key] = Election.ELECTED
                changes.append((key, placed, Placement(placed.replicas[0], placed.replicas)))
        done = await self.store.place(changes)
        for (key, _, _), ok in zip(changes, done, strict=True):
            if not ok:  # another gateway moved it meanwhile: what it did stands
                results[key] = Election.NOT_NEEDED
        if changes:
            await self.reload()
        return results

    def group_coordinator(self, group_id: str) -> Peer:
        """The gateway to coordinate a group nobody coordinates now (it then takes the group's lease)."""
        return owner(f"g\0{group_id}", self.live())

    def txn_coordinator(self, transactional_id: str) -> Peer:
        """The gateway Kafka's transactional producer is sent to (any could serve it: the state is in Redis)."""
        return owner(f"t\0{transactional_id}", self.live())
