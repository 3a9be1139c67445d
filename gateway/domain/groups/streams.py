"""KIP-1071's streams group protocol (StreamsGroupHeartbeat) as a state machine.

Pure, as `consumer.py`: each event takes the group as stored (or None), the time now and the
request, and returns a `Step` (the reply, whether to save). Kafka's group-coordinator module
`coordinator.group.streams` is followed layer by layer:
- the group (`StreamsGroup`, `GroupMetadataManager.streamsGroupHeartbeat`): the first member's
  topology becomes the group's; a member whose topology epoch differs is told STALE_TOPOLOGY; a new
  member, one whose process or tags changed, one that left, or a change in the partitions of the
  topology's topics bumps the group epoch;
- the configured topology (`topics/InternalTopicManager.configureTopics`): every source topic must
  exist (else MISSING_SOURCE_TOPICS), repartition topics without a partition count take the largest
  count of the subtopology writing them, copartitioned topics must agree (else
  INCORRECTLY_PARTITIONED_TOPICS, as is an existing internal topic with another partition count; its
  configs are not checked), and changelog topics get one partition per task; internal
  topics that do not exist are handed back to be created (MISSING_INTERNAL_TOPICS meanwhile). A
  group that is not ready gives every member an empty target;
- the target (`TargetAssignmentBuilder`, `assignor/StickyTaskAssignor`, ported in
  `streams_assignor.py`): active tasks stay with their previous member while the balance allows,
  then go to a member with their state (a standby, or reported task offsets), the rest to the least
  loaded; each stateful task gets `num_standby_replicas` standbys on processes other than its
  active's. The task offsets a member reports are kept with it, as 4.4's `MemberTaskOffsets`;
- the member (`CurrentAssignmentBuilder`): tasks leaving a member are revoked first
  (UNREVOKED_TASKS, the member keeps its epoch) until its heartbeat no longer lists them; an active
  task still held elsewhere, or held by the same process in another role, waits (UNRELEASED_TASKS).
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum, StrEnum
from typing import Generic, TypeVar

from gateway.config import STREAMS_HEARTBEAT_INTERVAL_MS
from gateway.domain.groups.consumer import LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, overdue
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.streams_assignor import assign as sticky_assign
from gateway.domain.topic_configs import ConfigDef, Kind
from gateway.store.streams_groups import InternalTopic as InternalTopic  # re-exported for the Kafka face
from gateway.store.streams_groups import StreamsGroupDoc, StreamsMemberDoc
from gateway.store.streams_groups import Subtopology as Subtopology
from gateway.store.streams_groups import TaskOffsets as TaskOffsets
from gateway.store.streams_groups import Tasks as Tasks
from gateway.store.streams_groups import TasksTuple as TasksTuple
from gateway.store.streams_groups import Topology as Topology

log = logging.getLogger(__name__)

# as in the consumer protocol (KAFKA-20268, Kafka 4.3): epoch 1 is the empty assignment a group's
# members start on while its first target is delayed, so a group's own epochs start at 2
EMPTY_ASSIGNMENT_EPOCH = 1
FIRST_GROUP_EPOCH = 2


class Status(IntEnum):
    """Kafka's `StreamsGroupHeartbeatResponse.Status`."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4
    ASSIGNMENT_DELAYED = 5
    MISSING_CLIENT_TAGS = 6  # told to StreamsGroupHeartbeat v1 only (KAFKA-20744)


class MemberState(StrEnum):
    """Kafka's `streams.MemberState`."""

    STABLE = "stable"
    UNREVOKED_TASKS = "unrevoked_tasks"
    UNRELEASED_TASKS = "unreleased_tasks"


class GroupState(StrEnum):
    """Kafka's `StreamsGroup.StreamsGroupState`, as ListGroups and the describes spell it."""

    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class StreamsGroupConfig:
    """Kafka's `group.streams.*` broker settings and their per-group overrides (`streams.*`)."""

    session_timeout_ms: int = 45_000
    # the bounds of a group's own streams.session.timeout.ms (group.streams.{min,max}.session.timeout.ms)
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = STREAMS_HEARTBEAT_INTERVAL_MS
    num_standby_replicas: int = 0
    max_size: int = 2**31 - 1
    acceptable_recovery_lag: int = 10_000
    task_offset_interval_ms: int = 60_000
    initial_rebalance_delay_ms: int = 3_000
    assignment_interval_ms: int = 1_000
    rack_aware_assignment_tags: str = ""  # a group config alone: the client tags members must have

    def overridden(self, values: Mapping[str, str]) -> StreamsGroupConfig:
        """These settings with a group's own `streams.*` configs (IncrementalAlterConfigs on its
        GROUP resource) in place of the broker's."""
        fields: dict[str, object] = {f: int(values[name]) for name, f in _GROUP_CONFIGS.items() if name in values}
        if TAGS in values:
            fields["rack_aware_assignment_tags"] = values[TAGS]
        return replace(self, **fields) if fields else self  # type: ignore[arg-type]


TAGS = "streams.rack.aware.assignment.tags"
# a group config -> the setting it overrides (Kafka's GroupConfig streams configs)
_GROUP_CONFIGS = {
    "streams.session.timeout.ms": "session_timeout_ms",
    "streams.heartbeat.interval.ms": "heartbeat_interval_ms",
    "streams.num.standby.replicas": "num_standby_replicas",
    "streams.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
    "streams.assignment.interval.ms": "assignment_interval_ms",
}


def streams_group_configs(config: StreamsGroupConfig | None = None) -> dict[str, ConfigDef]:
    """Kafka 4.4's GroupConfig streams configs, defaulting to the broker's settings and bounded as
    GroupConfig.validate bounds them (group.streams.{min,max}.session.timeout.ms, the gateway's
    settings, 45-60 s by default; {min,max}.heartbeat.interval.ms 5-15 s, max.standby.replicas 2,
    {min,max}.assignment.interval.ms 0-15 s)."""
    c = config or StreamsGroupConfig()
    return {d.name: d for d in (
        ConfigDef("streams.session.timeout.ms", Kind.INT, str(c.session_timeout_ms),
                  "The timeout to detect client failures when using the streams group protocol.",
                  effective=True, broker="group.streams.session.timeout.ms",
                  low=1, within=(c.min_session_timeout_ms, c.max_session_timeout_ms)),
        ConfigDef("streams.heartbeat.interval.ms", Kind.INT, str(c.heartbeat_interval_ms),
                  "The heartbeat interval given to the members.",
                  effective=True, broker="group.streams.heartbeat.interval.ms", low=5_000, high=15_000),
        ConfigDef("streams.num.standby.replicas", Kind.INT, str(c.num_standby_replicas),
                  "The number of standby replicas for each task.",
                  effective=True, broker="group.streams.num.standby.replicas", low=0, high=2),
        ConfigDef("streams.initial.rebalance.delay.ms", Kind.INT, str(c.initial_rebalance_delay_ms),
                  "The delay of the first target assignment of a new (or emptied) group, to let more members join.",
                  effective=True, broker="group.streams.initial.rebalance.delay.ms", low=0),
        ConfigDef("streams.assignment.interval.ms", Kind.INT, str(c.assignment_interval_ms),
                  "The least time between two target assignments of the group.",
                  effective=True, broker="group.streams.assignment.interval.ms", low=0, high=15_000),
        # the sticky assignor runs whatever they say (Kafka 4.4's reads no tags either); a member
        # without the tags is told MISSING_CLIENT_TAGS, as 4.4 tells it
        ConfigDef("streams.assignor.name", Kind.STRING, "sticky", "The task assignor the group uses."),
        ConfigDef(TAGS, Kind.LIST, "",
                  "The client tags standby replicas are spread across."),
    )}


@dataclass(frozen=True)
class HeartbeatRequest:
    """A StreamsGroupHeartbeat; None is "not sent" (unchanged since the last one)."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    owned: TasksTuple | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""
    endpoint_information_epoch: int = 0
    # (subtopology, partition, offset) as reported, every task.offset.interval
    task_offsets: tuple[tuple[str, int, int], ...] | None = None
    task_end_offsets: tuple[tuple[str, int, int], ...] | None = None
    version: int = 0  # StreamsGroupHeartbeat's: v1 may be told MISSING_CLIENT_TAGS


TopicPartitions = list[tuple[str, list[int]]]  # topic -> partitions, a topic once per task


@dataclass(frozen=True)
class EndpointPartitions:
    """One member's entry of PartitionsByUserEndpoint (Interactive Queries): its endpoint and the
    source partitions (repartition sources included) of its active tasks, and of its standby and
    warm-up tasks."""

    endpoint: tuple[str, int]
    active: TopicPartitions
    standby: TopicPartitions


@dataclass(frozen=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    statuses: list[tuple[Status, str]]
    assignment: TasksTuple | None  # None when the member already has it
    create: list[InternalTopic] = field(default_factory=list)  # internal topics to create
    acceptable_recovery_lag: int = 10_000
    task_offset_interval_ms: int = 60_000
    endpoint_information_epoch: int = 0
    partitions_by_endpoint: list[EndpointPartitions] | None = None  # None: the member's map is current


R = TypeVar("R")


@dataclass(frozen=True)
class Step(Generic[R]):
    """One event's outcome: the driver saves `group` when `save`, then replies (as `consumer.Step`)."""

    group: StreamsGroupDoc | None
    reply: R
    save: bool


@dataclass(frozen=True)
class Configured:
    """Kafka's `ConfiguredTopology`: tasks per subtopology when ready, else the status why not."""

    tasks: dict[str, int]
    missing_internal: list[InternalTopic]
    status: tuple[Status, str] | None


def configure(topology: Topology | None, topics: Mapping[str, int]) -> Configured:
    """Kafka's `InternalTopicManager.configureTopics` over the topics that exist now."""
    if topology is None:
        return Configured({}, [], None)
    missing = sorted({t for s in topology.subtopologies for t in s.source_topics if t not in topics})
    if missing:
        return Configured({}, [], (Status.MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing)} are missing."))
    decided: dict[str, int] = {}
    for s in topology.subtopologies:
        for t in s.repartition_sources:
            if t.partitions > 0:
                decided[t.name] = t.partitions
    for _ in topology.subtopologies:  # a repartition topic takes the count of the subtopology writing it
        for s in topology.subtopologies:
            counts = [topics[t] for t in s.source_topics] + [
                decided[t.name] for t in s.repartition_sources if t.name in decided]
            if not counts:
                continue
            for sink in s.repartition_sinks:
                decided.setdefault(sink, max(counts))
    tasks: dict[str, int] = {}
    for s in topology.subtopologies:
        counts = [topics[t] for t in s.source_topics] + [decided.get(t.name, 0) for t in s.repartition_sources]
        for sources, _regex, repartitions in s.copartition_groups:
            group = {s.source_topics[i]: topics[s.source_topics[i]] for i in sources}
            group |= {s.repartition_sources[i].name: decided.get(s.repartition_sources[i].name, 0)
                      for i in repartitions}
            if len(set(group.values())) > 1:
                return Configured({}, [], (
                    Status.INCORRECTLY_PARTITIONED_TOPICS,
                    f"Following topics do not have the same number of partitions: [{', '.join(sorted(group))}]"))
        tasks[s.subtopology_id] = max(counts, default=0)
    internal = [replace(t, partitions=decided.get(t.name, t.partitions))
                for s in topology.subtopologies for t in s.repartition_sources]
    internal += [replace(t, partitions=tasks[s.subtopology_id]) for s in topology.subtopologies for t in s.changelogs]
    for t in sorted(internal, key=lambda t: t.name):  # one that exists must have the partitions it is given
        if t.name in topics and topics[t.name] != t.partitions:
            return Configured({}, [], (
                Status.INCORRECTLY_PARTITIONED_TOPICS,
                f"Existing topic {t.name} has different number of partitions: expected {t.partitions}, "
                f"found {topics[t.name]}"))
    missing_internal = sorted({t.name: t for t in internal if t.name not in topics}.values(), key=lambda t: t.name)
    if missing_internal:
        names = ", ".join(t.name for t in missing_internal)
        return Configured({}, missing_internal, (Status.MISSING_INTERNAL_TOPICS, f"Internal topics are missing: [{names}]"))
    return Configured(tasks, [], None)


def topology_topics(topology: Topology | None) -> set[str]:
    """Every topic the topology names, whose partitions the group's assignment depends on."""
    if topology is None:
        return set()
    return {t for s in topology.subtopologies
            for t in (*s.source_topics, *(c.name for c in s.changelogs), *(r.name for r in s.repartition_sources))}


class StreamsGroup:
    """This process's side of one streams group (its timers), and the transitions of its stored side."""

    def __init__(self, group_id: str, config: StreamsGroupConfig | None = None) -> None:
        self.group_id = group_id
        self.config = config or StreamsGroupConfig()
        self.sessions: dict[str, float] = {}
        self.revocations: dict[str, tuple[float, int]] = {}
        # Kafka 4.4 delays a new group's first target by group.streams.initial.rebalance.delay.ms
        # and computes one at most once per group.streams.assignment.interval.ms, saying so with
        # ASSIGNMENT_DELAYED; kept in process, as the sessions are (a gateway that takes the group
        # over computes the next target at once)
        self.initial_until = float("-inf")
        self.assigned_at = float("-inf")
        self.armed = False

    def next_deadline(self) -> float | None:
        candidates = [*self.sessions.values(), *(d for d, _ in self.revocations.values())]
        return min(candidates) if candidates else None

    def arm(self, g: StreamsGroupDoc, now: float) -> None:
        if self.armed:
            return
        self.armed = True
        for m in g.members.values():
            if m.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                self.sessions[m.member_id] = now + self.config.session_timeout_ms / 1000
            if m.state == MemberState.UNREVOKED_TASKS:
                self.revocations[m.member_id] = (now + m.rebalance_timeout_ms / 1000, m.member_epoch)

    def reset(self) -> None:
        self.sessions.clear()
        self.revocations.clear()
        self.initial_until = self.assigned_at = float("-inf")
        self.armed = False

    # -- StreamsGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(
        self, g: StreamsGroupDoc | None, now: float, req: HeartbeatRequest, topics: Mapping[str, int],
        config: StreamsGroupConfig | None = None,
    ) -> Step[HeartbeatResult]:
        """Join, heartbeat, reconcile or leave; `topics` is every topic with its partition count,
        `config` the group's settings as its configs override the broker's."""
        cfg = config or self.config
        validate(req)
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(g, req)
        joining = req.member_epoch == 0
        created = g is None
        if g is None:
            if not joining:
                raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"Streams group {self.group_id} not found.")
            g = StreamsGroupDoc(self.group_id)
        member = g.members.get(req.member_id)
        replaced: StreamsMemberDoc | None = None
        if req.instance_id is not None and member is None:
            replaced = g.static_member(req.instance_id)
            if replaced is not None and replaced.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and joining:
                raise GroupError(GroupErrorKind.UNRELEASED_INSTANCE_ID,
                                 f"Static member {req.instance_id} with unknown member id {req.member_id} "
                                 "rejoins while the static member has not left the group yet.")
        if member is None:
            if not joining:
                raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {self.group_id}.")
            if len(g.members) >= cfg.max_size:
                raise GroupError(GroupErrorKind.GROUP_MAX_SIZE_REACHED,
                                 f"The streams group has reached its maximum capacity of {cfg.max_size} members.")
            member = StreamsMemberDoc(req.member_id)
            if replaced is not None:  # the static member's tasks pass to its new incarnation
                member = replace(replaced, member_id=req.member_id, member_epoch=replaced.previous_epoch)
        else:
            _check_epoch(member, req.member_epoch, req.owned)
        if replaced is not None:
            self.fence(g, replaced.member_id, bump=False)
            g.target[req.member_id] = g.target.pop(replaced.member_id, TasksTuple())

        if not g.members:
            self.initial_until = now + cfg.initial_rebalance_delay_ms / 1000
        updated = _updated(member, req)
        bump = joining and req.member_id not in g.members or _identity(updated) != _identity(member)
        if g.topology is None or (not g.members and req.topology is not None):
            if req.topology is not None and (g.topology is None or g.topology.epoch != req.topology.epoch):
                g.topology = req.topology
                bump = True
        g.members[updated.member_id] = updated
        if req.shutdown_application and g.shutdown_requested_by is None:
            g.shutdown_requested_by = updated.member_id
        configured = configure(g.topology, topics)
        counts = {t: topics[t] for t in sorted(topology_topics(g.topology)) if t in topics}
        if counts != g.partition_counts:
            g.partition_counts, bump = counts, True
        if bump:
            g.group_epoch = max(g.group_epoch + 1, FIRST_GROUP_EPOCH)
            log.info("streams group %s: epoch %d", g.group_id, g.group_epoch)
        delayed: str | None = None
        if g.group_epoch > g.assignment_epoch:
            if now < self.initial_until:
                delayed = "Assignment delayed due to the configured initial rebalance delay."
            elif now < self.assigned_at + cfg.assignment_interval_ms / 1000:
                delayed = "Assignment delayed due to the configured assignment interval."
            else:
                g.target = assign(g, configured.tasks, cfg.num_standby_replicas)
                g.assignment_epoch = g.group_epoch
                self.assigned_at = now
            if delayed is not None and g.assignment_epoch == 0:  # members start on the empty assignment
                g.assignment_epoch = EMPTY_ASSIGNMENT_EPOCH

        reconciled = reconcile(updated, g, req.owned)
        if created:
            # Kafka 4.4 (GroupMetadataManager.getOrCreateStreamsGroup) keeps the task offsets of the
            # heartbeat that creates the group on a group object its records' replay replaces: this
            # heartbeat's target saw them, the group keeps none
            reconciled = replace(reconciled, task_offsets={}, task_end_offsets={})
        g.members[reconciled.member_id] = reconciled
        # Kafka 4.4's GroupMetadataManager.streamsGroupHeartbeat: the endpoint epoch moves when the
        # member's endpoint changes, or its tasks do while it has one; a member that has not seen
        # the current epoch is sent the whole map
        if updated.user_endpoint != member.user_endpoint or (
                reconciled.assigned != member.assigned and reconciled.user_endpoint is not None):
            g.endpoint_epoch += 1
        endpoints = None
        if g.endpoint_epoch != req.endpoint_information_epoch:
            endpoints = partitions_by_endpoint(g, reconciled.member_id, topics)
        if reconciled.state == MemberState.UNREVOKED_TASKS:
            self.revocations[reconciled.member_id] = (now + reconciled.rebalance_timeout_ms / 1000,
                                                      reconciled.member_epoch)
        else:
            self.revocations.pop(reconciled.member_id, None)
        self.sessions[reconciled.member_id] = now + cfg.session_timeout_ms / 1000

        statuses: list[tuple[Status, str]] = []
        if g.shutdown_requested_by is not None:
            statuses.append((Status.SHUTDOWN_APPLICATION,
                             f"Streams group member {g.shutdown_requested_by} encountered a fatal error and "
                             "requested a shutdown for the entire application."))
        if g.topology is not None and reconciled.topology_epoch != g.topology.epoch:
            statuses.append((Status.STALE_TOPOLOGY,
                             f"The member's topology epoch {reconciled.topology_epoch} is behind the group's "
                             f"topology epoch {g.topology.epoch}."))
        if configured.status is not None:
            statuses.append(configured.status)
        missing = _missing_client_tags(cfg, reconciled) if req.version >= 1 else []
        if missing:
            statuses.append((Status.MISSING_CLIENT_TAGS,
                             f"Missing required client tags for rack-aware standby assignment: [{', '.join(missing)}]. "
                             "Configure them via 'client.tag.<tagKey>' in your Streams config."))
        if delayed is not None:
            statuses.append((Status.ASSIGNMENT_DELAYED, delayed))
        send = joining or reconciled.assigned != member.assigned or (
            req.owned is not None and req.owned != reconciled.assigned)
        return Step(g, HeartbeatResult(
            reconciled.member_id, reconciled.member_epoch, cfg.heartbeat_interval_ms, statuses,
            reconciled.assigned if send else None, configured.missing_internal,
            cfg.acceptable_recovery_lag, cfg.task_offset_interval_ms, g.endpoint_epoch, endpoints,
        ), True)

    def _leave(self, g: StreamsGroupDoc | None, req: HeartbeatRequest) -> Step[HeartbeatResult]:
        m = g.members.get(req.member_id) if g is not None else None
        if g is None or m is None:
            raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID,
                             f"Member {req.member_id} is not a member of group {self.group_id}.")
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            g.members[m.member_id] = replace(m, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                             previous_epoch=m.member_epoch)
            self.sessions.pop(m.member_id, None)
            self.revocations.pop(m.member_id, None)
        else:
            log.info("streams group %s: member %s left", g.group_id, m.member_id)
            self.fence(g, m.member_id)
        return Step(g, HeartbeatResult(m.member_id, req.member_epoch, 0, [], None), True)

    # -- timers ---------------------------------------------------------------------------------

    def expire(self, g: StreamsGroupDoc | None, now: float) -> Step[None]:
        """Members whose session ended, or that did not revoke within their rebalance timeout, are
        fenced (removed, the group epoch bumped)."""
        if g is None:
            self.reset()
            return Step(None, None, False)
        due = overdue(self.sessions, self.revocations, g.members, MemberState.UNREVOKED_TASKS, now)
        for mid, why in due:
            log.info("streams group %s: member %s %s; fenced", g.group_id, mid, why)
            self.fence(g, mid)
        return Step(g, None, bool(due))

    def fence(self, g: StreamsGroupDoc, member_id: str, *, bump: bool = True) -> None:
        """Remove a member: its tasks are free at once, the others' targets follow."""
        g.members.pop(member_id, None)
        g.target.pop(member_id, None)
        self.sessions.pop(member_id, None)
        self.revocations.pop(member_id, None)
        if bump:
            g.group_epoch += 1
        if not g.members:
            g.assignment_epoch = g.group_epoch
            g.target.clear()
            g.shutdown_requested_by = None


# -- validation ---------------------------------------------------------------------------------


def validate(req: HeartbeatRequest) -> None:
    """Kafka's `throwIfStreamsGroupHeartbeatRequestIsInvalid`."""

    def invalid(message: str) -> GroupError:
        return GroupError(GroupErrorKind.INVALID_REQUEST, message)

    if not req.member_id.strip():
        raise invalid("MemberId can't be empty.")
    if req.instance_id is not None and not req.instance_id.strip():
        raise invalid("InstanceId can't be empty.")
    if req.rack_id is not None and not req.rack_id.strip():
        raise invalid("RackId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or not req.owned.is_empty():
            raise invalid("ActiveTasks, StandbyTasks and WarmupTasks must be empty when (re-)joining.")
        if req.topology is None:
            raise invalid("Topology must be non-null when (re-)joining.")
        if req.process_id is None:
            raise invalid("ProcessId can't be null.")
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -2.")


def _check_epoch(m: StreamsMemberDoc, epoch: int, owned: TasksTuple | None) -> None:
    """Kafka's `throwIfStreamsGroupMemberEpochIsInvalid`."""
    if epoch == 0:
        return
    if epoch > m.member_epoch or (epoch < m.member_epoch and (
            epoch != m.previous_epoch or owned is None or not _within(owned, m.assigned))):
        raise GroupError(GroupErrorKind.FENCED_MEMBER_EPOCH,
                         f"The streams group member has a greater member epoch ({epoch}) than the one known by "
                         f"the group coordinator ({m.member_epoch}). The member must abandon all its "
                         "partitions and rejoin." if epoch > m.member_epoch else
                         f"The streams group member has a smaller member epoch ({epoch}) than the one known by "
                         f"the group coordinator ({m.member_epoch}). The member must abandon all its "
                         "partitions and rejoin.")


def _within(owned: TasksTuple, assigned: TasksTuple) -> bool:
    return all(ps <= a.get(s, frozenset())
               for o, a in ((owned.active, assigned.active), (owned.standby, assigned.standby),
                            (owned.warmup, assigned.warmup))
               for s, ps in o.items())


def _updated(m: StreamsMemberDoc, req: HeartbeatRequest) -> StreamsMemberDoc:
    """The member as this heartbeat leaves it; its task offsets as Kafka 4.4's
    `MemberTaskOffsets.update` keeps them: a list sent replaces the last, one not sent keeps it."""
    return replace(
        m,
        instance_id=req.instance_id if req.instance_id is not None else m.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else m.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else m.rebalance_timeout_ms,
        topology_epoch=req.topology.epoch if req.topology is not None else m.topology_epoch,
        process_id=req.process_id if req.process_id is not None else m.process_id,
        user_endpoint=req.user_endpoint if req.user_endpoint is not None else m.user_endpoint,
        client_tags=req.client_tags if req.client_tags is not None else m.client_tags,
        client_id=req.client_id,
        client_host=req.client_host,
        task_offsets=m.task_offsets if req.task_offsets is None else _task_offsets(req.task_offsets),
        task_end_offsets=m.task_end_offsets if req.task_end_offsets is None else _task_offsets(req.task_end_offsets),
    )


def _task_offsets(reported: tuple[tuple[str, int, int], ...]) -> TaskOffsets:
    """Kafka 4.4's `MemberTaskOffsets.toNestedMap`: a task reported twice is an invalid request."""
    out: TaskOffsets = {}
    for s, p, offset in reported:
        partitions = out.setdefault(s, {})
        if p in partitions:
            raise GroupError(GroupErrorKind.INVALID_REQUEST,
                             f"Task offsets contain a duplicate entry for subtopology {s} and partition {p}.")
        partitions[p] = offset
    return out


def _missing_client_tags(cfg: StreamsGroupConfig, m: StreamsMemberDoc) -> list[str]:
    """Kafka 4.4's streamsGroupHeartbeat: the group's `streams.rack.aware.assignment.tags` (split
    as Java's `split("\\s*,\\s*", -1)` splits) that the member's client tags lack."""
    tags = cfg.rack_aware_assignment_tags.strip()
    have = {k for k, _ in m.client_tags}
    return [t for t in re.split(r"\s*,\s*", tags) if t not in have] if tags else []


def _identity(m: StreamsMemberDoc) -> tuple[object, ...]:
    """What the assignment depends on (Kafka bumps the group epoch when it changes)."""
    return m.process_id, m.rack_id, m.client_tags, m.topology_epoch, m.user_endpoint, m.instance_id


# -- the target: Kafka's sticky task assignor -----------------------------------------------------


def assign(g: StreamsGroupDoc, tasks: Mapping[str, int], standby_replicas: int) -> dict[str, TasksTuple]:
    """The group's target: Kafka 4.4's sticky task assignor over its members (a static member that
    left is not one), from the tasks they hold and the task offsets they reported; the
    subtopologies with changelogs are the stateful ones, which get standbys."""
    members = {mid: m for mid, m in g.members.items() if m.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH}
    stateful = {s.subtopology_id for s in g.topology.subtopologies if s.changelogs} if g.topology else set()
    return sticky_assign(members, tasks, stateful, standby_replicas)


# -- Interactive Queries ------------------------------------------------------------------------


def partitions_by_endpoint(g: StreamsGroupDoc, member_id: str, topics: Mapping[str, int]) -> list[EndpointPartitions]:
    """Kafka 4.4's `StreamsGroup.buildEndpointToPartitions`: an entry per member with an endpoint,
    the heartbeating member's last, each from the tasks the member holds now (not its target), as
    `EndpointToPartitionsManager.endpointToPartitions` maps them: a task's partition of each source
    and repartition source topic of its subtopology that has that partition."""
    subtopologies = {s.subtopology_id: s for s in g.topology.subtopologies} if g.topology else {}

    def partitions(tasks: list[Tasks]) -> TopicPartitions:
        out: TopicPartitions = []
        for role in tasks:
            for sid, ps in sorted(role.items()):
                s = subtopologies.get(sid)
                if s is None:
                    continue
                for topic in sorted({*s.source_topics, *(r.name for r in s.repartition_sources)}):
                    mine = sorted(p for p in ps if p < topics.get(topic, 0))
                    if mine:
                        out.append((topic, mine))
        return out

    order = [mid for mid in g.members if mid != member_id] + [member_id]
    return [EndpointPartitions(m.user_endpoint, partitions([m.assigned.active]),
                               partitions([m.assigned.standby, m.assigned.warmup]))
            for m in (g.members[mid] for mid in order if mid in g.members) if m.user_endpoint is not None]


# -- reconciliation -----------------------------------------------------------------------------


def reconcile(m: StreamsMemberDoc, g: StreamsGroupDoc, owned: TasksTuple | None) -> StreamsMemberDoc:
    """Kafka's streams `CurrentAssignmentBuilder.build`: one step of the member towards its target."""
    if m.state == MemberState.STABLE and m.member_epoch == g.assignment_epoch:
        return m
    if m.state == MemberState.UNREVOKED_TASKS and (owned is None or owned.contains_any(m.pending_revocation)):
        return m
    return _next_assignment(m, g, owned)


def _next_assignment(m: StreamsMemberDoc, g: StreamsGroupDoc, owned: TasksTuple | None) -> StreamsMemberDoc:
    target = g.target.get(m.member_id, TasksTuple())
    active_owner: dict[tuple[str, int], str] = {}
    other_roles: dict[tuple[str, int], set[str]] = defaultdict(set)  # processes holding a standby/warm-up
    for other in g.members.values():
        if other.member_id == m.member_id:
            continue
        for tt in (other.assigned, other.pending_revocation):
            for s, ps in tt.active.items():
                for p in ps:
                    active_owner[(s, p)] = other.process_id
            for role in (tt.standby, tt.warmup):
                for s, ps in role.items():
                    for p in ps:
                        other_roles[(s, p)].add(other.process_id)

    def unreleased_active(task: tuple[str, int]) -> bool:
        return task in active_owner or m.process_id in other_roles[task]

    def unreleased_standby(task: tuple[str, int]) -> bool:
        return active_owner.get(task) == m.process_id or m.process_id in other_roles[task]

    results = [
        _difference(mine, theirs, check)
        for mine, theirs, check in ((m.assigned.active, target.active, unreleased_active),
                                    (m.assigned.standby, target.standby, unreleased_standby),
                                    (m.assigned.warmup, target.warmup, unreleased_standby))
    ]
    kept = TasksTuple(*(r[0] for r in results))
    revoking = TasksTuple(*(r[1] for r in results))
    adding = TasksTuple(*(r[2] for r in results))
    unreleased = any(r[3] for r in results)
    if not revoking.is_empty() and (owned is None or owned.contains_any(revoking)):
        return replace(m, state=MemberState.UNREVOKED_TASKS.value, assigned=kept, pending_revocation=revoking)
    assigned = TasksTuple(*(_union(a, b) for a, b in ((kept.active, adding.active), (kept.standby, adding.standby),
                                                        (kept.warmup, adding.warmup))))
    state = MemberState.UNRELEASED_TASKS if unreleased else MemberState.STABLE
    previous = m.member_epoch if g.assignment_epoch != m.member_epoch else m.previous_epoch
    return replace(m, member_epoch=g.assignment_epoch, previous_epoch=previous, state=state.value,
                   assigned=assigned, pending_revocation=TasksTuple())


def _difference(current: Tasks, target: Tasks, unreleased: object) -> tuple[Tasks, Tasks, Tasks, bool]:
    check = unreleased if callable(unreleased) else (lambda t: False)
    kept: dict[str, frozenset[int]] = {}
    revoking: dict[str, frozenset[int]] = {}
    adding: dict[str, frozenset[int]] = {}
    held_back = False
    for s in sorted(set(current) | set(target)):
        cur, want = current.get(s, frozenset()), target.get(s, frozenset())
        free = frozenset(p for p in want - cur if not check((s, p)))
        held_back |= len(free) < len(want - cur)
        for out, value in ((kept, cur & want), (revoking, cur - want), (adding, free)):
            if value:
                out[s] = value
    return kept, revoking, adding, held_back


def _union(a: Tasks, b: Tasks) -> Tasks:
    return {s: a.get(s, frozenset()) | b.get(s, frozenset()) for s in sorted(set(a) | set(b))}


# -- describing, offsets ------------------------------------------------------------------------


def group_state(g: StreamsGroupDoc | None, topics: Mapping[str, int]) -> GroupState:
    """Kafka's `StreamsGroup.maybeUpdateGroupState`."""
    if g is None:
        return GroupState.DEAD
    if not g.members:
        return GroupState.EMPTY
    if g.topology is None or configure(g.topology, topics).status is not None:
        return GroupState.NOT_READY
    if g.group_epoch > g.assignment_epoch:
        return GroupState.ASSIGNING
    for m in g.members.values():
        if m.state != MemberState.STABLE or m.member_epoch != g.assignment_epoch:
            return GroupState.RECONCILING
    return GroupState.STABLE


def validate_offset_commit(g: StreamsGroupDoc, member_id: str, member_epoch: int) -> None:
    """Kafka's `StreamsGroup.validateOffsetCommit`: epoch -1 (the admin client) while the group is
    empty; else the member must exist and commit in its current epoch."""
    if member_epoch < 0 and not g.members:
        return
    m = g.members.get(member_id)
    if m is None:
        raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {g.group_id}")
    if member_epoch != m.member_epoch:
        raise GroupError(GroupErrorKind.STALE_MEMBER_EPOCH,
                         f"member epoch {member_epoch} is not the member's current epoch {m.member_epoch}")
