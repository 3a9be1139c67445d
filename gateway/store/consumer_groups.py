"""The shape of a consumer group of KIP-848's protocol as stored: the group's epochs, its members
(subscription, epochs, reconciliation state, assigned and pending-revocation partitions), the target
assignment and what the target was computed from (partition counts, resolved regular expressions).

Kept apart from the classic `GroupDoc` (`groups.py`): the two protocols share the group id space and
the offsets, not the shape of the group. Each packs to msgpack; a member is one blob, so saving the
group can write only the members that changed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.groups import CommittedOffset, GroupDoc, _array, _pairs, packed, packed_offsets
from gateway.store.scripts import Scripts

Assignment = dict[str, frozenset[int]]


def _pack_assignment(a: Assignment) -> dict[str, list[int]]:
    return {t: sorted(ps) for t, ps in a.items()}


def _unpack_assignment(raw: dict[str, list[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in raw.items()}


@dataclass
class ConsumerMemberDoc:
    """One member. `state` is Kafka's `MemberState` (stable, unrevoked_partitions,
    unreleased_partitions); `member_epoch` -2 marks a static member that left and may come back.
    A member of the classic protocol inside the group (online migration, Kafka's
    `ClassicMemberMetadata`) has its JoinGroup's session timeout and protocols; others have none."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    subscribed_topics: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_epoch: int = 0
    state: str = "stable"
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic_session_timeout_ms: int = 0
    classic_protocols: tuple[tuple[str, bytes], ...] = ()

    @property
    def classic(self) -> bool:
        """Whether the member speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat)."""
        return bool(self.classic_protocols)

    def copy(self) -> ConsumerMemberDoc:
        return copy.copy(self)  # the collections held are immutable or replaced whole

    def pack(self) -> bytes:
        return _packb(
            [
                self.instance_id, self.rack_id, self.client_id, self.client_host, self.rebalance_timeout_ms,
                list(self.subscribed_topics), self.subscribed_regex, self.server_assignor, self.member_epoch,
                self.previous_epoch, self.state, _pack_assignment(self.assigned),
                _pack_assignment(self.pending_revocation), self.classic_session_timeout_ms,
                [[n, m] for n, m in self.classic_protocols],
            ]
        )

    @classmethod
    def unpack(cls, member_id: str, raw: bytes) -> ConsumerMemberDoc:
        fields = msgpack.unpackb(raw, raw=False)
        (i, r, c, h, rt, topics, regex, assignor, epoch, prev, state, assigned, pending) = fields[:13]
        session, protocols = fields[13:] or (0, [])  # members stored before online migration have none
        return cls(
            member_id, i, r, c, h, rt, tuple(topics), regex, assignor, epoch, prev, state,
            _unpack_assignment(assigned), _unpack_assignment(pending), session,
            tuple((n, bytes(m)) for n, m in protocols),
        )


@dataclass
class ConsumerGroupDoc:
    """A consumer group as stored; `version` is what the next save compares against (0: new)."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMemberDoc] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target assignment
    partition_counts: dict[str, int] = field(default_factory=dict)  # subscribed topic -> partitions
    regexes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # regex -> topics it matched
    version: int = 0

    def static_member(self, instance_id: str) -> ConsumerMemberDoc | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def pack_meta(self) -> bytes:
        """Everything but the members, which are stored one blob each."""
        return _packb(
            [
                self.group_epoch, self.assignment_epoch,
                {mid: _pack_assignment(a) for mid, a in self.target.items()},
                self.partition_counts, {rx: list(ts) for rx, ts in self.regexes.items()},
            ]
        )

    @classmethod
    def unpack(cls, group_id: str, meta: bytes, members: dict[str, bytes], version: int) -> ConsumerGroupDoc:
        epoch, assignment_epoch, target, counts, regexes = msgpack.unpackb(meta, raw=False)
        return cls(
            group_id, epoch, assignment_epoch,
            {mid: ConsumerMemberDoc.unpack(mid, raw) for mid, raw in sorted(members.items())},
            {mid: _unpack_assignment(a) for mid, a in target.items()},
            dict(counts), {rx: tuple(ts) for rx, ts in regexes.items()}, version,
        )


def _packb(value: Any) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True))


def _members(g: ConsumerGroupDoc) -> bytes:
    members: list[Any] = []
    for m in g.members.values():
        members += [m.member_id, m.pack()]
    return _array(members)


class ModernGroupStore:
    """What the stores of the groups with member blobs (KIP-848's consumer groups, KIP-1071's
    streams groups) share: a group's meta hash and members hash sit under the group's hash tag
    beside the classic group's and the committed offsets, which every protocol shares; every change
    is one script in that slot. `meta_key` and `members_key` name the protocol's two hashes."""

    meta_key: Callable[[str], str] = staticmethod(keys.group_consumer)
    members_key: Callable[[str], str] = staticmethod(keys.group_consumer_members)

    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def _load(self, group_id: str) -> tuple[bytes, dict[str, bytes], int] | None:
        """The stored (doc, members by id, version), or None when there is no group of this id."""
        async with storage_errors():
            flat_meta, flat_members = await self.scripts.call(
                "group-load-2", [self.meta_key(group_id), self.members_key(group_id)], []
            )
        meta = _pairs(flat_meta)
        if not meta:
            return None
        return meta[b"doc"], {mid.decode(): raw for mid, raw in _pairs(flat_members).items()}, int(meta[b"v"])

    def _keys(self, gid: str) -> list[str]:
        """The group's two hashes, its lease and the classic group's keys (never its offsets)."""
        return [self.meta_key(gid), self.members_key(gid), keys.group_owner(gid),
                keys.group_meta(gid), keys.group_members(gid), keys.group_instances(gid)]

    async def _save(self, group_id: str, version: int, doc: bytes, members: bytes, node: int) -> tuple[int, int]:
        """cgroup-save-6: (0, new version) when saved, else (its refusing code, 0)."""
        async with storage_errors():
            reply = await self.scripts.call(
                "cgroup-save-6", self._keys(group_id), [version, doc, members, node],  # version, doc, members, node
            )
            if version == 0 and reply[0] == 0:
                await self.redis.sadd(keys.GROUPS, group_id)
        return (0, int(reply[1])) if reply[0] == 0 else (int(reply[0]), 0)

    async def commit(
        self, group_id: str, version: int, node: int, offsets: dict[tuple[str, int], CommittedOffset]
    ) -> int:
        """Store offsets the coordinator checked against the group at `version`; 0 when written,
        1 when the group moved on, 16 when another gateway coordinates it."""
        async with storage_errors():
            reply = await self.scripts.call(
                "cgroup-commit-3",
                [self.meta_key(group_id), keys.group_offsets(group_id), keys.group_owner(group_id)],
                [version, node, packed_offsets(offsets)],  # version, node, offsets
            )
        return int(reply)

    async def delete(self, group_id: str, *, offsets: bool = True) -> int:
        """Remove a group without members (and its offsets and lag history, with `offsets`); returns 0, 68 (it
        has members) or 69 (no such group)."""
        async with storage_errors():
            reply = await self.scripts.call(
                "cgroup-delete-4",
                [self.meta_key(group_id), self.members_key(group_id), keys.group_offsets(group_id),
                 keys.group_lag(group_id)],
                [1 if offsets else 0],
            )
            if offsets and int(reply) == 0:
                await self.redis.srem(keys.GROUPS, group_id)
        return int(reply)


class ConsumerGroupStore(ModernGroupStore):
    """KIP-848's consumer groups."""

    async def load(self, group_id: str) -> ConsumerGroupDoc | None:
        """The stored consumer group, or None when there is none of this id."""
        found = await self._load(group_id)
        return None if found is None else ConsumerGroupDoc.unpack(group_id, *found)

    async def save(self, g: ConsumerGroupDoc, node: int = 0) -> int:
        """Write the group if it is still at `g.version`, no other gateway holds its lease and no
        classic group of its id has members; bumps the version. Returns 0 when saved, else the
        refusing code of cgroup-save-6 (1 version moved, 16 not coordinator, 69 a classic group)."""
        code, version = await self._save(g.group_id, g.version, g.pack_meta(), _members(g), node)
        if code == 0:
            g.version = version
        return code

    async def upgrade(self, g: ConsumerGroupDoc, classic_version: int, node: int) -> int:
        """Replace the classic group of `g`'s id, still at `classic_version`, by `g` (online upgrade).
        Returns 0 when converted, else the refusing code (1 the classic group moved, 16 not
        coordinator)."""
        async with storage_errors():
            reply = await self.scripts.call(
                "group-convert-6", self._keys(g.group_id),
                # to, node, version, state, generation, doc, members, instances
                ["consumer", node, classic_version, "", 0, g.pack_meta(), _members(g), _array([])],
            )
        if reply[0] == 0:
            g.version = int(reply[1])
        return int(reply[0])

    async def downgrade(self, group: GroupDoc, consumer_version: int, node: int) -> int:
        """Replace the consumer group of `group`'s id, still at `consumer_version`, by the classic
        `group` (online downgrade); returns as `upgrade`."""
        async with storage_errors():
            reply = await self.scripts.call(
                "group-convert-6", self._keys(group.group_id),
                # to, node, version, state, generation, doc, members, instances
                ["classic", node, consumer_version, *packed(group)],
            )
        if reply[0] == 0:
            group.version = int(reply[1])
        return int(reply[0])
