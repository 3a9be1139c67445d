"""What the group coordinator holds for every protocol: locks, leases, timers, adoption.

Durable state lives in Redis (one Lua script per save); the protocols are pure state machines
(`classic.ClassicGroup`, `consumer.ConsumerGroup`, one of each per group id). `GroupDriver` holds
what they cannot: the lock and the coordinator lease of each group, the requests waiting at a
barrier (futures, answered by ticket), the timer that calls each machine's `expire` when one of its
deadlines is due, and the adoption of stored groups whose coordinator went away. Each protocol's
driving (`classic_driver`, `consumer_driver`) is a mixin over this base; the `coordinator` joins
them and adds what spans protocols (offsets, describing, listing, deleting).

Each operation on a group runs under that group's lock: load from Redis, apply the transition,
save, and only then answer waiting requests, so a client never sees a state Redis does not hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.domain.groups.classic import Answer, ClassicGroup
from gateway.domain.groups.consumer import ConsumerGroup, ConsumerGroupConfig
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.offsets import OffsetManager
from gateway.domain.groups.streams import StreamsGroup, StreamsGroupConfig
from gateway.errors import log_failure
from gateway.store.consumer_groups import ConsumerGroupStore
from gateway.store.groups import GroupStore
from gateway.store.share_groups import ShareGroupStore
from gateway.store.streams_groups import StreamsGroupStore

log = logging.getLogger(__name__)

# how `_adoptable` hands back a stored group with members: arm its machine from a time, and its size
Adoption = tuple[Callable[[float], None], int]


@dataclass
class _Runtime:
    """A group in this process: its state machines, and what only the driver can hold."""

    group: ClassicGroup
    consumer: ConsumerGroup  # the same id's side in KIP-848's protocol: a group is of one type at a time
    streams: StreamsGroup  # and in KIP-1071's
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiters: dict[int, asyncio.Future[Any]] = field(default_factory=dict)  # ticket -> waiting request
    lease_until: float = 0.0  # while this process holds the group's coordinator lease

    def park(self, ticket: int) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiters[ticket] = fut

        def gone(f: asyncio.Future[Any]) -> None:
            if f.cancelled() and self.waiters.get(ticket) is f:
                self.group.abandon(ticket)  # its client went away: no longer keeps the member alive

        fut.add_done_callback(gone)
        return fut

    def deliver(self, answers: list[tuple[int, Answer]]) -> None:
        for ticket, result in answers:
            fut = self.waiters.pop(ticket, None)
            if fut is None or fut.done():
                continue
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)

    def fail(self, why: str) -> None:
        """Every waiting request learns to retry (and rejoin)."""
        for fut in self.waiters.values():
            if not fut.done():
                fut.set_exception(GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, why))
        self.waiters.clear()


class GroupDriver:
    """Coordinates the groups whose lease this gateway holds (every group, with one gateway).

    With several gateways on one Redis, a group is coordinated by one gateway at a time under a
    lease (`lease_ms`, renewed while the group has members, given up on close): the others answer
    NOT_COORDINATOR and name the holder in FindCoordinator, and take over groups whose lease
    lapsed, giving their members a fresh session to come over.
    """

    def __init__(
        self,
        store: GroupStore,
        *,
        partitions: Callable[[str], Awaitable[int]] | None = None,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 1_800_000,
        initial_rebalance_delay_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
        node_id: int = 0,
        lease_ms: int = 10_000,
        prefers: Callable[[str], bool] = lambda group_id: True,
        consumer_store: ConsumerGroupStore | None = None,
        consumer_config: ConsumerGroupConfig | None = None,
        topics: Callable[[], Awaitable[Mapping[str, int]]] | None = None,
        streams_config: StreamsGroupConfig | None = None,
    ) -> None:
        self.store = store
        self.topics = topics  # every topic with its partition count, as ConsumerGroupHeartbeat sees them
        self.consumer_store = consumer_store or ConsumerGroupStore(store.redis, store.scripts)
        self.share_groups = ShareGroupStore(store.redis, store.scripts)  # ids the other protocols refuse
        self.streams_store = StreamsGroupStore(store.redis, store.scripts)
        self.streams_config = streams_config or StreamsGroupConfig()
        self.consumer_config = consumer_config or ConsumerGroupConfig()
        self.node_id = node_id
        self.lease_ms = lease_ms
        self.address = "127.0.0.1 0"  # "<host> <port>" of the Kafka listener, set by the face
        self.offsets = OffsetManager(store, partitions)
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay = initial_rebalance_delay_ms / 1000
        self.clock = clock
        self._groups: dict[str, _Runtime] = {}
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._closing = False
        self._next_adoption = 0.0
        # whether this gateway is the one to take over a group nobody coordinates (with several
        # gateways, the one FindCoordinator names), so they do not all race for its lease
        self.prefers = prefers

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the timer role: session expiry, rebalance deadlines. Idempotent; a closed
        coordinator stays closed (a request straggling in during shutdown must not revive it)."""
        if self._closing:
            return
        if self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._timer_loop(), name="group-coordinator")

    def advertise(self, host: str, port: int) -> None:
        """Where clients reach this gateway, written into the leases it takes."""
        self.address = f"{host} {port}"

    async def locate(self, group_id: str) -> tuple[int, str, int] | None:
        """(node id, host, port) of the gateway holding the group's lease (this one, maybe), or None
        when nobody coordinates the group now."""
        holder = await self.store.owner(group_id)
        if holder is None:
            return None
        node, host, port = holder.split(" ")
        return int(node), host, int(port)

    async def close(self) -> None:
        # a flag as well as cancel(): a cancel racing a Redis reply can be lost inside the client
        self._closing = True
        self._wake.set()
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None
        now = self.clock()
        for gid, rt in self._groups.items():
            if rt.lease_until > now:  # hand the group over at once rather than when the lease lapses
                with contextlib.suppress(Exception):
                    await self.store.lease(gid, self.node_id, self.address, 0)
        for rt in self._groups.values():
            rt.fail("coordinator closing")
        self._groups.clear()

    # -- timers ---------------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        while not self._closing:
            self._wake.clear()
            now = self.clock()
            if now >= self._next_adoption:
                self._next_adoption = now + self.lease_ms / 1000
                await self._adopt_stored_groups()
            due: list[str] = []
            nxt = min(now + 1.0, self._next_adoption)
            for gid, rt in list(self._groups.items()):
                d = self._next_deadline(rt)
                if d is not None:
                    if d <= now:
                        due.append(gid)
                    else:
                        nxt = min(nxt, d)
            failed = False
            for gid in due:
                if self._closing:
                    return
                try:
                    await self._expire(gid)
                except GroupError as exc:
                    if exc.kind is not GroupErrorKind.NOT_COORDINATOR:
                        log.warning("group %s: expiry failed (%s); retrying shortly", gid, exc)
                        failed = True
                except Exception as exc:
                    log_failure(log, f"group {gid}: expiry", exc, "retrying shortly")
                    failed = True
            if failed:
                await asyncio.sleep(0.5)
            if due:
                continue
            # asyncio.timeout, not wait_for: wait_for can swallow a cancel that races the wake-up
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, nxt - self.clock())):
                    await self._wake.wait()

    async def _expire(self, group_id: str) -> None:
        """Run what is due in whichever protocol's machine has a deadline passed; when none had,
        only the lease was due for renewal."""
        rt = self._rt(group_id)
        if not await self._expire_due(group_id, rt, self.clock()):
            async with rt.lock:
                await self._own(group_id, rt)

    async def _expire_due(self, group_id: str, rt: _Runtime, now: float) -> bool:
        """Each protocol's driver runs its machine's `expire` when due and says whether it did
        (cooperatively: an override calls this through `super()`)."""
        return False

    def _next_deadline(self, rt: _Runtime) -> float | None:
        candidates = [d for d in (rt.group.next_deadline(), rt.consumer.next_deadline(), rt.streams.next_deadline())
                      if d is not None]
        due = min(candidates) if candidates else None
        if rt.lease_until and (rt.group.sessions or rt.consumer.sessions or rt.streams.sessions):
            renew = rt.lease_until - self.lease_ms / 1000 / 3  # renew with a third left
            due = renew if due is None else min(due, renew)
        return due

    # -- adoption -------------------------------------------------------------------------------

    async def _adopt_stored_groups(self) -> None:
        """Take over groups with members whose coordinator is gone (a previous run of this gateway,
        or another gateway whose lease lapsed): arm their sessions and rebalance deadlines."""
        try:
            for gid in await self.store.group_ids():
                if self._closing:
                    return
                if not self.prefers(gid) and gid not in self._groups:
                    continue
                rt = self._rt(gid)
                if rt.group.armed or rt.consumer.armed or rt.streams.armed:
                    continue
                async with rt.lock:
                    found = await self._adoptable(gid, rt)
                    if found is not None:
                        await self._adopt(gid, rt, *found)
        except Exception as exc:
            log_failure(log, "adopting stored groups", exc, "trying again later")

    async def _adoptable(self, group_id: str, rt: _Runtime) -> Adoption | None:
        """The stored group of this id with members, in whichever protocol's driver finds it
        (cooperatively, as `_expire_due`)."""
        return None

    async def _adopt(self, group_id: str, rt: _Runtime, arm: Callable[[float], None], members: int) -> None:
        """Lease a stored group with members (of either protocol) and arm its deadlines from now."""
        try:
            await self._own(group_id, rt)
        except GroupError:
            return
        log.info("group %s: adopted with %d members", group_id, members)
        arm(self.clock())
        self._wake.set()

    # -- the group's runtime and lease ----------------------------------------------------------

    def _rt(self, group_id: str) -> _Runtime:
        rt = self._groups.get(group_id)
        if rt is None:
            group = ClassicGroup(group_id, initial_rebalance_delay=self.initial_rebalance_delay)
            rt = self._groups[group_id] = _Runtime(
                group, ConsumerGroup(group_id, self.consumer_config), StreamsGroup(group_id, self.streams_config))
        return rt

    async def _own(self, group_id: str, rt: _Runtime) -> None:
        """Hold (take or renew) the group's lease, or raise NOT_COORDINATOR naming the holder."""
        now = self.clock()
        ttl = self.lease_ms / 1000
        if rt.lease_until - now > ttl * 2 / 3:
            return
        holder = await self.store.lease(group_id, self.node_id, self.address, self.lease_ms)
        if holder is not None:
            node = holder.split(" ")[0]
            if rt.lease_until or rt.group.active:
                self._reset(group_id, f"gateway {node} coordinates it now")
            raise GroupError(GroupErrorKind.NOT_COORDINATOR, f"group {group_id} is coordinated by gateway {node}")
        rt.lease_until = now + ttl

    def _reset(self, group_id: str, why: str) -> None:
        """Forget this process's view of a group (keeping its lock); waiting clients retry and rejoin."""
        log.warning("group %s: %s; dropping parked requests", group_id, why)
        rt = self._groups.get(group_id)
        if rt is None:
            return
        rt.group.reset()
        rt.consumer.reset()
        rt.streams.reset()
        rt.fail(why)
        rt.lease_until = 0.0

    async def _delete_offsets_unless(
        self, group_id: str, parts: list[tuple[str, int]], subscribed: set[str]
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """OffsetDelete on a group of the modern protocols: the partitions of `subscribed` topics
        stay (GROUP_SUBSCRIBED_TO_TOPIC), the others' offsets go."""
        outcome = {p: GroupErrorKind.GROUP_SUBSCRIBED_TO_TOPIC if p[0] in subscribed else None for p in parts}
        if not await self.store.delete_offsets(group_id, 0, [p for p, e in outcome.items() if e is None]):
            raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, "group changed concurrently; retry")
        return outcome

    def _refused(self, group_id: str, code: int) -> None:
        """Raise for a save or commit the store refused (0: it did not)."""
        if code == GroupErrorKind.NOT_COORDINATOR:
            self._reset(group_id, "another gateway took the group's lease")
            raise GroupError(GroupErrorKind.NOT_COORDINATOR, f"group {group_id} moved to another gateway")
        if code == GroupErrorKind.GROUP_ID_NOT_FOUND:
            raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"group {group_id} is not a consumer group")
        if code:
            self._reset(group_id, "the group changed in Redis behind this coordinator")
            raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, "group changed concurrently; retry")
