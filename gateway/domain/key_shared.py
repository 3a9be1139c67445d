"""Key_Shared subscriptions: messages of one key go to one consumer at a time, keys spread over the
consumers, and per-key order holds while consumers come and go.

As in Pulsar (PersistentStickyKeyDispatcherMultipleConsumers with its default AUTO_SPLIT selector,
ConsistentHashingStickyKeyConsumerSelector): a record's sticky key (its key; keyless records share
"NONE_KEY") hashes with Murmur3_32 into 65536 slots, and every consumer puts 100 points on a ring
of those slots, hashed from its name, a per-name index and the point's index; a key goes to the
consumer of the first point at or after its hash. Adding or removing a consumer moves only the keys
between its points and their neighbours.

A key that moved must not reach its new consumer while its old one still holds earlier messages of
it. Pulsar's first answer, "recently joined consumers", held a new consumer back until everything
before its join was acknowledged; PIP-282 narrowed that to the last position sent; PIP-379 (Pulsar
4.0) replaced it with draining hashes: per key hash, the consumer holding unacknowledged messages
of it and how many, and the hash blocked for anyone else until that count is 0. We keep PIP-379's
per-hash state, in Redis (`ks-claim-3.lua`, `ks-release-1.lua`), with PIP-282's last-sent position
as a fallback (a hash whose messages were all acknowledged is free even if a count was left
behind by a gateway that died mid-way), so that it holds across gateways.

Several gateways serve one Key_Shared subscription at once, with no lease: each reads every
partition and hands out only the keys its own consumers own on the ring, the ring built from the
consumers of all gateways (`ks-members-1.lua`). Every hand-out is claimed in Redis first, so two
gateways never give one key to two consumers; a change of the consumers, or a message given back
for a key a consumer on another gateway now owns, moves the members' generation on, and every
gateway then reads again from the durable cursor (the claim drops what was acknowledged).

A stored batch may hold records of several keys: each key's records go out as their own delivery
of the batch (the others skipped), so no producer setting is needed (Pulsar asks for key-based
batching instead).
"""

from __future__ import annotations

import bisect
import time
from collections import deque

from gateway.domain.subscriptions import Consumer, Delivery, Mode, Subscription, SubscriptionService
from gateway.errors import ConsumerBusy, InvalidRequest
from gateway.formats.records import record_keys
from gateway.store.key_shared import Member

HASH_RANGE = 65536  # Pulsar's StickyKeyConsumerSelector.DEFAULT_RANGE_SIZE
POINTS = 100  # Pulsar's subscriptionKeySharedConsistentHashingReplicaPoints
NONE_KEY = b"NONE_KEY"  # Pulsar's sticky key of a message without one
_LOOKAHEAD = 2000  # per consumer, offsets held back before reading stops: Pulsar's keySharedLookAheadMsgInReplayThresholdPerConsumer
_M = 0xFFFFFFFF


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit, as Pulsar's Murmur3_32Hash computes it (Guava's murmur3_32)."""
    h = seed
    n = len(data) & ~3
    for i in range(0, n, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * 0xCC9E2D51) & _M
        k = (((k << 15) | (k >> 17)) * 0x1B873593) & _M
        h ^= k
        h = ((((h << 13) | (h >> 19)) & _M) * 5 + 0xE6546B64) & _M
    k = 0
    tail = data[n:]
    for i in range(len(tail) - 1, -1, -1):
        k = (k << 8) | tail[i]
    if tail:
        k = (k * 0xCC9E2D51) & _M
        h ^= (((k << 15) | (k >> 17)) * 0x1B873593) & _M
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M
    return h ^ (h >> 16)


def sticky_hash(key: bytes | None) -> int:
    """The slot of a sticky key: Pulsar's `makeStickyKeyHash`, Murmur3_32 made positive, in 0..65535."""
    return (murmur3_32(NONE_KEY if key is None else key) & 0x7FFFFFFF) % HASH_RANGE


class HashRing:
    """Which member takes a key hash, the same on every gateway from the same members (sorted by id).

    Pulsar's consistent-hashing selector: members sharing a name get distinct indexes, in id order;
    on a point two members hash to, the first in id order wins. Members with sticky ranges
    (Pulsar's HashRangeExclusiveStickyKeyConsumerSelector) take exactly those; a hash in none of
    them waits for a member that takes it."""

    def __init__(self, members: tuple[Member, ...]) -> None:
        points: dict[int, str] = {}
        seen: dict[str, int] = {}
        for m in members:
            if m.ranges:
                points.update({end: m.id for _, end in m.ranges})
                continue
            index = seen.get(m.name, 0)
            seen[m.name] = index + 1
            for i in range(POINTS):
                points.setdefault(sticky_hash(f"{m.name or m.id}\0{index}\0{i}".encode()), m.id)
        self._starts = {end: start for m in members for start, end in m.ranges}  # sticky: range ends -> starts
        self._points = sorted(points)
        self._owners = [points[p] for p in self._points]

    def select(self, hash_: int) -> str | None:
        if not self._points:
            return None
        i = bisect.bisect_left(self._points, hash_)
        if self._starts:
            return self._owners[i] if i < len(self._points) and self._starts.get(self._points[i], HASH_RANGE) <= hash_ else None
        return self._owners[i if i < len(self._owners) else 0]


def check_ranges(mode: Mode, ranges: tuple[tuple[int, int], ...]) -> None:
    """Sticky ranges are of Key_Shared alone, within the hash range, and do not overlap one another."""
    if mode != Mode.KEY_SHARED:
        raise InvalidRequest("sticky hash ranges are for key_shared subscriptions")
    spans = sorted(ranges)
    for i, (start, end) in enumerate(spans):
        if not 0 <= start <= end < HASH_RANGE:
            raise InvalidRequest(f"hash range {start}-{end} is not within 0-{HASH_RANGE - 1}")
        if i and start <= spans[i - 1][1]:
            raise InvalidRequest(f"hash ranges {spans[i - 1]} and {(start, end)} overlap")


class KeySharedSubscription(Subscription):
    """A Key_Shared subscription's dispatcher on this gateway: hands this gateway's consumers the keys
    they own on the ring of every gateway's consumers, each hand-out claimed in Redis first."""

    def __init__(
        self, service: SubscriptionService, topic: str, name: str, mode: Mode, partitions: int,
        *, split: bool = False, initial: str = "latest", topic_id: str = "",
    ) -> None:
        super().__init__(service, topic, name, mode, partitions, split=split, initial=initial, topic_id=topic_id)
        self.store = self.service.key_shared
        self.generation = -1  # of the members last seen; -1: not yet
        self.members: tuple[Member, ...] = ()
        self.ring = HashRing(())
        self.held: deque[Delivery] = deque()  # draining, or waiting for its consumer's permits
        self._ids: dict[str, Consumer] = {}  # member id -> this gateway's consumer
        self._left: set[str] = set()  # members that left here, to leave in Redis
        self._bump = False  # a message given back for a key another gateway's consumer owns
        self._releases: dict[tuple[int, str], dict[int, int]] = {}  # owed to `ks-release-1`

    def member(self, consumer: Consumer) -> str:
        return f"{self.service.node_id}.{consumer.id}"

    # -- consumers ------------------------------------------------------------------------------

    def attach(self, consumer: Consumer) -> None:
        super().attach(consumer)
        self._ids[self.member(consumer)] = consumer
        self._renew_at = 0.0  # join the members at once

    def detach(self, consumer: Consumer) -> None:
        member = self.member(consumer)
        super().detach(consumer)  # its messages are released (`_release`) for redelivery
        self._ids.pop(member, None)
        self._left.add(member)
        self.members = tuple(m for m in self.members if m.id != member)
        self.ring = HashRing(self.members)
        self._renew_at = 0.0

    async def sync_members(self, *, leave_all: bool = False, joining: Consumer | None = None) -> None:
        """Join or renew this gateway's consumers, leave those gone, and see everyone's; a new
        generation reads again from the cursors. ConsumerBusy when `joining` is refused."""
        left = self._left | (set(self._ids) if leave_all else set())
        join = [] if leave_all else [Member(m, c.name, c.sticky_ranges) for m, c in self._ids.items()]
        got = await self.store.members(self.topic, self.name, ttl_ms=self.service.lease_ms, join=join,
                                       leave=sorted(left), bump=self._bump)
        self._left -= left
        self._bump = False
        if leave_all:
            return
        if joining is not None and self.member(joining) in got.refused:
            raise ConsumerBusy(f"{joining.name or 'the consumer'}'s hash ranges conflict with another consumer's "
                               f"of {self.name!r} (overlapping, or one of them on the ring)")
        if got.members != self.members:
            self.members = got.members
            self.ring = HashRing(got.members)
        if got.generation != self.generation:
            await self._restart()
            self.generation = got.generation

    async def _restart(self) -> None:
        """Read again from the durable cursors, keeping what this gateway's consumers hold; a dispatch
        round under way is dropped (its claims given back)."""
        self._generation += 1
        parts = sorted(self.owned)
        positions = await self.service.store.open(self.topic, parts, self.name, initial=self.initial,
                                                  mode=self.mode.value)
        for p, pos in zip(parts, positions, strict=True):
            self.cursor[p] = max(self.cursor.get(p, pos.cursor), pos.cursor)
            self.read_pos[p] = self.cursor[p]
        self.redeliver.clear()
        self.held.clear()
        self.wake.set()

    def _rewind(self) -> None:
        super()._rewind()
        self.held.clear()

    async def seek(self, targets: dict[int, int]) -> None:
        """Every consumer restarts from the new position, each key from its first message there, so
        who held which key is forgotten; gateways with consumers of it read again from there too."""
        await super().seek(targets)
        self._releases = {k: v for k, v in self._releases.items() if k[0] not in targets}
        await self.store.forget_holders(self.topic, sorted(targets), self.name)
        self._bump = True
        self._renew_at = 0.0

    # -- what a member holds --------------------------------------------------------------------

    def _owe(self, d: Delivery, consumer: Consumer, n: int) -> None:
        counts = self._releases.setdefault((d.partition, self.member(consumer)), {})
        counts[d.sticky] = counts.get(d.sticky, 0) + n

    async def _claim(self, claims: dict[tuple[int, Consumer], list[Delivery]]) -> list[tuple[Delivery, Consumer]]:
        """Record what the members no longer hold, then claim, in one round trip; what is refused (its
        key draining) waits in `held`, and so does everything after it of its key."""
        owed, self._releases = self._releases, {}
        order = list(claims.items())
        try:
            replies = await self.store.claim(
                self.topic, self.name, self.generation, [m.id for m in self.members],
                [(self.member(c), p, [(d.sticky, sorted(d.offsets)) for d in ds]) for (p, c), ds in order], owed)
        except BaseException:
            for k, counts in owed.items():  # recorded next time (a release twice is harmless: counts stop at 0)
                mine = self._releases.setdefault(k, {})
                for h, n in counts.items():
                    mine[h] = mine.get(h, 0) + n
            raise
        out: list[tuple[Delivery, Consumer]] = []
        for ((_, consumer), ds), reply in zip(order, replies, strict=True):
            for d, got in zip(ds, reply, strict=True):
                if got is None:
                    self.held.append(d)
                elif got:
                    d.offsets = set(got)
                    out.append((d, consumer))
        return out

    def _release(self, deliveries: list[Delivery]) -> None:
        for d in deliveries:
            if d.consumer is not None and d.offsets:
                self._owe(d, d.consumer, len(d.offsets))
        super()._release(deliveries)

    def negative_acknowledge(self, offsets: dict[int, list[int]]) -> None:
        for p, offs in offsets.items():
            self._check_partition(p)
            for o in offs:
                d = self.outstanding[p].get(o)
                if d is not None and d.consumer is not None:
                    self._owe(d, d.consumer, 1)
        super().negative_acknowledge(offsets)

    def applied(self, cursors: dict[int, int], individual: dict[int, list[int]], cumulative: dict[int, int]) -> None:
        """Acks recorded (plain ones, or a transaction's at its commit): what they release lets a
        draining key go to its new consumer. Acks are individual, as on Pulsar's Key_Shared (the base
        refuses cumulative ones)."""
        for p, offs in individual.items():
            held = self.outstanding.get(p, {})
            for o in offs:
                d = held.get(o)
                if d is not None and d.consumer is not None:
                    self._owe(d, d.consumer, 1)
        super().applied(cursors, individual, cumulative)
        if self._releases:  # recorded by the dispatcher before its next claim
            self.wake.set()

    # -- dispatch -------------------------------------------------------------------------------

    def _by_key(self, d: Delivery) -> list[Delivery]:
        """A delivery split per sticky key hash, in offset order, less what this gateway's
        consumers hold already."""
        held = self.outstanding[d.partition]
        offsets = {o for o in d.offsets if o not in held}
        if not offsets:
            return []
        base = d.entry.base_offset
        groups: dict[int, set[int]] = {}
        for delta, key in record_keys(d.entry.batch):
            if base + delta in offsets:
                groups.setdefault(sticky_hash(key), set()).add(base + delta)
        return [Delivery(d.partition, d.entry, offs, d.redelivery_count, sticky=h)
                for h, offs in sorted(groups.items(), key=lambda kv: min(kv[1]))]

    async def _dispatch_once(self) -> bool:
        if self.deleted or self.generation < 0:
            return False
        self._expire()
        await self._unpark()  # what `archive_over_limit` parked
        generation = self._generation
        # and whether it was handed out or held before; held ones were never handed out, so nothing of
        # them can have been acknowledged here (the claim drops what was, elsewhere)
        work: list[tuple[Delivery, bool]] = [(d, True) for d in self.held]
        for d in self.redeliver:
            self._unclaimed(d)
            if d.offsets:
                work.append((d, True))
        self.held.clear()
        self.redeliver.clear()
        targets = self._targets()
        progressed = False
        if targets and sum(len(d.offsets) for d, _ in work) < _LOOKAHEAD * len(self.consumers):
            before = dict(self.read_pos)
            fresh = await self._read(sum(c.permits for c in targets), sorted(self.owned))
            if generation != self._generation:
                return True
            progressed = self.read_pos != before
            work.extend((part, False) for d in fresh for part in self._by_key(d))
        if not work:
            if self._releases:
                await self._claim({})
            return progressed
        # route by the ring: what another gateway's consumer owns is that gateway's to read
        claims: dict[tuple[int, Consumer], list[Delivery]] = {}
        stopped: set[tuple[int, int]] = set()  # (partition, hash) behind a held delivery: in order
        budget = {c: c.permits for c in self.consumers}  # a consumer gets what its permits allow, the rest waits
        for d, old in sorted(work, key=lambda w: (w[0].partition, min(w[0].offsets))):
            consumer = self._ids.get(self.ring.select(d.sticky) or "")
            if consumer is None:  # the gateway whose consumer owns the key reads it; one from before it must read again
                self._bump = self._bump or old
                continue
            if (d.partition, d.sticky) in stopped or budget[consumer] <= 0:
                stopped.add((d.partition, d.sticky))
                self.held.append(d)
                continue
            budget[consumer] -= len(d.offsets)
            claims.setdefault((d.partition, consumer), []).append(d)
        if self._bump:
            self._renew_at = 0.0
        granted = await self._claim(claims)
        if generation != self._generation:
            for d, consumer in granted:
                self._owe(d, consumer, len(d.offsets))
            return True
        if granted:
            await self._deliver(granted)
        return progressed or bool(granted)

    async def _deliver(self, granted: list[tuple[Delivery, Consumer]]) -> None:
        """Send what was claimed. A restart meanwhile does not stop it: the claims hold, and what the
        consumers hold is kept across restarts."""
        now = time.monotonic()
        per_consumer: dict[Consumer, list[Delivery]] = {}
        for d, consumer in granted:
            if consumer not in self.consumers:  # left meanwhile: its claim is released for the next
                self._owe(d, consumer, len(d.offsets))
                self.redeliver.append(d)
                continue
            claimed = len(d.offsets)
            self._drop_acked_meanwhile(d)
            if len(d.offsets) < claimed:  # claimed, but never held: given back at the next claim
                self._owe(d, consumer, claimed - len(d.offsets))
                self.wake.set()
            if not d.offsets:
                continue
            self._assign(d, consumer, now)
            per_consumer.setdefault(consumer, []).append(d)
        await self._send(per_consumer, None)
