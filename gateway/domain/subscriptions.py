"""Subscriptions: named, durable positions on a topic, shared by the consumers attached to them.

What survives a restart lives in Redis (`store.subscriptions`): per partition a cursor and the
offsets acked above it. What a gateway keeps in memory is only in-flight state that a restart may
lose without harm: which consumer holds which unacked offsets, permits, the read position. Losing
it means unacked messages are delivered again from the cursor, never that acked ones are.

Dispatch hands out whole stored batches (`Delivery`: the entry plus the offsets the consumer must
process); records are never decoded here. It is read-committed: nothing at or past the last stable
offset goes out, and markers and aborted batches are acknowledged on the subscription's behalf (a
share group at share.isolation.level=read_uncommitted turns that off: records of open and aborted
transactions go out as a read-uncommitted Fetch returns them, markers never do). Modes:
- exclusive: one consumer; a second is refused with ConsumerBusy.
- failover: the earliest attached consumer is active; when it leaves, the next one takes over from
  the cursor.
- shared: batches go round-robin to consumers with permits; acks are individual; a negative ack,
  an ack timeout or a departing consumer puts the unacked offsets up for redelivery to anyone.
- key_shared: as shared, but the messages of one key go to one consumer at a time
  (`gateway.domain.key_shared`, which dispatches on every gateway with consumers of it, no lease).

Across gateways a subscription is dispatched whole by one gateway, under a lease; a second gateway's
consumers get ConsumerBusy. A share group's subscription is split instead (Kafka keeps a
share-partition on the partition's leader): each partition is dispatched by the gateway whose
consumers take it (a share member takes the partitions its gateway leads), under a partition lease,
given up only when nothing of it is in flight there. A native consumer attached to a split
subscription takes every partition its gateway dispatches.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from gateway.domain.log import LogService, absent_offsets, committed_entries, uncommitted_entries
from gateway.domain.watermark import SubscriptionWatermark, WatermarkService
from gateway.errors import ConsumerBusy, GatewayError, NotAllowed, SubscriptionNotFound, TopicNotFound
from gateway.store import Store
from gateway.store.log import Entry, TopicInfo
from gateway.store.subscriptions import PendingAckConflict, Position

log = logging.getLogger(__name__)


class Mode(StrEnum):
    EXCLUSIVE = "exclusive"
    FAILOVER = "failover"
    SHARED = "shared"
    KEY_SHARED = "key_shared"

    @property
    def individual(self) -> bool:
        """Acks are individual and a departing consumer's messages go to the others."""
        return self in (Mode.SHARED, Mode.KEY_SHARED)


class ConsumerSink(Protocol):
    """How the service reaches a consumer: the face writes what it is given to the wire."""

    async def deliver(self, consumer_id: int, deliveries: list[Delivery]) -> None: ...

    async def reset(self, consumer_id: int) -> None: ...

    async def watermark(self, consumer_id: int, watermark: int | None) -> None: ...


@dataclass(eq=False)
class Delivery:
    """Part of one stored batch handed to one consumer: the offsets it still owes an ack for."""

    partition: int
    entry: Entry
    offsets: set[int]
    redelivery_count: int = 0
    consumer: Consumer | None = None
    deadline: float = 0.0
    # this delivery is counted in Redis already (`Subscription._counted`): one handed out and given
    # back unsent goes out again as the same delivery, not counted twice
    counted: bool = False
    sticky: int = 0  # Key_Shared: the hash of the records' key (`gateway.domain.key_shared`)
    # offset: the transaction that locked it while this delivery held it (its abort redelivers it)
    locks: dict[int, str] = field(default_factory=dict)

    def skip(self, offsets: set[int] | None = None) -> list[int]:
        """Offsets of the batch, relative to its base, that the consumer must not process (those not
        in `offsets`, by default this delivery's)."""
        base, keep = self.entry.base_offset, self.offsets if offsets is None else offsets
        return [i for i in range(self.entry.count) if base + i not in keep]


@dataclass(eq=False)
class Consumer:
    id: int
    name: str
    sink: ConsumerSink
    ack_timeout: float = 0.0  # seconds; 0: none
    permits: int = 0
    subscription: Subscription | None = None
    partitions: frozenset[int] | None = None  # the partitions it takes; None: all
    sticky_ranges: tuple[tuple[int, int], ...] = ()  # Key_Shared: the key hashes it takes; (): the ring decides
    deliveries: set[Delivery] = field(default_factory=set)


_WAIT_POLL = 1.0  # seconds: a last resort should a wake-up from another gateway be lost
LEASE_MS = 10_000  # how long a dead gateway keeps others from taking over its subscriptions
_RENEW_EVERY = LEASE_MS / 3000  # seconds
_SPLIT_RETRY = 0.2  # seconds between tries at a partition lease another gateway holds, or to give one up
_KEY_SHARED_SYNC = 0.25  # seconds between looks at a Key_Shared subscription's consumers on other gateways


class Subscription:
    """One subscription's dispatcher on this gateway; exists while it has consumers here.

    It dispatches the partitions it `owns`: all of them under the whole-subscription lease, or, split
    (a share group's subscription), those whose partition leases it holds. Split, it leases the
    partitions its consumers take (a share member takes those this gateway leads), and gives one
    up only once nothing of it is in flight here, so a record is never held on two gateways."""

    def __init__(
        self, service: SubscriptionService, topic: str, name: str, mode: Mode, partitions: int,
        *, split: bool = False, initial: str = "latest", topic_id: str = "",
    ) -> None:
        self.service = service
        self.topic = topic
        self.topic_id = topic_id  # the incarnation of the topic read (a topic re-created gets a new id)
        self.deleted = False  # the topic is gone: nothing is read until it is created again
        self.name = name
        self.mode = mode
        self.partitions = partitions
        self.split = split
        self.initial = initial
        self.owned: set[int] = set() if split else set(range(partitions))
        self.consumers: list[Consumer] = []
        self.cursor: dict[int, int] = {}
        self.read_pos: dict[int, int] = {}
        self.max_acked: dict[int, int] = {}  # above it nothing was acked individually: no lookup needed
        self.outstanding: dict[int, dict[int, Delivery]] = {p: {} for p in range(partitions)}
        self.redeliver: deque[Delivery] = deque()
        self._deadlines: list[tuple[float, int, Delivery]] = []
        self._tie = itertools.count()
        self._rr = 0
        self._generation = 0
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.watermark = SubscriptionWatermark(service.watermarks, topic) if service.watermarks else None
        self.watermark_sent: int | None = None  # what the consumers were told last
        self._watermark_lock = asyncio.Lock()
        self._renew_at = 0.0 if split else time.monotonic() + _RENEW_EVERY  # also when added partitions are looked for
        # deliveries after which a record is archived (acknowledged undelivered) rather than
        # redelivered, 0 for none: a share group's share.delivery.count.limit; `on_archive` hears of it
        self.delivery_limit = 0
        self.on_archive: Callable[[Delivery], Awaitable[None]] | None = None
        self.read_committed = True  # False: up to the high watermark, aborted batches included
        # offsets a transaction holds (PIP-31's PENDING_ACK) met on their way out: held back here until
        # it ends (`_unlocked`, `_unpark`)
        self.parked: list[Delivery] = []
        self._lockable: set[int] = set(range(partitions))  # partitions whose locks are not known to be none
        self._locking = 0  # transactional acks made here: a look at the locks that overlapped one proves nothing
        self._unpark_at = 0.0
        # offsets acknowledged individually while a dispatch pass runs (`run`): its reads may predate
        # the ack, so what it hands out leaves these out (`_hand_out`)
        self._acked_in_pass: dict[int, set[int]] | None = None

    # -- consumers ------------------------------------------------------------------------------

    @property
    def active(self) -> Consumer | None:
        return self.consumers[0] if self.consumers else None

    def _targets(self) -> list[Consumer]:
        if self.mode.individual:
            return [c for c in self.consumers if c.permits > 0]
        active = self.active
        return [active] if active is not None and active.permits > 0 else []

    def wanted(self) -> set[int]:
        """The partitions some consumer here takes."""
        out: set[int] = set()
        for c in self.consumers:
            out |= set(range(self.partitions)) if c.partitions is None else set(c.partitions)
        return {p for p in out if 0 <= p < self.partitions}

    def take_partitions(self, consumer: Consumer, partitions: frozenset[int] | None) -> None:
        """What `consumer` takes from now on; a split subscription leases what it lacks at once."""
        if consumer.partitions != partitions:
            consumer.partitions = partitions
            self._renew_at = 0.0
            self.wake.set()

    def _readable(self, targets: list[Consumer]) -> list[int]:
        """The partitions owned here that one of `targets` takes."""
        if any(c.partitions is None for c in targets):
            return sorted(self.owned)
        return sorted({p for c in targets for p in (c.partitions or ()) if p in self.owned})

    def owned_now(self, partitions: dict[int, Position]) -> None:
        """A split subscription leased these partitions: it reads them from their durable positions."""
        for p, pos in partitions.items():
            self.cursor[p] = self.read_pos[p] = pos.cursor
            self.max_acked[p] = pos.max_acked
            self.outstanding[p] = {}
            self.owned.add(p)
            self._lockable.add(p)
        if partitions:
            self.wake.set()

    def disown(self, partitions: set[int]) -> None:
        """Stop dispatching these partitions; what is still in flight of them is forgotten here (the
        caller gives a partition up once nothing is, unless its lease ran out)."""
        self.owned -= partitions
        self.redeliver = deque(d for d in self.redeliver if d.partition not in partitions)
        self.parked = [d for d in self.parked if d.partition not in partitions]
        for p in partitions:
            for d in set(self.outstanding.get(p, {}).values()):
                if d.consumer is not None:
                    d.consumer.deliveries.discard(d)
                d.offsets = set()
            self.outstanding[p] = {}

    def unsent(self, partitions: set[int]) -> dict[int, list[int]]:
        """Offsets of these partitions whose delivery was counted (`_counted`) but that never reached
        a consumer: read for a share member whose response had no room for them (or that had gone),
        they wait here to go out again, and are forgotten with the partition (`disown`)."""
        out: dict[int, set[int]] = {}
        for d in (*self.redeliver, *self.parked):
            if d.counted and d.partition in partitions:
                out.setdefault(d.partition, set()).update(d.offsets)
        return {p: sorted(offs) for p, offs in out.items() if offs}

    def give_back(self, deliveries: list[Delivery]) -> None:
        """Deliveries handed to a consumer that never passed them on: up for delivery again, their
        delivery counts unchanged."""
        for d in deliveries:
            if d.consumer is not None:
                d.consumer.deliveries.discard(d)
            d.consumer = None
            held = self.outstanding[d.partition]
            for o in d.offsets:
                if held.get(o) is d:
                    del held[o]
        self.redeliver.extendleft(reversed([d for d in deliveries if d.offsets]))
        self.wake.set()

    def start_locks(self, deliveries: list[Delivery]) -> None:
        """The ack timeouts of these deliveries start now: a share member's records are locked from
        the response that carries them, as Kafka's acquisition lock starts when a fetch acquires."""
        now = time.monotonic()
        for d in deliveries:
            if d.consumer is not None and d.consumer.ack_timeout > 0 and d.offsets:
                d.deadline = now + d.consumer.ack_timeout
                heapq.heappush(self._deadlines, (d.deadline, next(self._tie), d))

    def reincarnated(self, topic_id: str, partitions: int) -> None:
        """The topic was deleted and created again: what was in flight belonged to the old one and
        is forgotten (its records are gone; an acknowledgement of them is refused), and nothing is
        read until the new incarnation's positions are set (`SubscriptionService.refresh`)."""
        self._generation += 1
        for d in [*self.redeliver, *(d for held in self.outstanding.values() for d in held.values())]:
            d.offsets = set()
        for c in self.consumers:
            c.deliveries.clear()
        self.redeliver.clear()
        self.parked.clear()
        self._deadlines.clear()
        self._lockable = set(range(partitions))
        self.topic_id, self.partitions = topic_id, partitions
        self.outstanding = {p: {} for p in range(partitions)}
        self.cursor, self.read_pos, self.max_acked = {}, {}, {}
        self.owned = {p for p in self.owned if p < partitions} if self.split else set(range(partitions))

    def draining(self) -> set[int]:
        """Partitions owned here that no consumer takes any more but that still have records in flight."""
        return {p for p in self.owned - self.wanted() if self.outstanding[p]}

    def _release(self, deliveries: list[Delivery]) -> None:
        """Put what a consumer held up for redelivery to whoever comes next."""
        for d in deliveries:
            if d.consumer is not None:
                d.consumer.deliveries.discard(d)
            d.consumer = None
            if d.offsets:
                d.redelivery_count += 1
                d.counted = False
                self.redeliver.append(d)

    def _rewind(self) -> None:
        """Forget what is in flight and read again from the durable cursors (seek, failover)."""
        self._generation += 1
        for c in self.consumers:
            c.deliveries.clear()
        for held in self.outstanding.values():
            held.clear()
        self.redeliver.clear()
        self.parked.clear()
        self._lockable = set(range(self.partitions))
        self._deadlines.clear()
        self.read_pos = dict(self.cursor)

    def attach(self, consumer: Consumer) -> None:
        if self.mode == Mode.EXCLUSIVE and self.consumers:
            raise ConsumerBusy(f"subscription {self.name!r} has an exclusive consumer")
        consumer.subscription = self
        self.consumers.append(consumer)
        self._renew_at = 0.0 if self.split else self._renew_at  # split: lease what it takes at once
        self.wake.set()

    def detach(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        was_active = consumer is self.active
        self.consumers.remove(consumer)
        if self.mode.individual:
            held = list(consumer.deliveries)
            for d in held:
                for o in d.offsets:
                    self.outstanding[d.partition].pop(o, None)
            self._release(held)
        elif was_active:
            self._rewind()
        consumer.deliveries.clear()
        self.wake.set()

    async def sync_members(self, *, leave_all: bool = False, joining: Consumer | None = None) -> None:
        """Key_Shared only (`gateway.domain.key_shared`): its consumers across gateways."""

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.wake.set()

    # -- acks -----------------------------------------------------------------------------------

    async def acknowledge(
        self, individual: dict[int, list[int]], cumulative: dict[int, int], txn_id: str | None = None
    ) -> None:
        """Ack now, or (with `txn_id`) lock the offsets for the transaction until it settles: they stay
        outstanding meanwhile, and its abort puts them up for redelivery."""
        if cumulative and self.mode.individual:
            raise NotAllowed(f"cumulative acknowledgement is not allowed on a {self.mode} subscription")
        calls: dict[int, tuple[int, list[int]]] = {}
        for p in set(individual) | set(cumulative):
            self._check_partition(p)
            upto = cumulative[p] + 1 if p in cumulative else -1
            calls[p] = (upto, individual.get(p, []))
        for attempt in range(2):
            try:
                if txn_id is not None:
                    self._locking += 1
                    self._lockable |= calls.keys()
                    marked = self._mark_locks(txn_id, calls)
                    try:
                        await self.service.store.lock(self.topic, self.name, txn_id, calls)
                    except BaseException:
                        for d, o in marked:
                            d.locks.pop(o, None)
                        raise
                    return
                cursors = await self.service.store.ack(self.topic, self.name, calls)
                break
            except PendingAckConflict as exc:
                upto, offsets = calls[exc.partition]
                acking = set(offsets) | {o for o in self.outstanding[exc.partition] if o < upto}
                if attempt or not await self.service.heal(self.topic, self.name, exc, acking):
                    raise
        self.applied(cursors, individual, cumulative)
        await self.watermark_moved()

    def _mark_locks(self, txn_id: str, calls: dict[int, tuple[int, list[int]]]) -> list[tuple[Delivery, int]]:
        """Note on the deliveries holding these offsets that `txn_id` locks them (`locked_by`)."""
        marked: list[tuple[Delivery, int]] = []
        for p, (upto, offsets) in calls.items():
            held = self.outstanding[p]
            for o in {*offsets, *(o for o in held if o < upto)}:
                d = held.get(o)
                if d is not None:
                    d.locks[o] = txn_id
                    marked.append((d, o))
        return marked

    def locked_by(self, partition: int, offsets: set[int], txn_id: str) -> set[int]:
        """Those of `offsets` held here by the delivery that `txn_id` locked: not a later delivery of
        one, made once the lock was gone (or, on the next gateway, by a delivery of its own)."""
        held = self.outstanding[partition]
        return {o for o in offsets if (d := held.get(o)) is not None and d.locks.get(o) == txn_id}

    def applied(self, cursors: dict[int, int], individual: dict[int, list[int]], cumulative: dict[int, int]) -> None:
        """Bring the in-memory view in line with acks the store has recorded. Acks of one partition
        may finish out of order (a consumer's beside the dispatcher's own, of markers): the cursor
        only moves forward, as it does in the store, or a stale answer would set it back and hold
        the watermark behind a marker already acknowledged."""
        for p, cursor in cursors.items():
            self.cursor[p] = max(self.cursor.get(p, cursor), cursor)
            held = self.outstanding[p]
            offsets = individual.get(p, [])
            if offsets:
                self.max_acked[p] = max(self.max_acked.get(p, -1), *offsets)
                if self._acked_in_pass is not None:
                    self._acked_in_pass.setdefault(p, set()).update(offsets)
            if p in cumulative:
                offsets = offsets + [o for o in held if o <= cumulative[p]]
            for o in offsets:
                d = held.pop(o, None)
                if d is not None:
                    d.offsets.discard(o)
                    if not d.offsets and d.consumer is not None:
                        d.consumer.deliveries.discard(d)
            if self.read_pos.get(p, 0) < cursor:
                self.read_pos[p] = cursor
        for d in self.redeliver:  # released before the ack arrived: do not send them again
            d.offsets = {o for o in d.offsets if o >= self.cursor[d.partition]}
            d.offsets.difference_update(individual.get(d.partition, ()))

    async def watermark_moved(self, reload: dict[int, int] | None = None) -> None:
        """Bring the watermark to the acknowledged positions (reading `reload`'s afresh) and tell the
        consumers when it changed, in order with the messages sent them. An ack recorded stays
        recorded if this fails: the next one tries again."""
        wm = self.watermark
        if wm is None:
            return
        async with self._watermark_lock:
            try:
                if reload:
                    await wm.load(reload)
                await wm.advance(dict(self.cursor))
            except Exception as exc:
                log.warning("watermark of %s/%s not moved: %s", self.topic, self.name, exc)
                return
            value = wm.value
            if value == self.watermark_sent:
                return
            self.watermark_sent = value
            for c in list(self.consumers):
                try:
                    await c.sink.watermark(c.id, value)
                except Exception as exc:
                    log.info("consumer %d of %s/%s unreachable: %s", c.id, self.topic, self.name, exc)

    def negative_acknowledge(self, offsets: dict[int, list[int]]) -> None:
        """Redeliver these offsets now (the client waited out its nack delay before sending)."""
        split: dict[Delivery, set[int]] = {}
        for p, offs in offsets.items():
            self._check_partition(p)
            held = self.outstanding[p]
            for o in offs:
                d = held.pop(o, None)
                if d is not None:
                    d.offsets.discard(o)
                    split.setdefault(d, set()).add(o)
        for d, again in split.items():
            if not d.offsets and d.consumer is not None:
                d.consumer.deliveries.discard(d)
            self.redeliver.append(Delivery(d.partition, d.entry, again, d.redelivery_count + 1, sticky=d.sticky))
        if split:
            self.wake.set()

    def renew(self, consumer: Consumer, offsets: dict[int, list[int]], timeout: float | None = None) -> None:
        """Restart the ack timeout of the deliveries holding these offsets, where `consumer` holds them
        (with `timeout`, for that long instead of the consumer's ack timeout)."""
        timeout = consumer.ack_timeout if timeout is None else timeout
        if timeout <= 0:
            return
        deadline = time.monotonic() + timeout
        for p, offs in offsets.items():
            for d in {self.outstanding[p].get(o) for o in offs} - {None}:
                assert d is not None
                if d.consumer is consumer:
                    d.deadline = deadline
                    heapq.heappush(self._deadlines, (deadline, next(self._tie), d))

    def _check_partition(self, p: int) -> None:
        if not 0 <= p < self.partitions:
            raise NotAllowed(f"{self.topic} has no partition {p}")

    # -- seek -----------------------------------------------------------------------------------

    async def seek(self, targets: dict[int, int]) -> None:
        """Move cursors (-1 earliest, -2 latest) and restart every consumer from them."""
        landed = await self.service.store.seek(self.topic, self.name, targets)
        self.cursor.update(landed)
        for p in landed:
            self.max_acked[p] = -1
        self._rewind()
        for c in list(self.consumers):
            c.permits = 0
            with contextlib.suppress(Exception):
                await c.sink.reset(c.id)
        await self.watermark_moved(reload=landed)
        self.wake.set()

    # -- dispatch -------------------------------------------------------------------------------

    async def run(self) -> None:
        while self.consumers:
            self.wake.clear()
            try:
                if time.monotonic() >= self._renew_at:
                    await self.service.renew(self)
                    await self.service.grow(self)
                    self._renew_at = time.monotonic() + self.service.renew_every(self)
                self._acked_in_pass = {}
                try:
                    progressed = await self._dispatch_once()
                finally:
                    self._acked_in_pass = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("dispatch of %s/%s failed, retrying: %s", self.topic, self.name, exc)
                progressed = False
                await self._wait(False, 0.5)
                continue
            if not progressed:
                await self._wait(bool(self._targets()),
                                 min(self._next_deadline(), max(0.0, self._renew_at - time.monotonic())))

    def _next_deadline(self) -> float:
        while self._deadlines and not self._deadlines[0][2].offsets:
            heapq.heappop(self._deadlines)
        if not self._deadlines:
            return _WAIT_POLL
        return max(0.0, min(_WAIT_POLL, self._deadlines[0][0] - time.monotonic()))

    async def _wait(self, for_log: bool, timeout: float) -> None:
        parts = [(self.topic, p) for p in sorted(self.owned)]
        if for_log:
            try:
                if await self.service.log.arm_wakeups(parts):
                    return  # appends on other gateways wake us from now on; one just before did not
            except GatewayError:
                pass  # Redis away: the poll below still ends the wait
        waits: list[asyncio.Future[object]] = [asyncio.ensure_future(self.wake.wait())]
        if for_log:
            waits.append(asyncio.ensure_future(self.service.log.notifier.wait(parts, timeout)))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    def _expire(self) -> None:
        now = time.monotonic()
        expired: list[Delivery] = []
        once: set[Delivery] = set()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, d = heapq.heappop(self._deadlines)
            # a delivery's lock restarted (renewed, or started when sent) leaves its older entries
            # behind: only the entry of its current deadline expires it, and once
            if deadline == d.deadline and d.offsets and d.consumer is not None and d not in once:
                once.add(d)
                expired.append(d)
        for d in expired:
            for o in d.offsets:
                self.outstanding[d.partition].pop(o, None)
        self._release(expired)

    async def _dispatch_once(self) -> bool:
        if self.deleted:
            return False
        self._expire()
        await self._unpark()
        await self.archive_over_limit()  # whether or not anyone is there to take more
        targets = self._targets()
        if not targets:
            return False
        readable = set(self._readable(targets))
        batch: list[Delivery] = []
        waiting: deque[Delivery] = deque()  # for a consumer that takes its partition, when one has permits
        while self.redeliver and len(batch) < 64:
            d = self.redeliver.popleft()
            self._unclaimed(d)
            if d.offsets:
                (batch if d.partition in readable else waiting).append(d)
        self.redeliver.extendleft(reversed(waiting))
        if not batch:
            before = dict(self.read_pos)
            batch = await self._read(sum(c.permits for c in targets), sorted(readable))
            if not batch:
                return self.read_pos != before  # skipped acked or hidden entries: read on at once
        batch = await self._unlocked(batch)
        if self.delivery_limit:
            batch = await self._counted(batch)
        if batch:
            await self._hand_out(batch, targets)
        return True

    async def _counted(self, batch: list[Delivery]) -> list[Delivery]:
        """With a delivery limit, deliveries are counted in Redis as they go out, so that a record
        delivered again by the next gateway after a crash carries its count, and one delivered
        `delivery_limit` times already is archived instead (`archive_over_limit`)."""
        generation = self._generation
        offsets: dict[int, list[int]] = {}
        for d in batch:
            if not d.counted:
                offsets.setdefault(d.partition, []).extend(d.offsets)
        counts = await self.service.store.delivered(self.topic, self.name, self.delivery_limit,
                                                    {p: sorted(offs) for p, offs in offsets.items()}) if offsets else {}
        if generation != self._generation:
            return []
        out: list[Delivery] = []
        over = False
        for d in batch:
            counted = counts.get(d.partition)
            if d.counted:
                out.append(d)
                continue
            if counted is None:  # the usual case: new records from the log, each delivered once now
                d.redelivery_count = 0
                d.counted = True
                out.append(d)
                continue
            by_count: dict[int, set[int]] = {}
            for o in d.offsets:
                by_count.setdefault(counted[o], set()).add(o)
            for n, offs in sorted(by_count.items()):
                if n < 0:  # at the limit already: delivered -n times, by a gateway gone since
                    self.redeliver.append(Delivery(d.partition, d.entry, offs, -n))
                    over = True
                else:
                    out.append(Delivery(d.partition, d.entry, offs, n - 1, counted=True))
            d.offsets = set()  # replaced by the parts above
        if over:
            await self.archive_over_limit()
        return out

    async def _unlocked(self, batch: list[Delivery]) -> list[Delivery]:
        """`batch` less what is acknowledged and what a transaction holds (PIP-31's PENDING_ACK),
        which is parked until the transaction ends. Delivered now, a locked message could not be
        acknowledged (TransactionConflict) and each try would count towards the dead-letter limit; a
        gateway that dies inside a transactional ack (a reconsume) leaves such locks to the next one,
        which reads them again from the cursor. Pulsar's dispatcher leaves pending-ack positions out
        the same way (AbstractBaseDispatcher.filterEntriesForConsumer) and redelivers them when the
        transaction aborts. Only partitions that may hold locks are looked at: the others cost nothing."""
        wanted: dict[int, set[int]] = {}
        for d in batch:
            if d.partition in self._lockable:
                wanted.setdefault(d.partition, set()).update(d.offsets)
        if not wanted:
            return batch
        locking, generation = self._locking, self._generation
        standing = await self.service.store.standing(self.topic, self.name, wanted)
        if generation != self._generation:
            return []  # rewound meanwhile: read again from the cursors
        if locking == self._locking:
            self._lockable -= {p for p, st in standing.items() if not st.locks}
        out: list[Delivery] = []
        for d in batch:
            st = standing.get(d.partition)
            if st is not None:
                d.offsets -= st.acked
                locked = d.offsets & st.locked.keys()
                if locked:
                    d.offsets -= locked
                    self.parked.append(Delivery(d.partition, d.entry, locked, d.redelivery_count, counted=d.counted,
                                                sticky=d.sticky))
            if d.offsets:
                out.append(d)
        return out

    async def _unpark(self) -> None:
        """Parked offsets whose transaction has ended go out again, unless it acknowledged them; looked
        at every poll, or at once when a transaction settles here (`lock_settled`)."""
        if not self.parked or time.monotonic() < self._unpark_at:
            return
        self._unpark_at = time.monotonic() + _WAIT_POLL
        generation, looked = self._generation, list(self.parked)
        wanted: dict[int, set[int]] = {}
        for d in looked:
            wanted.setdefault(d.partition, set()).update(d.offsets)
        standing = await self.service.store.standing(self.topic, self.name, wanted)
        if generation != self._generation:
            return
        holders: set[tuple[int, str]] = set()
        for d in looked:
            st = standing.get(d.partition)
            if st is None:
                continue
            free = d.offsets - st.locked.keys()
            again = free - st.acked
            d.offsets -= free
            holders |= {(d.partition, st.locked[o]) for o in d.offsets}
            if again:  # a transaction acked them, so they were delivered before: this is a redelivery
                self.redeliver.append(Delivery(d.partition, d.entry, again, d.redelivery_count + 1, sticky=d.sticky))
        self.parked = [d for d in self.parked if d.offsets]
        for p, holder in sorted(holders):  # a lock its transaction's end missed (a race with it) is settled now
            await self.service.heal(self.topic, self.name, PendingAckConflict(self.topic, p, holder), set())

    def lock_settled(self) -> None:
        """A transaction settled its locks on this subscription: what is parked is looked at now."""
        self._unpark_at = 0.0
        self.wake.set()

    def _unclaimed(self, d: Delivery) -> None:
        """Drop the offsets of a delivery to redo that were acked meanwhile (or claimed by a newer delivery)."""
        d.offsets = {o for o in d.offsets if o >= self.cursor.get(d.partition, 0) and o not in self.outstanding[d.partition]}

    async def archive_over_limit(self) -> None:
        """Records up for redelivery that were delivered `delivery_limit` times go no more:
        acknowledged, after `on_archive` heard of them."""
        if not self.delivery_limit or all(d.redelivery_count < self.delivery_limit for d in self.redeliver):
            return
        over = [d for d in self.redeliver if d.redelivery_count >= self.delivery_limit]
        self.redeliver = deque(d for d in self.redeliver if d.redelivery_count < self.delivery_limit)
        for d in over:
            self._unclaimed(d)
        deliveries = await self._unlocked([d for d in over if d.offsets])
        try:
            for d in deliveries:
                if self.on_archive is not None:
                    await self.on_archive(d)
            offsets: dict[int, list[int]] = {}
            for d in deliveries:
                offsets.setdefault(d.partition, []).extend(sorted(d.offsets))
            if offsets:
                await self.acknowledge(offsets, {})
        except BaseException:  # archived again next time (a dead-letter copy is written once)
            self.redeliver.extendleft(reversed(deliveries))
            raise

    async def _read(self, budget: int, parts: list[int]) -> list[Delivery]:
        """New batches from the partitions' read positions, as many as the permits allow."""
        generation = self._generation
        if not parts:
            return []
        slices = await asyncio.gather(
            *(self.service.log.read(self.topic, p, self.read_pos[p], min(64, max(1, budget)),
                                    read_committed=self.read_committed)
              for p in parts)
        )
        if generation != self._generation:
            return []
        lookups: dict[int, tuple[int, int]] = {}
        for p, sl in zip(parts, slices, strict=True):
            if sl.log_start > self.read_pos[p]:
                self.read_pos[p] = sl.log_start
            if sl.entries and sl.entries[0].base_offset <= self.max_acked.get(p, -1):
                lookups[p] = (self.read_pos[p], sl.entries[-1].next_offset)
        acked = await self.service.store.acked_in(self.topic, self.name, lookups) if lookups else {}
        if generation != self._generation:
            return []
        out: list[Delivery] = []
        hidden: dict[int, list[int]] = {}
        per_part = max(1, budget // max(1, len(parts)))
        for p, sl in zip(parts, slices, strict=True):
            taken = 0
            skip = acked.get(p, set())
            visible = {id(e) for e in (committed_entries(sl) if self.read_committed else uncommitted_entries(sl))}
            end = sl.stable if self.read_committed else sl.high_watermark
            if self.watermark is not None:  # markers are among the entries no one sees
                self.watermark.learn(p, sl, [e for e in sl.entries if id(e) not in visible])
            for e in sl.entries:
                if (taken >= per_part and out) or e.base_offset >= end:
                    break  # the rest waits for permits, or for its transaction to end
                lo = max(e.base_offset, self.read_pos[p])
                offsets = set(range(lo, e.next_offset)) - skip
                # a compacted log's gaps, between batches and inside cleaned ones: acked as read
                gone = (set(range(self.read_pos[p], e.base_offset)) | (offsets & absent_offsets(e))) - skip
                self.read_pos[p] = e.next_offset
                if gone:
                    hidden.setdefault(p, []).extend(sorted(gone))
                    offsets -= gone
                if not offsets:
                    continue
                if id(e) not in visible:  # markers, aborted batches: no one will ever ack them
                    hidden.setdefault(p, []).extend(sorted(offsets))
                    continue
                out.append(Delivery(p, e, offsets))
                taken += len(offsets)
        if hidden:
            await self.acknowledge(hidden, {})
        return out

    async def _hand_out(self, batch: list[Delivery], targets: list[Consumer]) -> None:
        generation = self._generation
        # only those still here: one that left while the batch was read would hold it unseen until
        # its lock expired, and it would go out again as a second delivery
        targets = [c for c in targets if c in self.consumers]
        per_consumer: dict[Consumer, list[Delivery]] = {}
        now = time.monotonic()
        for d in batch:
            self._drop_acked_meanwhile(d)
            if not d.offsets:
                continue
            takers = [c for c in targets if c.partitions is None or d.partition in c.partitions]
            if not takers:  # its consumers left meanwhile
                self.redeliver.append(d)
                continue
            live = [c for c in takers if c.permits > 0] or takers
            consumer = live[self._rr % len(live)]
            self._rr += 1
            self._assign(d, consumer, now)
            per_consumer.setdefault(consumer, []).append(d)
        await self._send(per_consumer, generation)

    def _drop_acked_meanwhile(self, d: Delivery) -> None:
        """Leave out of `d` what was acknowledged after this pass read it: the ack's answer may have
        gone out already, and a message must not reach a consumer after its ack was answered OK (a
        consumer that subscribed again acks what it received before, while the pass reads it again
        from the cursor; README "Guarantees"). Below the cursor, everything is acknowledged."""
        acked = self._acked_in_pass.get(d.partition, set()) if self._acked_in_pass else set()
        cursor = self.cursor.get(d.partition, 0)
        d.offsets = {o for o in d.offsets if o >= cursor and o not in acked}

    def _assign(self, d: Delivery, consumer: Consumer, now: float) -> None:
        """`d` is the consumer's from now on: outstanding, paid for with permits, under its ack timeout."""
        consumer.permits -= len(d.offsets)
        d.consumer = consumer
        consumer.deliveries.add(d)
        held = self.outstanding[d.partition]
        for o in d.offsets:
            held[o] = d
        d.deadline = now + consumer.ack_timeout if consumer.ack_timeout > 0 else 0.0
        if d.deadline:
            heapq.heappush(self._deadlines, (d.deadline, next(self._tie), d))

    async def _send(self, per_consumer: dict[Consumer, list[Delivery]], generation: int | None) -> None:
        """Write the deliveries to their consumers; stop if the subscription moved since `generation`
        (None: send them whatever happened)."""
        for consumer, deliveries in per_consumer.items():
            if generation is not None and generation != self._generation:
                return
            if consumer not in self.consumers:
                continue  # left meanwhile: detach released its deliveries already
            try:
                await consumer.sink.deliver(consumer.id, deliveries)
            except Exception as exc:
                log.info("consumer %d of %s/%s unreachable: %s", consumer.id, self.topic, self.name, exc)


class SubscriptionService:
    """The subscriptions with consumers on this gateway, and the consumers' entry points."""

    def __init__(
        self, log_service: LogService, store: Store, node_id: int = 0,
        watermarks: WatermarkService | None = None, lease_ms: int = LEASE_MS,
    ) -> None:
        """Gateways sharing a Redis need distinct node ids: a subscription (or, split, each of its
        partitions) is dispatched by one gateway at a time, under a lease of `lease_ms`, so modes
        and acks mean the same across gateways. With `watermarks`, each subscription keeps its
        watermark and tells its consumers."""
        self.lease_ms = lease_ms
        self.log = log_service
        self.store = store.subscriptions
        self.key_shared = store.key_shared
        # transactions' states ("COMMITTED", ...): lets a conflict with a transaction that has
        # ended (its lock left behind by a race with its end) heal itself
        self.txns = store.txn
        self.node_id = node_id
        self.watermarks = watermarks
        self._subs: dict[tuple[str, str], Subscription] = {}
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)

    def active(self, topic: str, name: str) -> bool:
        """Whether the subscription has consumers on this gateway."""
        return (topic, name) in self._subs

    def in_flight(self, topic: str, name: str) -> dict[int, Counter[int]]:
        """What the subscription has delivered and not had acknowledged, on this gateway: per
        partition, how many offsets at each delivery count (1 for a first delivery)."""
        sub = self._subs.get((topic, name))
        if sub is None:
            return {}
        return {p: Counter(d.redelivery_count + 1 for d in held.values()) for p, held in sub.outstanding.items()}

    def renew_every(self, sub: Subscription) -> float:
        """Seconds to the next renewal: soon while a split subscription lacks or drains a partition."""
        every = min(_RENEW_EVERY, self.lease_ms / 3000)
        if sub.deleted or (sub.split and sub.wanted() != sub.owned):
            return min(every, _SPLIT_RETRY)
        if sub.mode == Mode.KEY_SHARED:
            return min(every, _KEY_SHARED_SYNC)
        return every

    async def renew(self, sub: Subscription) -> None:
        """Renew the lease; split, also give up the partitions no consumer here takes and nothing is in
        flight of, and take those consumers here take that no other gateway holds."""
        if sub.mode == Mode.KEY_SHARED:
            await sub.sync_members()
            return
        if not sub.split:
            await self.store.lease(sub.topic, sub.name, self.node_id, self.lease_ms)
            return
        wanted = sub.wanted()
        keep = (sub.owned & wanted) | sub.draining()
        drop = sub.owned - keep
        if drop:
            await self._uncount(sub, drop)
            sub.disown(drop)
            await self.store.lease_partitions(sub.topic, sub.name, self.node_id, 0, sorted(drop))
        asked = keep | wanted
        others = await self.store.lease_partitions(sub.topic, sub.name, self.node_id, self.lease_ms, sorted(asked))
        lost = keep & others.keys()
        if lost:  # its lease ran out here (Redis unreachable that long): another gateway has it now
            log.warning("%s/%s: partitions %s are dispatched by another gateway now", sub.topic, sub.name,
                        sorted(lost))
            sub.disown(lost)
        gained = sorted(asked - keep - others.keys())
        if gained:
            positions = await self.store.open(sub.topic, gained, sub.name, initial=sub.initial, mode=sub.mode.value)
            sub.owned_now(dict(zip(gained, positions, strict=True)))

    async def grow(self, sub: Subscription) -> None:
        """Take in partitions added to the topic since (everything on them is new to the
        subscription), or start over on a topic deleted and created again (`refresh`)."""
        info = await self.refresh(sub)
        if info is None or info.partitions <= sub.partitions:
            return
        added = range(sub.partitions, info.partitions)
        positions = await self.store.open(sub.topic, added, sub.name, initial="earliest", mode=sub.mode.value)
        for p, pos in zip(added, positions, strict=True):
            sub.cursor[p] = sub.read_pos[p] = pos.cursor
            sub.max_acked[p] = pos.max_acked
            sub.outstanding[p] = {}
            if not sub.split:
                sub.owned.add(p)
        sub.partitions = info.partitions
        await sub.watermark_moved(reload={p: sub.cursor[p] for p in added})

    async def refresh(self, sub: Subscription, info: TopicInfo | None = None) -> TopicInfo | None:
        """The topic as it is now (None while it is deleted). A topic deleted and created again under
        its name is a new one (a new topic id): the subscription starts over on it from its
        initial position, as Kafka keys share-partition state by topic id, so a share group reads
        a re-created topic from share.auto.offset.reset rather than from where it was on the old."""
        if info is None:
            try:
                info = await self.log.topic(sub.topic, create=False)
            except TopicNotFound:
                sub.deleted = True
                return None
        sub.deleted = False
        if not sub.topic_id or info.topic_id == sub.topic_id:
            sub.topic_id = sub.topic_id or info.topic_id
            return info
        log.info("%s/%s: the topic was created again, read from its %s", sub.topic, sub.name, sub.initial)
        sub.reincarnated(info.topic_id, info.partitions)
        parts = sorted(sub.owned)
        positions = await self.store.open(sub.topic, parts, sub.name, initial=sub.initial, mode=sub.mode.value)
        for p, pos in zip(parts, positions, strict=True):
            sub.cursor[p] = sub.read_pos[p] = pos.cursor
            sub.max_acked[p] = pos.max_acked
        await sub.watermark_moved(reload=dict(sub.cursor))
        sub.wake.set()
        return info

    async def _uncount(self, sub: Subscription, partitions: set[int]) -> None:
        """Before this gateway stops dispatching these partitions, which forgets what waits to go out
        again of them: the deliveries counted of what never reached a consumer are taken back, or
        whoever reads them next would hand them out as second deliveries, where Kafka counts a
        delivery only as a fetch acquires the record (SharePartition.acquire's
        tryUpdateBatchState(ACQUIRED, DeliveryCountOps.INCREASE))."""
        if unsent := sub.unsent(partitions):
            await self.store.undelivered(sub.topic, sub.name, unsent)

    async def _release_lease(self, sub: Subscription) -> None:
        with contextlib.suppress(Exception):  # else a second delivery, no loss
            await self._uncount(sub, set(sub.owned))
        with contextlib.suppress(Exception):
            if sub.mode == Mode.KEY_SHARED:
                await sub.sync_members(leave_all=True)
            elif sub.split:
                await self.store.lease_partitions(sub.topic, sub.name, self.node_id, 0, sorted(sub.owned))
            else:
                await self.store.lease(sub.topic, sub.name, self.node_id, 0)

    async def subscribe(
        self,
        topic: str,
        name: str,
        sink: ConsumerSink,
        *,
        mode: Mode = Mode.EXCLUSIVE,
        initial_position: str = "latest",
        consumer_name: str = "",
        ack_timeout: float = 0.0,
        split: bool = False,
        partitions: frozenset[int] | None = None,
        sticky_ranges: tuple[tuple[int, int], ...] = (),
    ) -> Consumer:
        """`partitions`: those the consumer takes (None: all). `sticky_ranges` (Key_Shared only): the
        key hashes it takes, as Pulsar's sticky Key_Shared mode (ConsumerBusy where they overlap
        another consumer's, or where it or the others leave it to the ring). `split` (shared mode): a subscription
        first opened here by this consumer is dispatched by partition, each under a lease of its own,
        rather than whole; a consumer joining one open here already takes it as it is."""
        if not name:
            raise NotAllowed("a subscription needs a name")
        if sticky_ranges:
            from gateway.domain.key_shared import check_ranges

            check_ranges(mode, sticky_ranges)
        info = await self.log.topic(topic)
        async with self._lock:
            sub = self._subs.get((topic, name))
            if sub is not None and sub.mode != mode:
                raise ConsumerBusy(f"subscription {name!r} is in use in {sub.mode} mode")
            consumer = Consumer(next(self._ids), consumer_name, sink, ack_timeout, partitions=partitions,
                                sticky_ranges=sticky_ranges)
            split = split and mode == Mode.SHARED
            if sub is None:
                if mode == Mode.KEY_SHARED:  # every gateway dispatches its own consumers, none under the lease
                    await self.store.lease(topic, name, self.node_id, 0)  # ConsumerBusy if another mode holds it
                elif not split:
                    if (await self.key_shared.members(topic, name, ttl_ms=0)).members:
                        raise ConsumerBusy(f"subscription {name!r} is in use in key_shared mode")
                    await self.store.lease(topic, name, self.node_id, self.lease_ms)
                kind: type[Subscription] = Subscription
                if mode == Mode.KEY_SHARED:
                    from gateway.domain.key_shared import KeySharedSubscription

                    kind = KeySharedSubscription
                sub = kind(self, topic, name, mode, info.partitions, split=split, initial=initial_position,
                           topic_id=info.topic_id)
                try:
                    positions = await self.store.open(
                        topic, range(info.partitions), name, initial=initial_position, mode=mode.value
                    )
                    for p, pos in enumerate(positions):
                        sub.cursor[p] = sub.read_pos[p] = pos.cursor
                        sub.max_acked[p] = pos.max_acked
                    if sub.watermark is not None:  # where the acknowledged positions are: after a failover too
                        await sub.watermark.load(dict(sub.cursor))
                        sub.watermark_sent = sub.watermark.value
                except BaseException:
                    await self._release_lease(sub)
                    raise
                sub.attach(consumer)
                self._subs[(topic, name)] = sub
                sub.task = asyncio.create_task(sub.run(), name=f"dispatch {topic}/{name}")
            else:
                await self.refresh(sub, info)
                sub.attach(consumer)
        if mode == Mode.KEY_SHARED:  # on the ring before the consumer hears it is subscribed
            try:
                await sub.sync_members(joining=consumer)
            except BaseException:
                await self.unsubscribe_consumer(consumer)
                raise
        return consumer

    async def unsubscribe_consumer(self, consumer: Consumer) -> None:
        """The consumer leaves; its unacked messages go to the others (or wait for the next one)."""
        sub = consumer.subscription
        if sub is None:
            return
        consumer.subscription = None
        async with self._lock:
            sub.detach(consumer)
            with contextlib.suppress(Exception):  # else the next dispatcher delivers them again
                await sub.archive_over_limit()
            if not sub.consumers:
                self._subs.pop((sub.topic, sub.name), None)
                task = sub.task
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                await self._release_lease(sub)

    async def delete_subscription(self, consumer: Consumer) -> None:
        """The consumer leaves and takes the subscription with it; refused while others are attached."""
        sub = self._sub(consumer)
        if len(sub.consumers) > 1:
            raise NotAllowed(f"subscription {sub.name!r} has other consumers")
        await self.unsubscribe_consumer(consumer)
        await self.store.delete(sub.topic, range(sub.partitions), sub.name)
        if sub.mode == Mode.KEY_SHARED:
            await self.key_shared.delete(sub.topic, range(sub.partitions), sub.name)

    def _sub(self, consumer: Consumer) -> Subscription:
        if consumer.subscription is None:
            raise SubscriptionNotFound("the consumer is closed")
        return consumer.subscription

    def flow(self, consumer: Consumer, permits: int) -> None:
        self._sub(consumer).flow(consumer, permits)

    async def acknowledge(
        self, consumer: Consumer, individual: dict[int, list[int]], cumulative: dict[int, int],
        txn_id: str | None = None,
    ) -> None:
        """Plain acks, or with `txn_id` PIP-31's PENDING_ACK (the caller has added the subscription's
        partitions to the transaction first, so its end settles them); TransactionConflict when
        another transaction holds a message."""
        await self._sub(consumer).acknowledge(individual, cumulative, txn_id)

    async def settle_txn(
        self, topic: str, partition: int, name: str, txn_id: str, commit: bool, *, spare: set[int] | None = None
    ) -> None:
        """The transaction coordinator's subscription hook: commit acks what the transaction locked,
        abort releases it for redelivery (but `spare`, being acked right now). Safe to repeat."""
        r = await self.store.settle(topic, partition, name, txn_id, commit)
        sub = self._subs.get((topic, name))
        if sub is not None:
            sub.lock_settled()
        if sub is None or partition >= sub.partitions:
            return
        if commit:
            if r.cursor >= 0:
                sub.applied({partition: r.cursor}, {partition: r.offsets},
                            {partition: r.upto - 1} if r.upto >= 0 else {})
                await sub.watermark_moved()
            return
        # only the deliveries the transaction locked: settled late (by the reaper after the gateway that
        # locked died, or in a race with a delivery made once the lock was gone), a nack of a later
        # delivery would take the message away from its consumer, whose acknowledgement then fails
        again = sub.locked_by(partition, set(r.offsets) | {o for o in sub.outstanding[partition] if o < r.upto}, txn_id)
        again -= spare or set()
        if again:
            sub.negative_acknowledge({partition: sorted(again)})

    async def heal(self, topic: str, name: str, conflict: PendingAckConflict, acking: set[int]) -> bool:
        """Settle the lock of a transaction that has ended; True when the conflict is gone. What the
        caller is acking is not redelivered meanwhile."""
        if not conflict.holder:
            return False
        info = await self.txns.describe(conflict.holder)
        state = info.state if info is not None else None
        if state not in (None, "COMMITTED", "ABORTED"):
            return False
        await self.settle_txn(topic, conflict.partition, name, conflict.holder, state == "COMMITTED", spare=acking)
        return True

    def negative_acknowledge(self, consumer: Consumer, offsets: dict[int, list[int]]) -> None:
        self._sub(consumer).negative_acknowledge(offsets)

    async def seek_offset(self, consumer: Consumer, offset: int, partition: int | None = None) -> None:
        """To `offset` (-1 earliest, -2 latest) on one partition, or on all when `partition` is None."""
        sub = self._sub(consumer)
        parts = range(sub.partitions) if partition is None else [partition]
        for p in parts:
            sub._check_partition(p)
        await sub.seek({p: offset for p in parts})

    async def seek_time(self, consumer: Consumer, timestamp_ms: int) -> None:
        """Every partition to its first record at or after the time (its end when there is none)."""
        sub = self._sub(consumer)
        found = await asyncio.gather(
            *(self.log.offset_for_time(sub.topic, p, timestamp_ms) for p in range(sub.partitions))
        )
        await sub.seek({p: -2 if f is None else f[0] for p, f in enumerate(found)})

    async def close(self) -> None:
        """Stop dispatching and hand the subscriptions' leases back for another gateway to take."""
        subs = list(self._subs.values())
        self._subs.clear()
        for sub in subs:
            if sub.task is not None:
                sub.task.cancel()
            await self._release_lease(sub)

