"""The group coordinator: Kafka's classic consumer-group protocol over state kept in Redis.

Durable: membership, generation, protocol, leader, assignments (saved by compare-and-set, one Lua
script per save) and committed offsets (one Lua script that checks the committer and writes).
In process: what only makes sense while connections are open here: the JoinGroup/SyncGroup
requests parked at the join and sync barriers, the last heartbeat of each member, member ids
handed out with MEMBER_ID_REQUIRED, and the rebalance deadline. A restarted coordinator reloads
every group, gives each member a fresh session and lets them rejoin, as Kafka does on failover.

Each operation on a group runs under that group's lock: load from Redis, apply the transition,
save, and only then answer parked requests, so a client never sees a state Redis does not hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from gateway.domain.log import LogService
from gateway.errors import ErrorCode, GatewayError, PartitionNotFound, TopicNotFound
from gateway.store import Store
from gateway.store.groups import CommittedOffset, GroupDoc, GroupStore, MemberDoc

log = logging.getLogger(__name__)

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)

MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes


class GroupErrorKind(IntEnum):
    """Why a group operation was refused. The values are Kafka's error codes on purpose: the group
    protocol exists only on the Kafka face, and the Lua scripts return these same numbers."""

    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    OFFSET_METADATA_TOO_LARGE = 12
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82


_RETRIABLE_KINDS = frozenset({GroupErrorKind.COORDINATOR_NOT_AVAILABLE})


class GroupError(GatewayError):
    """A group operation refused for `kind`; MEMBER_ID_REQUIRED carries the id to rejoin with."""

    code = ErrorCode.GROUP_ERROR

    def __init__(self, kind: GroupErrorKind, message: str = "", member_id: str = "") -> None:
        self.kind = kind
        self.member_id = member_id
        super().__init__(message or kind.name.lower().replace("_", " "))

    @property
    def retriable(self) -> bool:
        return self.kind in _RETRIABLE_KINDS


@dataclass(frozen=True)
class JoinedMember:
    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer; `members` is filled for the leader only."""

    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str
    member_id: str
    members: list[JoinedMember] = field(default_factory=list)


@dataclass(frozen=True)
class SyncResult:
    protocol_type: str | None
    protocol: str | None
    assignment: bytes


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass
class _Runtime:
    """What a group needs in this process only (see the module docstring)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    join_waiters: dict[str, asyncio.Future[JoinResult]] = field(default_factory=dict)
    sync_waiters: dict[str, asyncio.Future[SyncResult]] = field(default_factory=dict)
    heartbeats: dict[str, tuple[float, float]] = field(default_factory=dict)  # last seen, session
    pending: dict[str, float] = field(default_factory=dict)  # member id -> expiry
    rebalance_deadline: float | None = None
    join_not_before: float = 0.0
    armed: bool = False
    lease_until: float = 0.0  # while this process holds the group's coordinator lease

    def parked(self) -> list[asyncio.Future[Any]]:
        return [*self.join_waiters.values(), *self.sync_waiters.values()]


class _Op:
    """One transition's effects: whether to save, and the parked requests to answer afterwards."""

    def __init__(self) -> None:
        self.dirty = False
        self.answers: list[tuple[asyncio.Future[Any], Any]] = []

    def answer(self, fut: asyncio.Future[Any], result: Any) -> None:
        self.answers.append((fut, result))

    def deliver(self) -> None:
        for fut, result in self.answers:
            if fut.done():
                continue
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)


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
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.lease_ms = lease_ms
        self.address = "127.0.0.1 0"  # "<host> <port>" of the Kafka listener, set by the face
        self.partitions = partitions
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay = initial_rebalance_delay_ms / 1000
        self.clock = clock
        self._groups: dict[str, _Runtime] = {}
        self._assigned: dict[tuple[str, int, str], set[tuple[str, int]] | None] = {}  # see `_owned`
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._closing = False
        self._next_adoption = 0.0
        # whether this gateway is the one to take over a group nobody coordinates (with several
        # gateways, the one FindCoordinator names), so they do not all race for its lease
        self.prefers: Callable[[str], bool] = lambda group_id: True

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
            for fut in rt.parked():
                if not fut.done():
                    fut.set_exception(GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, "coordinator closing"))
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
                if rt.armed:
                    continue
                async with rt.lock:
                    g = await self.store.load(gid)
                    if g is None or not g.members:
                        continue
                    try:
                        await self._own(gid, rt)
                    except GroupError:
                        continue
                    log.info("group %s: adopted with %d members", gid, len(g.members))
                    self._arm(g, rt)
        except Exception:
            log.exception("could not adopt stored groups; trying again later")

    def _next_deadline(self, rt: _Runtime) -> float | None:
        candidates = list(rt.pending.values())
        if rt.lease_until and rt.heartbeats:
            candidates.append(rt.lease_until - self.lease_ms / 1000 / 3)  # renew with a third left
        if rt.rebalance_deadline is not None:
            candidates.append(rt.rebalance_deadline)
        candidates += [t + s for mid, (t, s) in rt.heartbeats.items() if not self._kept_alive(rt, mid)]
        return min(candidates) if candidates else None

    # -- helpers --------------------------------------------------------------------------------

    def _rt(self, group_id: str) -> _Runtime:
        rt = self._groups.get(group_id)
        if rt is None:
            rt = self._groups[group_id] = _Runtime()
        return rt

    def _arm(self, g: GroupDoc, rt: _Runtime) -> None:
        """First sight of a stored group in this process: every member gets a fresh session."""
        if rt.armed:
            return
        rt.armed = True
        now = self.clock()
        for m in g.members.values():
            rt.heartbeats[m.member_id] = (now, m.session_timeout_ms / 1000)
        if g.state == PREPARING_REBALANCE:
            rt.rebalance_deadline = now + self._rebalance_timeout(g)
        self._wake.set()

    def _touch(self, rt: _Runtime, m: MemberDoc) -> None:
        rt.heartbeats[m.member_id] = (self.clock(), m.session_timeout_ms / 1000)
        self._wake.set()

    @staticmethod
    def _rebalance_timeout(g: GroupDoc) -> float:
        return max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000

    async def _run(self, group_id: str, fn: Callable[[GroupDoc | None, _Runtime, _Op], GroupDoc | None]) -> _Op:
        """Load, transition, save, answer: the shape of every state change."""
        rt = self._rt(group_id)
        async with rt.lock:
            await self._own(group_id, rt)
            g = await self.store.load(group_id)
            if g is not None:
                self._arm(g, rt)
            op = _Op()
            g = fn(g, rt, op)
            if op.dirty and g is not None:
                refused = await self.store.save(g, self.node_id)
                if refused == GroupErrorKind.NOT_COORDINATOR:
                    self._reset(group_id, "another gateway took the group's lease")
                    raise GroupError(GroupErrorKind.NOT_COORDINATOR, f"group {group_id} moved to another gateway")
                if refused:
                    self._reset(group_id, "the group changed in Redis behind this coordinator")
                    raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, "group changed concurrently; retry")
            op.deliver()
            return op

    async def _own(self, group_id: str, rt: _Runtime) -> None:
        """Hold (take or renew) the group's lease, or raise NOT_COORDINATOR naming the holder."""
        now = self.clock()
        ttl = self.lease_ms / 1000
        if rt.lease_until - now > ttl * 2 / 3:
            return
        holder = await self.store.lease(group_id, self.node_id, self.address, self.lease_ms)
        if holder is not None:
            node = holder.split(" ")[0]
            if rt.lease_until or rt.heartbeats or rt.join_waiters or rt.sync_waiters:
                self._reset(group_id, f"gateway {node} coordinates it now")
            raise GroupError(GroupErrorKind.NOT_COORDINATOR, f"group {group_id} is coordinated by gateway {node}")
        rt.lease_until = now + ttl

    def _reset(self, group_id: str, why: str) -> None:
        """Forget this process's view of a group (keeping its lock); parked clients retry and rejoin."""
        log.warning("group %s: %s; dropping parked requests", group_id, why)
        rt = self._groups.get(group_id)
        if rt is None:
            return
        for fut in rt.parked():
            if not fut.done():
                fut.set_exception(GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, why))
        rt.join_waiters.clear()
        rt.sync_waiters.clear()
        rt.heartbeats.clear()
        rt.pending.clear()
        rt.rebalance_deadline = None
        rt.armed = False
        rt.lease_until = 0.0

    @staticmethod
    def _check_member(g: GroupDoc, member_id: str, instance_id: str | None) -> MemberDoc:
        if instance_id:
            owner = g.instance_owner(instance_id)
            if owner is not None and owner != member_id:
                raise GroupError(GroupErrorKind.FENCED_INSTANCE_ID, f"instance {instance_id} has a newer member")
        m = g.members.get(member_id)
        if m is None:
            raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
        return m

    @staticmethod
    def _candidates(g: GroupDoc) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in g.members.values()]
        return set.intersection(*sets) if sets else set()

    def _select_protocol(self, g: GroupDoc) -> str:
        """Each member votes for its most preferred protocol that every member supports."""
        candidates = self._candidates(g)
        votes: dict[str, int] = {}
        for m in g.members.values():
            choice = next(n for n, _ in m.protocols if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda p: votes[p])

    # -- the state machine ----------------------------------------------------------------------

    def _prepare_rebalance(self, g: GroupDoc, rt: _Runtime, op: _Op) -> None:
        now = self.clock()
        if g.state == COMPLETING_REBALANCE:
            for fut in rt.sync_waiters.values():
                op.answer(fut, GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS))
            rt.sync_waiters.clear()
        for m in g.members.values():
            m.assignment = b""
        if g.state == EMPTY and self.initial_rebalance_delay > 0:
            rt.join_not_before = now + self.initial_rebalance_delay
        rt.rebalance_deadline = now + max(self._rebalance_timeout(g), self.initial_rebalance_delay)
        g.state = PREPARING_REBALANCE
        op.dirty = True
        self._wake.set()

    def _try_complete_join(self, g: GroupDoc, rt: _Runtime, op: _Op, *, deadline: bool = False) -> None:
        if g.state != PREPARING_REBALANCE:
            return
        if not deadline:
            if rt.pending or self.clock() < rt.join_not_before:
                return
            if any(mid not in rt.join_waiters for mid in g.members):
                return
        self._complete_join(g, rt, op)

    def _complete_join(self, g: GroupDoc, rt: _Runtime, op: _Op) -> None:
        """The join barrier falls: members that did not rejoin are out, a new generation starts."""
        for mid in [mid for mid in g.members if mid not in rt.join_waiters]:
            log.info("group %s: member %s did not rejoin in time; removed", g.group_id, mid)
            self._drop(g, rt, mid, op)
        g.generation += 1
        rt.rebalance_deadline = None
        rt.join_not_before = 0.0
        op.dirty = True
        if not g.members:
            g.state, g.protocol, g.leader = EMPTY, None, None
            return
        g.protocol = self._select_protocol(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = COMPLETING_REBALANCE
        everyone = [JoinedMember(m.member_id, m.instance_id, m.metadata(g.protocol)) for m in g.members.values()]
        for mid, fut in rt.join_waiters.items():
            op.answer(
                fut,
                JoinResult(
                    g.generation, g.protocol_type, g.protocol, g.leader, mid, everyone if mid == g.leader else []
                ),
            )
            self._touch(rt, g.members[mid])
        rt.join_waiters.clear()
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            g.group_id, g.generation, len(g.members), g.protocol, g.leader,
        )

    def _drop(self, g: GroupDoc, rt: _Runtime, member_id: str, op: _Op) -> None:
        """Remove a member; whoever was parked for it learns it is gone."""
        g.members.pop(member_id, None)
        rt.heartbeats.pop(member_id, None)
        for waiters in (rt.join_waiters, rt.sync_waiters):
            fut = waiters.pop(member_id, None)
            if fut is not None:
                op.answer(fut, GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID))
        if g.leader == member_id:
            g.leader = next(iter(g.members), None)
        op.dirty = True

    def _remove_and_rebalance(self, g: GroupDoc, rt: _Runtime, member_id: str, op: _Op) -> None:
        self._drop(g, rt, member_id, op)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g, rt, op)
        self._try_complete_join(g, rt, op)

    def _park_join(self, g: GroupDoc, rt: _Runtime, m: MemberDoc, op: _Op) -> asyncio.Future[JoinResult]:
        old = rt.join_waiters.pop(m.member_id, None)
        if old is not None:
            op.answer(old, GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS, "superseded by a newer JoinGroup"))
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        rt.join_waiters[m.member_id] = fut
        return fut

    def _add_member(self, g: GroupDoc, rt: _Runtime, m: MemberDoc, op: _Op) -> asyncio.Future[JoinResult]:
        m.seq = g.next_seq
        g.next_seq += 1
        g.members[m.member_id] = m
        if g.leader is None:
            g.leader = m.member_id
        self._touch(rt, m)
        fut = self._park_join(g, rt, m, op)
        if g.state != PREPARING_REBALANCE:
            self._prepare_rebalance(g, rt, op)
        op.dirty = True
        self._try_complete_join(g, rt, op)
        return fut

    def _update_and_rebalance(
        self, g: GroupDoc, rt: _Runtime, m: MemberDoc, req: _JoinRequest, op: _Op
    ) -> asyncio.Future[JoinResult]:
        req.update(m)
        self._touch(rt, m)
        fut = self._park_join(g, rt, m, op)
        if g.state != PREPARING_REBALANCE:
            self._prepare_rebalance(g, rt, op)
        op.dirty = True
        self._try_complete_join(g, rt, op)
        return fut

    def _current(self, g: GroupDoc, member_id: str, leader: str | None = None) -> JoinResult:
        """The present generation, for a member whose join changes nothing."""
        leader = leader or g.leader or ""
        members = (
            [JoinedMember(m.member_id, m.instance_id, m.metadata(g.protocol)) for m in g.members.values()]
            if member_id == leader
            else []
        )
        return JoinResult(g.generation, g.protocol_type, g.protocol, leader, member_id, members)

    # -- JoinGroup ------------------------------------------------------------------------------

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
        req = _JoinRequest(
            protocol_type,
            protocols,
            session_timeout_ms,
            rebalance_timeout_ms if rebalance_timeout_ms >= 0 else session_timeout_ms,
            instance_id or None,
            client_id,
            client_host,
        )
        result: list[asyncio.Future[JoinResult] | JoinResult] = []

        def transition(g: GroupDoc | None, rt: _Runtime, op: _Op) -> GroupDoc | None:
            if g is None:
                if member_id and member_id not in rt.pending:
                    raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
                g = GroupDoc(group_id)
            if not protocol_type or not protocols:
                raise GroupError(GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL, "no protocol type or protocols")
            if g.members and (
                g.protocol_type != protocol_type or not self._candidates(g) & {n for n, _ in protocols}
            ):
                raise GroupError(GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL, "no protocol in common with the group")
            if not g.members:
                g.protocol_type = protocol_type
            if not member_id:
                result.append(self._join_unknown(g, rt, req, op, require_known_member_id))
            else:
                result.append(self._join_known(g, rt, member_id, req, op))
            return g

        await self._run(group_id, transition)
        r = result[0]
        return r if isinstance(r, JoinResult) else await r

    def _join_unknown(
        self, g: GroupDoc, rt: _Runtime, req: _JoinRequest, op: _Op, require_known: bool
    ) -> asyncio.Future[JoinResult] | JoinResult:
        new_id = f"{req.instance_id or req.client_id or 'member'}-{uuid.uuid4()}"
        if req.instance_id:
            old_id = g.instance_owner(req.instance_id)
            if old_id is not None:
                return self._replace_static(g, rt, old_id, new_id, req, op)
        elif require_known:
            rt.pending[new_id] = self.clock() + req.session_timeout_ms / 1000
            self._wake.set()
            raise GroupError(GroupErrorKind.MEMBER_ID_REQUIRED, member_id=new_id)
        return self._add_member(g, rt, req.member(new_id), op)

    def _join_known(
        self, g: GroupDoc, rt: _Runtime, member_id: str, req: _JoinRequest, op: _Op
    ) -> asyncio.Future[JoinResult] | JoinResult:
        if member_id in rt.pending and member_id not in g.members:
            del rt.pending[member_id]
            return self._add_member(g, rt, req.member(member_id), op)
        if req.instance_id and g.instance_owner(req.instance_id) is None:
            raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
        m = self._check_member(g, member_id, req.instance_id)
        if g.state == PREPARING_REBALANCE:
            return self._update_and_rebalance(g, rt, m, req, op)
        if g.state == COMPLETING_REBALANCE:
            if m.protocols == req.protocols:
                self._touch(rt, m)
                return self._current(g, member_id)
            return self._update_and_rebalance(g, rt, m, req, op)
        if g.state == STABLE:
            if member_id == g.leader or m.protocols != req.protocols:
                return self._update_and_rebalance(g, rt, m, req, op)
            self._touch(rt, m)
            return self._current(g, member_id)
        raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)

    def _replace_static(
        self, g: GroupDoc, rt: _Runtime, old_id: str, new_id: str, req: _JoinRequest, op: _Op
    ) -> asyncio.Future[JoinResult] | JoinResult:
        """A static member came back under a new member id: the old id is fenced, the slot kept."""
        old = g.members.pop(old_id)
        old_leader = g.leader
        m = req.member(new_id)
        m.assignment, m.seq = old.assignment, old.seq
        # keep join order: the replacement takes the old member's place
        g.members[new_id] = m
        g.members = dict(sorted(g.members.items(), key=lambda kv: kv[1].seq))
        if g.leader == old_id:
            g.leader = new_id
        rt.heartbeats.pop(old_id, None)
        for waiters in (rt.join_waiters, rt.sync_waiters):
            fut = waiters.pop(old_id, None)
            if fut is not None:
                op.answer(fut, GroupError(GroupErrorKind.FENCED_INSTANCE_ID))
        self._touch(rt, m)
        op.dirty = True
        log.info("group %s: static member %s is back as %s", g.group_id, req.instance_id, new_id)
        if g.state == STABLE and self._select_protocol(g) == g.protocol:
            # answer with the old leader id, so a returning leader does not reassign a stable group
            return self._current(g, new_id, leader=old_leader)
        fut = self._park_join(g, rt, m, op)
        if g.state != PREPARING_REBALANCE:
            self._prepare_rebalance(g, rt, op)
        self._try_complete_join(g, rt, op)
        return fut

    # -- SyncGroup ------------------------------------------------------------------------------

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
        result: list[asyncio.Future[SyncResult] | SyncResult] = []

        def transition(g: GroupDoc | None, rt: _Runtime, op: _Op) -> GroupDoc | None:
            if g is None:
                raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
            m = self._check_member(g, member_id, instance_id)
            if generation != g.generation:
                raise GroupError(GroupErrorKind.ILLEGAL_GENERATION)
            if (protocol_type and protocol_type != g.protocol_type) or (protocol and protocol != g.protocol):
                raise GroupError(GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL)
            if g.state == PREPARING_REBALANCE:
                raise GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS)
            self._touch(rt, m)
            if g.state == STABLE:
                result.append(SyncResult(g.protocol_type, g.protocol, m.assignment))
                return g
            if g.state != COMPLETING_REBALANCE:
                raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
            old = rt.sync_waiters.pop(member_id, None)
            if old is not None:
                op.answer(old, GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS, "superseded by a newer SyncGroup"))
            fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
            rt.sync_waiters[member_id] = fut
            result.append(fut)
            if member_id == g.leader:
                given = assignments or {}
                for other in g.members.values():
                    other.assignment = given.get(other.member_id, b"")
                g.state = STABLE
                op.dirty = True
                for mid, waiter in rt.sync_waiters.items():
                    op.answer(waiter, SyncResult(g.protocol_type, g.protocol, g.members[mid].assignment))
                rt.sync_waiters.clear()
                log.info("group %s: generation %d stable", g.group_id, g.generation)
            return g

        await self._run(group_id, transition)
        r = result[0]
        return r if isinstance(r, SyncResult) else await r

    # -- Heartbeat, LeaveGroup ------------------------------------------------------------------

    async def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> None:
        """Keep the member's session; raises REBALANCE_IN_PROGRESS when it must rejoin."""

        def transition(g: GroupDoc | None, rt: _Runtime, op: _Op) -> GroupDoc | None:
            if g is None or g.state == EMPTY:
                raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
            m = self._check_member(g, member_id, instance_id)
            if generation != g.generation:
                raise GroupError(GroupErrorKind.ILLEGAL_GENERATION)
            self._touch(rt, m)
            if g.state == PREPARING_REBALANCE:
                raise GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS)
            return g

        await self._run(group_id, transition)

    async def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> list[GroupErrorKind | None]:
        """Remove members (member id, instance id); one outcome per member, None when it left."""
        outcomes: list[GroupErrorKind | None] = []

        def transition(g: GroupDoc | None, rt: _Runtime, op: _Op) -> GroupDoc | None:
            outcomes.clear()
            for member_id, instance_id in members:
                try:
                    if g is None:
                        raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
                    if instance_id:
                        owner = g.instance_owner(instance_id)
                        if owner is None:
                            raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
                        if member_id and owner != member_id:
                            raise GroupError(GroupErrorKind.FENCED_INSTANCE_ID)
                        member_id = owner
                    elif member_id in rt.pending:
                        del rt.pending[member_id]
                        outcomes.append(None)
                        if g is not None:
                            self._try_complete_join(g, rt, op)
                        continue
                    if member_id not in g.members:
                        raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
                    log.info("group %s: member %s left", g.group_id, member_id)
                    self._remove_and_rebalance(g, rt, member_id, op)
                    outcomes.append(None)
                except GroupError as exc:
                    outcomes.append(exc.kind)
            return g

        await self._run(group_id, transition)
        return outcomes

    # -- timers ---------------------------------------------------------------------------------

    async def _expire(self, group_id: str) -> None:
        def transition(g: GroupDoc | None, rt: _Runtime, op: _Op) -> GroupDoc | None:
            now = self.clock()
            for mid, until in list(rt.pending.items()):
                if until <= now:
                    del rt.pending[mid]
            if g is None:
                rt.heartbeats.clear()
                rt.rebalance_deadline = None
                return None
            for mid, (seen, session) in list(rt.heartbeats.items()):
                if mid not in g.members:
                    del rt.heartbeats[mid]
                elif seen + session <= now and not self._kept_alive(rt, mid):
                    log.info("group %s: member %s missed its session timeout; removed", group_id, mid)
                    self._remove_and_rebalance(g, rt, mid, op)
            if g.state == PREPARING_REBALANCE:
                due = rt.rebalance_deadline is not None and rt.rebalance_deadline <= now
                self._try_complete_join(g, rt, op, deadline=due)
            return g

        await self._run(group_id, transition)

    @staticmethod
    def _kept_alive(rt: _Runtime, member_id: str) -> bool:
        """A member parked at a barrier is alive (Kafka's rule): the join barrier has its own
        deadline, and the sync barrier falls when the leader syncs or its own session ends."""
        return any(f is not None and not f.done() for f in (rt.join_waiters.get(member_id), rt.sync_waiters.get(member_id)))

    # -- offsets --------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
        *,
        instance_id: str | None = None,
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """Commit (offset, leader epoch, metadata) per partition; a refusal of the committer raises,
        a bad partition is reported in its own slot."""
        if not group_id:
            raise GroupError(GroupErrorKind.INVALID_GROUP_ID, "the group id is empty")
        outcome: dict[tuple[str, int], GroupErrorKind | None] = {}
        good: dict[tuple[str, int], CommittedOffset] = {}
        now_ms = int(time.time() * 1000)
        counts: dict[str, int] = {}
        for (topic, partition), (offset, epoch, metadata) in offsets.items():
            if self.partitions is not None and topic not in counts:
                counts[topic] = await self.partitions(topic)
            if metadata is not None and len(metadata.encode()) > MAX_METADATA_BYTES:
                outcome[(topic, partition)] = GroupErrorKind.OFFSET_METADATA_TOO_LARGE
            elif self.partitions is not None and not 0 <= partition < counts[topic]:
                outcome[(topic, partition)] = GroupErrorKind.UNKNOWN_TOPIC_OR_PARTITION
            else:
                outcome[(topic, partition)] = None
                good[(topic, partition)] = CommittedOffset(offset, epoch, metadata or "", now_ms)
        if good and member_id:
            owned = await self._owned(group_id, generation, member_id)
            for tp in [tp for tp in good if owned is not None and tp not in owned]:
                # a record fetched before the last rebalance: its partition is another member's now
                outcome[tp] = GroupErrorKind.ILLEGAL_GENERATION
                del good[tp]
        if good:
            await self._own(group_id, self._rt(group_id))
            code = await self.store.commit(group_id, generation, member_id, instance_id, good)
            if code:
                raise GroupError(GroupErrorKind(code))
        rt = self._groups.get(group_id)
        if rt is not None and member_id in rt.heartbeats:
            _, session = rt.heartbeats[member_id]
            rt.heartbeats[member_id] = (self.clock(), session)
        return outcome

    async def _owned(self, group_id: str, generation: int, member_id: str) -> set[tuple[str, int]] | None:
        """The partitions a consumer-group member was assigned in a stable `generation`, or None when
        unknown (a rebalance under way, another protocol, no assignment): then any commit goes, as
        with Kafka's classic coordinator. Kafka accepts a commit for a partition the member no
        longer owns, so a client committing a record it fetched before a rebalance moves another
        member's offset (a duplicate or a loss); refusing it closes that window."""
        key = (group_id, generation, member_id)
        if key in self._assigned:
            return self._assigned[key]
        g = await self.store.load(group_id)
        m = g.members.get(member_id) if g is not None else None
        if g is None or m is None or g.generation != generation or g.state != STABLE or g.protocol_type != "consumer":
            return None
        owned = consumer_assignment(m.assignment)
        if len(self._assigned) >= 4096:
            self._assigned.clear()
        self._assigned[key] = owned
        return owned

    async def fetch_offsets(
        self, group_id: str, parts: list[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        """Committed offsets; with `parts`, every asked partition appears (None: nothing committed)."""
        found = await self.store.offsets(group_id, parts)
        if parts is None:
            return dict(sorted(found.items()))
        return {p: found.get(p) for p in parts}

    # -- administration -------------------------------------------------------------------------

    async def describe(self, group_id: str) -> GroupDescription | None:
        g = await self.store.load(group_id)
        if g is None:
            return None
        stable = g.state == STABLE
        return GroupDescription(
            group_id,
            g.state,
            g.protocol_type or "",
            g.protocol or "" if g.state in (STABLE, COMPLETING_REBALANCE) else "",
            [
                MemberDescription(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(g.protocol) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in g.members.values()
            ],
        )

    async def list_groups(self, states: set[str] | None = None) -> list[GroupListing]:
        out = []
        for gid in await self.store.group_ids():
            g = await self.store.load(gid)
            if g is None:
                continue
            if states and g.state not in states and g.state.lower() not in {s.lower() for s in states}:
                continue
            out.append(GroupListing(gid, g.protocol_type or "", g.state))
        return out

    async def delete(self, group_id: str) -> None:
        """Delete an empty group and its offsets (Kafka's DeleteGroups)."""
        rt = self._rt(group_id)
        async with rt.lock:
            await self._own(group_id, rt)
            code = await self.store.delete(group_id)
            if code:
                raise GroupError(GroupErrorKind(code))
            rt.pending.clear()
            rt.armed = False


@dataclass(frozen=True)
class _JoinRequest:
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    instance_id: str | None
    client_id: str
    client_host: str

    def member(self, member_id: str) -> MemberDoc:
        return MemberDoc(
            member_id,
            self.instance_id,
            self.client_id,
            self.client_host,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            self.protocol_type,
            list(self.protocols),
        )

    def update(self, m: MemberDoc) -> None:
        m.protocols = list(self.protocols)
        m.session_timeout_ms = self.session_timeout_ms
        m.rebalance_timeout_ms = self.rebalance_timeout_ms
        m.client_id, m.client_host = self.client_id, self.client_host


# -- one coordinator per Services ---------------------------------------------------------------


def consumer_assignment(raw: bytes) -> set[tuple[str, int]] | None:
    """The partitions of a ConsumerProtocolAssignment (v0-v3), or None when it is not one."""
    try:
        pos = 2  # version
        (topics,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        out: set[tuple[str, int]] = set()
        for _ in range(topics):
            (n,) = struct.unpack_from(">h", raw, pos)
            topic = raw[pos + 2:pos + 2 + n].decode()
            pos += 2 + n
            (count,) = struct.unpack_from(">i", raw, pos)
            out.update((topic, p) for p in struct.unpack_from(f">{count}i", raw, pos + 4))
            pos += 4 + 4 * count
        return out
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def coordinator_for(services: Any) -> GroupCoordinator:
    """The coordinator of a `Services`: its `groups` attribute when wired there, else one created
    on first use and kept on the instance; started (its timer role) on first use."""
    coord = getattr(services, "groups", None)
    if not isinstance(coord, GroupCoordinator):
        coord = getattr(services, "_group_coordinator", None)
    if not isinstance(coord, GroupCoordinator):
        coord = open_coordinator(services.store, services.log, node_id=services.config.node_id)
        services._group_coordinator = coord
        _close_with(services, coord)
    coord.start()
    return coord


def _close_with(services: Any, coord: GroupCoordinator) -> None:
    """Until `Services.close` closes the coordinator itself, chain it onto this instance's close:
    a stopped gateway must not keep expiring sessions that a successor now serves."""
    close_services = services.close

    async def close() -> None:
        await coord.close()
        await close_services()

    services.close = close


def open_coordinator(store: Store, log_service: LogService | None = None, *, node_id: int = 0) -> GroupCoordinator:
    """A coordinator over the gateway's store; given the log service, commits to partitions that do
    not exist are refused, as Kafka does."""
    partitions = None
    if log_service is not None:

        async def partitions(topic: str) -> int:
            try:
                return (await log_service.topic(topic, create=False)).partitions
            except (TopicNotFound, PartitionNotFound):
                return 0

    return GroupCoordinator(GroupStore(store.redis, store.scripts), partitions=partitions, node_id=node_id)
