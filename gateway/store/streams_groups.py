"""The shape of a streams group of KIP-1071's protocol as stored: the group's epochs, its topology
(as the first member registered it), its members (process, tags, epochs, reconciliation state, the
active, standby and warm-up tasks they hold and those pending revocation) and the target assignment
with what it was computed from (the partition counts of the topology's topics).

Beside the consumer group's shape (`consumer_groups.py`) and under the same hash tag: the three
protocols share the group id space and the offsets. The group is saved by the consumer group's
scripts (compare-and-set on a version, one member per blob), over the streams group's own keys.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import msgpack

from gateway.store import keys
from gateway.store.consumer_groups import ModernGroupStore
from gateway.store.groups import _array

Tasks = dict[str, frozenset[int]]  # subtopology id -> partitions (task ids)
TaskOffsets = dict[str, dict[int, int]]  # subtopology id -> partition -> changelog offset sum


@dataclass(frozen=True)
class TasksTuple:
    """Kafka's `streams.TasksTuple`: a member's active, standby and warm-up tasks."""

    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    def pack(self) -> list[Any]:
        return [_pack_tasks(self.active), _pack_tasks(self.standby), _pack_tasks(self.warmup)]

    @classmethod
    def unpack(cls, raw: list[Any]) -> TasksTuple:
        return cls(*(_unpack_tasks(r) for r in raw))

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def contains_any(self, other: TasksTuple) -> bool:
        return any(
            mine.get(s, frozenset()) & ps
            for mine, theirs in ((self.active, other.active), (self.standby, other.standby),
                                 (self.warmup, other.warmup))
            for s, ps in theirs.items()
        )


def _pack_tasks(t: Tasks) -> dict[str, list[int]]:
    return {s: sorted(ps) for s, ps in sorted(t.items())}


def _unpack_tasks(raw: dict[str, list[int]]) -> Tasks:
    return {s: frozenset(ps) for s, ps in raw.items()}


@dataclass(frozen=True)
class InternalTopic:
    """A changelog or repartition topic as the topology describes it (partitions 0: derived)."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Subtopology:
    """One subtopology; a copartition group is three lists of indexes: into `source_topics`,
    `source_regex` and `repartition_sources`."""

    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_regex: tuple[str, ...] = ()
    changelogs: tuple[InternalTopic, ...] = ()
    repartition_sinks: tuple[str, ...] = ()
    repartition_sources: tuple[InternalTopic, ...] = ()
    copartition_groups: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def pack(self) -> list[Any]:
        return [self.epoch, [
            [s.subtopology_id, list(s.source_topics), list(s.source_regex),
             [_pack_topic(t) for t in s.changelogs], list(s.repartition_sinks),
             [_pack_topic(t) for t in s.repartition_sources],
             [[list(a), list(b), list(c)] for a, b, c in s.copartition_groups]]
            for s in self.subtopologies
        ]]

    @classmethod
    def unpack(cls, raw: list[Any]) -> Topology:
        epoch, subs = raw
        return cls(epoch, tuple(
            Subtopology(sid, tuple(src), tuple(rx), tuple(_unpack_topic(t) for t in cl), tuple(sinks),
                        tuple(_unpack_topic(t) for t in rs),
                        tuple((tuple(a), tuple(b), tuple(c)) for a, b, c in cg))
            for sid, src, rx, cl, sinks, rs, cg in subs
        ))


def _pack_topic(t: InternalTopic) -> list[Any]:
    return [t.name, t.partitions, t.replication_factor, [list(kv) for kv in t.configs]]


def _unpack_topic(raw: list[Any]) -> InternalTopic:
    name, partitions, rf, configs = raw
    return InternalTopic(name, partitions, rf, tuple((k, v) for k, v in configs))


@dataclass
class StreamsMemberDoc:
    """One member. `state` is Kafka's streams `MemberState` (stable, unrevoked_tasks,
    unreleased_tasks); `member_epoch` -2 marks a static member that left and may come back."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    topology_epoch: int = 0
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    member_epoch: int = 0
    previous_epoch: int = 0
    state: str = "stable"
    assigned: TasksTuple = field(default_factory=TasksTuple)
    pending_revocation: TasksTuple = field(default_factory=TasksTuple)
    # the changelog offsets the member last reported (Kafka 4.4's MemberTaskOffsets): its tasks'
    # local state, and their changelogs' end offsets
    task_offsets: TaskOffsets = field(default_factory=dict)
    task_end_offsets: TaskOffsets = field(default_factory=dict)

    def copy(self) -> StreamsMemberDoc:
        return copy.copy(self)

    def pack(self) -> bytes:
        return _packb([
            self.instance_id, self.rack_id, self.client_id, self.client_host, self.rebalance_timeout_ms,
            self.topology_epoch, self.process_id, list(self.user_endpoint) if self.user_endpoint else None,
            [list(kv) for kv in self.client_tags], self.member_epoch, self.previous_epoch, self.state,
            self.assigned.pack(), self.pending_revocation.pack(),
            _pack_offsets(self.task_offsets), _pack_offsets(self.task_end_offsets),
        ])

    @classmethod
    def unpack(cls, member_id: str, raw: bytes) -> StreamsMemberDoc:
        fields = msgpack.unpackb(raw, raw=False)
        (i, r, c, h, rt, te, pid, ep, tags, epoch, prev, state, assigned, pending) = fields[:14]
        offsets, end_offsets = fields[14:] or ([], [])  # a member stored before offsets were kept has none
        return cls(member_id, i, r, c, h, rt, te, pid, (ep[0], ep[1]) if ep else None,
                   tuple((k, v) for k, v in tags), epoch, prev, state,
                   TasksTuple.unpack(assigned), TasksTuple.unpack(pending),
                   _unpack_offsets(offsets), _unpack_offsets(end_offsets))


def _pack_offsets(o: TaskOffsets) -> list[Any]:
    return [[s, p, n] for s, ps in sorted(o.items()) for p, n in sorted(ps.items())]


def _unpack_offsets(raw: list[Any]) -> TaskOffsets:
    out: TaskOffsets = {}
    for s, p, n in raw:
        out.setdefault(s, {})[p] = n
    return out


@dataclass
class StreamsGroupDoc:
    """A streams group as stored; `version` is what the next save compares against (0: new)."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    topology: Topology | None = None
    members: dict[str, StreamsMemberDoc] = field(default_factory=dict)
    target: dict[str, TasksTuple] = field(default_factory=dict)  # member id -> target assignment
    partition_counts: dict[str, int] = field(default_factory=dict)  # the topology's topics that exist
    shutdown_requested_by: str | None = None  # a member asked every instance to shut down
    endpoint_epoch: int = 0
    version: int = 0

    def static_member(self, instance_id: str) -> StreamsMemberDoc | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def pack_meta(self) -> bytes:
        return _packb([
            self.group_epoch, self.assignment_epoch, self.topology.pack() if self.topology else None,
            {mid: t.pack() for mid, t in self.target.items()}, self.partition_counts,
            self.shutdown_requested_by, self.endpoint_epoch,
        ])

    @classmethod
    def unpack(cls, group_id: str, meta: bytes, members: dict[str, bytes], version: int) -> StreamsGroupDoc:
        epoch, assignment_epoch, topology, target, counts, shutdown, endpoint_epoch = msgpack.unpackb(meta, raw=False)
        return cls(
            group_id, epoch, assignment_epoch, Topology.unpack(topology) if topology else None,
            {mid: StreamsMemberDoc.unpack(mid, raw) for mid, raw in sorted(members.items())},
            {mid: TasksTuple.unpack(t) for mid, t in target.items()}, dict(counts), shutdown, endpoint_epoch,
            version,
        )


def _packb(value: Any) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True))


class StreamsGroupStore(ModernGroupStore):
    """KIP-1071's streams groups: the consumer group's scripts over the streams group's own hashes."""

    meta_key = staticmethod(keys.group_streams)
    members_key = staticmethod(keys.group_streams_members)

    async def load(self, group_id: str) -> StreamsGroupDoc | None:
        """The stored streams group, or None when there is none of this id."""
        found = await self._load(group_id)
        return None if found is None else StreamsGroupDoc.unpack(group_id, *found)

    async def save(self, g: StreamsGroupDoc, node: int = 0) -> int:
        """Write the group if it is still at `g.version`, no other gateway holds its lease and no
        classic group of its id has members; 0 when saved, else cgroup-save-6's refusing code."""
        members: list[Any] = []
        for m in g.members.values():
            members += [m.member_id, m.pack()]
        code, version = await self._save(g.group_id, g.version, g.pack_meta(), _array(members), node)
        if code == 0:
            g.version = version
        return code
