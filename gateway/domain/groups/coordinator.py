"""The group coordinator: the driver of the group protocols over state kept in Redis.

Durable: membership, generation, protocol, leader, assignments (saved by compare-and-set, one Lua
script per save) and committed offsets (one Lua script that checks the committer and writes).
The protocol itself is a pure state machine (`classic.ClassicGroup`, one per group); this driver
holds what it cannot: the lock and the coordinator lease of each group, the requests waiting at
a barrier (futures, answered by ticket), the timer that calls `expire` when a deadline is due,
and the store. Offsets are checked and written by `offsets.OffsetManager`.

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
from functools import partial
from typing import Any, TypeVar

from gateway.domain.groups.classic import (
    DEAD,
    EMPTY,
    Answer,
    ClassicGroup,
    Decision,
    GroupDescription,
    JoinRequest,
    JoinResult,
    MemberDescription,
    Parked,
    SyncRequest,
    SyncResult,
    describe,
)
from gateway.domain.groups.consumer import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupDescription,
    HeartbeatRequest,
    HeartbeatResult,
    Step,
    group_state,
    validate_offset_commit,
    validate_offset_fetch,
)
from gateway.domain.groups.consumer import describe as describe_consumer
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.offsets import (
    OffsetManager,
    consumer_subscription,
    encode_consumer_assignment,
    encode_consumer_subscription,
)
from gateway.domain.log import LogService
from gateway.errors import PartitionNotFound, TopicNotFound
from gateway.store import Store
from gateway.store.consumer_groups import ConsumerGroupDoc, ConsumerGroupStore
from gateway.store.groups import CommittedOffset, GroupDoc, GroupStore

log = logging.getLogger(__name__)

R = TypeVar("R")


CLASSIC = "classic"
CONSUMER = "consumer"


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC


@dataclass
class _Runtime:
    """A group in this process: its state machine, and what only the driver can hold."""

    group: ClassicGroup
    consumer: ConsumerGroup  # the same id's side in KIP-848's protocol: a group is of one type at a time
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


class GroupCoordinator:
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
    ) -> None:
        self.store = store
        self.consumer_store = consumer_store or ConsumerGroupStore(store.redis, store.scripts)
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
                except Exception:
                    log.exception("group %s: expiry failed; retrying shortly", gid)
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
        """Run what is due in whichever protocol's machine has a deadline passed."""
        rt = self._rt(group_id)
        now = self.clock()
        classic_due = rt.group.next_deadline()
        if classic_due is not None and classic_due <= now:
            await self._run(group_id, lambda g, group, now: group.expire(g, now))
        consumer_due = rt.consumer.next_deadline()
        if consumer_due is not None and consumer_due <= now:
            await self._run_consumer(group_id, lambda g, group, now: group.expire(g, now))
        elif classic_due is None or classic_due > now:
            async with rt.lock:
                await self._own(group_id, rt)  # only the lease was due for renewal

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
                if rt.group.armed or rt.consumer.armed:
                    continue
                async with rt.lock:
                    g = await self.store.load(gid)
                    if g is not None and g.members:
                        await self._adopt(gid, rt, partial(rt.group.arm, g), len(g.members))
                        continue
                    cg = await self.consumer_store.load(gid)
                    if cg is not None and cg.members:
                        await self._adopt(gid, rt, partial(rt.consumer.arm, cg), len(cg.members))
        except Exception:
            log.exception("could not adopt stored groups; trying again later")

    async def _adopt(self, group_id: str, rt: _Runtime, arm: Callable[[float], None], members: int) -> None:
        """Lease a stored group with members (of either protocol) and arm its deadlines from now."""
        try:
            await self._own(group_id, rt)
        except GroupError:
            return
        log.info("group %s: adopted with %d members", group_id, members)
        arm(self.clock())
        self._wake.set()

    def _next_deadline(self, rt: _Runtime) -> float | None:
        candidates = [d for d in (rt.group.next_deadline(), rt.consumer.next_deadline()) if d is not None]
        due = min(candidates) if candidates else None
        if rt.lease_until and (rt.group.sessions or rt.consumer.sessions):
            renew = rt.lease_until - self.lease_ms / 1000 / 3  # renew with a third left
            due = renew if due is None else min(due, renew)
        return due

    # -- running a transition -------------------------------------------------------------------

    def _rt(self, group_id: str) -> _Runtime:
        rt = self._groups.get(group_id)
        if rt is None:
            group = ClassicGroup(group_id, initial_rebalance_delay=self.initial_rebalance_delay)
            rt = self._groups[group_id] = _Runtime(group, ConsumerGroup(group_id, self.consumer_config))
        return rt

    async def _run(
        self, group_id: str, event: Callable[[GroupDoc | None, ClassicGroup, float], Decision[R]],
        *, joining: bool = False,
    ) -> R:
        """Load, transition, save, answer; then wait at the barrier if the caller must. A member
        `joining` finds the id free of a consumer group with members (an empty one gives way)."""
        rt = self._rt(group_id)
        try:
            async with rt.lock:
                await self._own(group_id, rt)
                if joining:
                    await self._claim_for_classic(group_id)
                g = await self.store.load(group_id)
                if g is not None:
                    rt.group.arm(g, self.clock())
                decision = event(g, rt.group, self.clock())
                reply = decision.reply
                waiting = rt.park(reply.ticket) if isinstance(reply, Parked) else None
                if decision.save and decision.group is not None:
                    refused = await self.store.save(decision.group, self.node_id)
                    if refused == GroupErrorKind.NOT_COORDINATOR:
                        self._reset(group_id, "another gateway took the group's lease")
                        raise GroupError(GroupErrorKind.NOT_COORDINATOR, f"group {group_id} moved to another gateway")
                    if refused:
                        self._reset(group_id, "the group changed in Redis behind this coordinator")
                        raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, "group changed concurrently; retry")
                rt.deliver(decision.answers)
        finally:
            self._wake.set()  # deadlines may have moved
        if isinstance(reply, Parked):
            assert waiting is not None
            result: R = await waiting
            return result
        return reply

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
        rt.fail(why)
        rt.lease_until = 0.0

    async def _claim_for_classic(self, group_id: str) -> None:
        """Kafka's classicGroupJoin: a consumer group with members is joined only by migrating it,
        which this gateway does not do (INCONSISTENT_GROUP_PROTOCOL); an empty one is replaced by
        the classic group, its committed offsets kept."""
        cg = await self.consumer_store.load(group_id)
        if cg is None:
            return
        if cg.members:
            raise GroupError(
                GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL,
                f"group {group_id} is a consumer group of the consumer protocol; classic members cannot join it",
            )
        await self.consumer_store.delete(group_id, offsets=False)
        self._rt(group_id).consumer.reset()

    async def _run_consumer(
        self, group_id: str, event: Callable[[ConsumerGroupDoc | None, ConsumerGroup, float], Step[R]],
        *, joining: bool = False,
    ) -> R:
        """Load, transition, save, then answer: the consumer protocol's `_run` (nothing waits). A
        heartbeat (`joining`) is refused while a classic group of the id has members: Kafka's
        getOrMaybeCreateConsumerGroup without online upgrade answers GROUP_ID_NOT_FOUND."""
        rt = self._rt(group_id)
        try:
            async with rt.lock:
                await self._own(group_id, rt)
                if joining:
                    classic = await self.store.load(group_id)
                    if classic is not None and classic.members:
                        raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
                g = await self.consumer_store.load(group_id)
                if g is not None:
                    rt.consumer.arm(g, self.clock())
                step = event(g, rt.consumer, self.clock())
                if step.save and step.group is not None:
                    refused = await self.consumer_store.save(step.group, self.node_id)
                    self._refused(group_id, refused)
                return step.reply
        finally:
            self._wake.set()

    def _refused(self, group_id: str, code: int) -> None:
        """Raise for a consumer group's save or commit the store refused (0: it did not)."""
        if code == GroupErrorKind.NOT_COORDINATOR:
            self._reset(group_id, "another gateway took the group's lease")
            raise GroupError(GroupErrorKind.NOT_COORDINATOR, f"group {group_id} moved to another gateway")
        if code == GroupErrorKind.GROUP_ID_NOT_FOUND:
            raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"group {group_id} is not a consumer group")
        if code:
            self._reset(group_id, "the group changed in Redis behind this coordinator")
            raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, "group changed concurrently; retry")

    # -- the classic protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup ----------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int = -1,
        instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = False,
    ) -> JoinResult:
        """Join (or rejoin) a group; returns when the join barrier falls or at once if nothing changes.

        `rebalance_timeout_ms` -1 (JoinGroup v0) means the session timeout. With
        `require_known_member_id` (v4+, dynamic members) a first join is refused with
        MEMBER_ID_REQUIRED carrying the id to come back with.
        """
        if not group_id:
            raise GroupError(GroupErrorKind.INVALID_GROUP_ID, "the group id is empty")
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            raise GroupError(
                GroupErrorKind.INVALID_SESSION_TIMEOUT,
                f"session timeout must be within {self.min_session_timeout_ms}..{self.max_session_timeout_ms} ms",
            )
        req = JoinRequest(
            protocol_type,
            protocols,
            session_timeout_ms,
            rebalance_timeout_ms if rebalance_timeout_ms >= 0 else session_timeout_ms,
            instance_id or None,
            client_id,
            client_host,
        )
        return await self._run(
            group_id, lambda g, group, now: group.join(g, now, member_id, req, require_known=require_known_member_id),
            joining=True,
        )

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        *,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol: str | None = None,
        assignments: dict[str, bytes] | None = None,
    ) -> SyncResult:
        """The member's assignment for `generation`; parks followers until the leader's sync."""
        return await self._run(
            group_id,
            lambda g, group, now: group.sync(
                g, now, SyncRequest(generation, member_id, instance_id, protocol_type, protocol, assignments)
            ),
        )

    async def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> None:
        """Keep the member's session; raises REBALANCE_IN_PROGRESS when it must rejoin."""
        await self._run(group_id, lambda g, group, now: group.heartbeat(g, now, generation, member_id, instance_id))

    async def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> list[GroupErrorKind | None]:
        """Remove members (member id, instance id); one outcome per member, None when it left."""
        return await self._run(group_id, lambda g, group, now: group.leave(g, now, members))

    # -- KIP-848's protocol: ConsumerGroupHeartbeat -----------------------------------------------

    async def consumer_heartbeat(
        self, group_id: str, req: HeartbeatRequest, topics: Mapping[str, int], *, api_version: int = 1
    ) -> HeartbeatResult:
        """Join, heartbeat, reconcile or leave a consumer group; `topics` is every topic with its
        partition count, against which subscriptions are resolved."""
        if not group_id:
            raise GroupError(GroupErrorKind.INVALID_REQUEST, "GroupId can't be empty.")
        return await self._run_consumer(
            group_id, lambda g, group, now: group.heartbeat(g, now, req, topics, api_version=api_version),
            joining=True,
        )

    async def describe_consumer(self, group_id: str) -> ConsumerGroupDescription | None:
        """ConsumerGroupDescribe's view, None when the id is not a consumer group."""
        g = await self.consumer_store.load(group_id)
        return describe_consumer(g, self._rt(group_id).consumer.assignor(g)) if g is not None else None

    # -- offsets --------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
        *,
        instance_id: str | None = None,
        api_version: int = 9,
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """Commit (offset, leader epoch, metadata) per partition; a refusal of the committer raises,
        a bad partition is reported in its own slot. A commit keeps a classic member's session; a
        consumer group's member commits in its current epoch (`generation` is the member epoch)."""
        if await self.consumer_store.load(group_id) is not None:
            return await self._commit_consumer(group_id, generation, member_id, offsets, api_version)
        outcome, good = await self.offsets.check(group_id, generation, member_id, offsets)
        if good:
            await self._own(group_id, self._rt(group_id))
            try:
                await self.offsets.write(group_id, generation, member_id, instance_id, good)
            except GroupError as exc:
                # Kafka's OffsetMetadataManager.validateOffsetCommit: a member's commit to a group
                # that does not exist is GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before
                if exc.kind is GroupErrorKind.GROUP_ID_NOT_FOUND and api_version < 9:
                    raise GroupError(GroupErrorKind.ILLEGAL_GENERATION) from exc
                raise
        rt = self._groups.get(group_id)
        if rt is not None:
            rt.group.seen(member_id, self.clock())
        return outcome

    async def _commit_consumer(
        self,
        group_id: str,
        member_epoch: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
        api_version: int,
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """Kafka's OffsetMetadataManager.commitOffset for a consumer group: the member and epoch
        are checked against the group as stored, and the offsets written only if it did not move."""
        outcome, good = await self.offsets.check(group_id, member_epoch, "", offsets)
        rt = self._rt(group_id)
        async with rt.lock:
            await self._own(group_id, rt)
            g = await self.consumer_store.load(group_id)
            if g is None:
                raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, f"group {group_id} changed type; retry")
            validate_offset_commit(g, member_id, member_epoch, api_version=api_version)
            if good:
                self._refused(group_id, await self.consumer_store.commit(group_id, g.version, self.node_id, good))
        return outcome

    async def fetch_offsets(
        self, group_id: str, parts: list[tuple[str, int]] | None = None,
        *, member_id: str | None = None, member_epoch: int = -1,
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        """Committed offsets; with `parts`, every asked partition appears (None: nothing committed).
        A member of a consumer group (OffsetFetch v9+) fetches in its current epoch."""
        if member_id is not None or member_epoch >= 0:
            g = await self.consumer_store.load(group_id)
            if g is not None:
                validate_offset_fetch(g, member_id, member_epoch)
        return await self.offsets.fetch(group_id, parts)

    # -- administration -------------------------------------------------------------------------

    async def describe(self, group_id: str) -> GroupDescription | None:
        """DescribeGroups' view; a consumer group as Kafka's ConsumerGroup.asDescribedGroup shows it
        (protocol type "consumer", the assignor as protocol, the classic encodings of members)."""
        cg = await self.describe_consumer(group_id)
        if cg is not None:
            return GroupDescription(group_id, cg.state, CONSUMER, cg.assignor, [
                MemberDescription(
                    m.member_id, m.instance_id, m.client_id, m.client_host,
                    encode_consumer_subscription(list(m.subscribed_topics)), encode_consumer_assignment(m.assignment),
                )
                for m in cg.members
            ])
        g = await self.store.load(group_id)
        return describe(g) if g is not None else None

    async def list_groups(self, states: set[str] | None = None) -> list[GroupListing]:
        """Groups of both types; `states` matches either type's state names, in any case."""
        wanted = {s.lower() for s in states or ()}
        out = []
        for gid in await self.store.group_ids():
            cg = await self.consumer_store.load(gid)
            if cg is not None:
                listing = GroupListing(gid, CONSUMER, group_state(cg).value, CONSUMER)
            else:
                g = await self.store.load(gid)
                if g is None:
                    continue
                listing = GroupListing(gid, g.protocol_type or "", g.state)
            if not wanted or listing.state.lower() in wanted:
                out.append(listing)
        return out

    async def delete_offsets(
        self, group_id: str, parts: list[tuple[str, int]]
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """Delete committed offsets (Kafka's OffsetDelete, as its OffsetMetadataManager.deleteOffsets):
        GROUP_ID_NOT_FOUND for no group, NON_EMPTY_GROUP for a group of another protocol with
        members; per partition GROUP_SUBSCRIBED_TO_TOPIC when a member of the consumer group
        subscribes to its topic, else deleted (None, whether or not an offset was there)."""
        rt = self._rt(group_id)
        async with rt.lock:
            await self._own(group_id, rt)
            cg = await self.consumer_store.load(group_id)
            if cg is not None:
                return await self._delete_consumer_offsets(cg, parts)
            g = await self.store.load(group_id)
            if g is None or g.state == DEAD:
                raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"group {group_id} not found")
            subscribed: set[str] = set()
            if g.state != EMPTY:
                if g.protocol_type != "consumer":
                    raise GroupError(GroupErrorKind.NON_EMPTY_GROUP, f"group {group_id} has members")
                subscribed = _subscribed_topics(g)
            outcome = {p: GroupErrorKind.GROUP_SUBSCRIBED_TO_TOPIC if p[0] in subscribed else None for p in parts}
            if not await self.store.delete_offsets(group_id, g.version, [p for p, e in outcome.items() if e is None]):
                self._reset(group_id, "the group changed in Redis behind this coordinator")
                raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, "group changed concurrently; retry")
        return outcome

    async def _delete_consumer_offsets(
        self, g: ConsumerGroupDoc, parts: list[tuple[str, int]]
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """OffsetDelete on a consumer group: partitions of topics its members subscribe to stay."""
        subscribed = set(g.partition_counts)
        outcome = {p: GroupErrorKind.GROUP_SUBSCRIBED_TO_TOPIC if p[0] in subscribed else None for p in parts}
        if not await self.store.delete_offsets(g.group_id, 0, [p for p, e in outcome.items() if e is None]):
            raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, "group changed concurrently; retry")
        return outcome

    async def delete(self, group_id: str) -> None:
        """Delete an empty group and its offsets (Kafka's DeleteGroups)."""
        rt = self._rt(group_id)
        async with rt.lock:
            await self._own(group_id, rt)
            code = await self.consumer_store.delete(group_id, offsets=True)
            if code != GroupErrorKind.GROUP_ID_NOT_FOUND:
                if code:
                    raise GroupError(GroupErrorKind(code))
                rt.consumer.reset()
                await self.store.delete(group_id)  # the classic meta a commit from outside may have left
                return
            code = await self.store.delete(group_id)
            if code:
                raise GroupError(GroupErrorKind(code))
            rt.group.deleted()


def _subscribed_topics(g: GroupDoc) -> set[str]:
    """The topics the members of a consumer group subscribe to in its protocol (none while no
    protocol is chosen or a subscription does not parse, as Kafka's ClassicGroup.computeSubscribedTopics)."""
    if g.protocol is None:
        return set()
    out: set[str] = set()
    for m in g.members.values():
        topics = consumer_subscription(m.metadata(g.protocol))
        if topics is None:
            return set()
        out |= topics
    return out


# -- one coordinator per Services ---------------------------------------------------------------


def open_coordinator(
    store: Store, log_service: LogService | None = None, *, node_id: int = 0,
    prefers: Callable[[str], bool] = lambda group_id: True, consumer_config: ConsumerGroupConfig | None = None,
    initial_rebalance_delay_ms: int = 0,
) -> GroupCoordinator:
    """A coordinator over the gateway's store; given the log service, commits to partitions that do
    not exist are refused, as Kafka does. `prefers`: see `GroupCoordinator.prefers`."""
    partitions = None
    if log_service is not None:

        async def partitions(topic: str) -> int:
            try:
                return (await log_service.topic(topic, create=False)).partitions
            except (TopicNotFound, PartitionNotFound):
                return 0

    return GroupCoordinator(
        store.groups, partitions=partitions, node_id=node_id, prefers=prefers,
        consumer_store=store.consumer_groups, consumer_config=consumer_config,
        initial_rebalance_delay_ms=initial_rebalance_delay_ms,
    )
