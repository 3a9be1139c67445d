"""The share-group coordinator: runs `share.ShareGroup`s and puts their members on the topics'
shared subscriptions, so a share group is, per topic, the native shared subscription of its name.

One queue, both faces: a member fetching a topic is a consumer of that topic's subscription
(`gateway.domain.subscriptions`, mode shared) with the group's `share.record.lock.duration.ms` as its
ack timeout. The subscription hands each record to one consumer at a time (a Kafka member or a
native shared consumer), keeps what is in flight (Kafka's acquired records, with their delivery
counts), redelivers what is released or whose lock expires, and archives (acknowledges undelivered)
what was delivered `share.delivery.count.limit` times. Acknowledgements are the subscription's own,
one script per partition: an ACCEPT or REJECT the client was told of is in Redis, so a gateway
killed loses none; what it held locked is delivered again from the subscription's cursor, with the
delivery count Redis kept for it. Members, sessions and locks are kept in process, as Kafka keeps
its timers (a new gateway's members join again on UNKNOWN_MEMBER_ID).

Across gateways, as in Kafka (whose SharePartitionManager lives on each partition's leader), a
member fetches a partition from the gateway Metadata names its leader: there alone the group's
subscription dispatches it (split by partition, each under a lease), and a fetch elsewhere is
answered NOT_LEADER_OR_FOLLOWER with the leader. Membership is the coordinator's; a leader that
does not coordinate the group closes the share session of a member silent for the session timeout.

Followed: KIP-932; Kafka 4.2's `SharePartition` (acquire, acknowledge: a batch of offsets not all
acquired by the member is INVALID_RECORD_STATE and changes nothing; release on session close and
member departure; archive at the delivery limit) and `GroupConfig` (the share group configs, their
defaults and bounds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from gateway.clock import now_ms
from gateway.domain.dead_letter import Letters
from gateway.domain.groups.coordinator import GroupListing
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.share import (
    CLOSE_SESSION_EPOCH,
    JOIN_EPOCH,
    HeartbeatResult,
    ShareErrorKind,
    ShareGroup,
    ShareMember,
    ShareSession,
)
from gateway.domain.groups.streams import StreamsGroupConfig, streams_group_configs
from gateway.domain.log import LogService
from gateway.domain.subscriptions import Consumer, Delivery, Mode, Subscription, SubscriptionService
from gateway.domain.topic_configs import Change, ConfigDef, Kind, apply
from gateway.errors import InvalidConfig, TopicNotFound
from gateway.store import Store
from gateway.store.log import Entry

log = logging.getLogger(__name__)

AUTO_OFFSET_RESET = "share.auto.offset.reset"
LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_LIMIT = "share.delivery.count.limit"
ISOLATION_LEVEL = "share.isolation.level"
DEAD_LETTER_TOPIC = "share.dead.letter.topic"  # this gateway's own: not a Kafka group config
RELEASE_DELAY = "share.release.delay.ms"  # this gateway's own too
SHARE = "share"  # ListGroups' protocol type and group type of a share group
MAX_LOCK_DURATION_MS = 3_600_000  # Kafka's bound on group.share.max.record.lock.duration.ms
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_ISO_DURATION = re.compile(
    r"^([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?$", re.I
)


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (java.time.Duration.parse's PnDTnHnMn.nS) in milliseconds, None if malformed."""
    m = _ISO_DURATION.match(text)
    if m is None or text.upper().endswith("T") or not any(m.group(i) for i in (2, 3, 4, 5)):
        return None
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 3, 4, 5))
    ms = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + int((m.group(6) or "0").ljust(3, "0")[:3])
    return -ms if m.group(1) == "-" else ms


def _auto_offset_reset(value: str) -> str | None:
    if value in ("latest", "earliest"):
        return None
    if value.startswith("by_duration:"):
        ms = duration_ms(value.removeprefix("by_duration:"))
        if ms is None:
            return "Invalid duration format"
        return "Duration cannot be negative" if ms < 0 else None
    return "String must be one of: latest, earliest, by_duration:<ISO-8601 duration>"


def _topic_name(value: str) -> str | None:
    if value and not _TOPIC_NAME.match(value):
        return "a topic name is at most 249 of the characters [a-zA-Z0-9._-]"
    return None


def share_group_configs(lock_durations_ms: tuple[int, int, int] = (15_000, 30_000, 60_000)) -> dict[str, ConfigDef]:
    """Kafka's GroupConfig share configs; `lock_durations_ms` is this gateway's (minimum, default,
    maximum) share.record.lock.duration.ms, Kafka's group.share.{min.,,max.}record.lock.duration.ms
    (GroupConfig.validate bounds a group's value by the two, and the default is the broker's)."""
    min_lock_ms, lock_ms, max_lock_ms = lock_durations_ms
    return {c.name: c for c in (
        ConfigDef(AUTO_OFFSET_RESET, Kind.STRING, "latest",
                  "Where a share group starts on a partition it has not read: latest, earliest, or "
                  "by_duration:<ISO-8601 duration> (the first record at or after now less the duration).",
                  effective=True, rule=_auto_offset_reset),
        ConfigDef(LOCK_DURATION, Kind.INT, str(lock_ms),
                  "How long a delivered record stays locked to its consumer before it is delivered again.",
                  effective=True, broker="group.share.record.lock.duration.ms", low=min_lock_ms, high=max_lock_ms),
        ConfigDef(DELIVERY_LIMIT, Kind.INT, "5",
                  "Deliveries of a record after which it is archived instead of delivered again.",
                  effective=True, broker="group.share.delivery.count.limit", low=2, high=10),
        ConfigDef(DEAD_LETTER_TOPIC, Kind.STRING, "",
                  "Beyond Kafka: a topic that receives every record rejected or archived at the delivery "
                  "limit, with headers saying why, how often it was delivered and where it came from; "
                  "empty: such records are archived silently, as in Kafka.",
                  effective=True, rule=_topic_name),
        ConfigDef(RELEASE_DELAY, Kind.INT, "0",
                  "Beyond Kafka: how long a released record waits before it is delivered again (a "
                  "negative acknowledgement's backoff); 0: at once, as in Kafka.",
                  effective=True, low=0, high=MAX_LOCK_DURATION_MS),
        ConfigDef(ISOLATION_LEVEL, Kind.STRING, "read_uncommitted",
                  "read_committed hides aborted and open transactions, as a read-committed Fetch does; "
                  "read_uncommitted delivers their records up to the high watermark.",
                  effective=True, choices=("read_committed", "read_uncommitted")),
    )}


class AckType(IntEnum):
    """ShareFetch/ShareAcknowledge's AcknowledgeTypes."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


AckBatch = tuple[int, int, list[int]]  # first offset, last offset, types (one for all, or one per offset)
TopicPartition = tuple[str, int]


@dataclass
class Acquired:
    """One stored batch of a fetch and the ranges of it acquired: (first, last, delivery count)."""

    entry: Entry
    ranges: list[tuple[int, int, int]]


@dataclass
class ShareFetched:
    records: dict[TopicPartition, list[Acquired]] = field(default_factory=dict)
    acknowledged: set[TopicPartition] = field(default_factory=set)  # carried acknowledgements
    ack_errors: dict[TopicPartition, ShareErrorKind] = field(default_factory=dict)  # of those, refused
    elsewhere: set[TopicPartition] = field(default_factory=set)  # asked for, led by another gateway
    # of the session, a topic deleted and created again since the session named it: the old id
    stale: dict[TopicPartition, str] = field(default_factory=dict)
    waited: float = 0.0  # seconds spent waiting for records: a long poll's, no request time for quotas
    opened: ShareSession | None = None  # the session the fetch opened (epoch 0): it ends with its connection


@dataclass
class Stats:
    """What the share groups of this gateway did, for the admin face."""

    rejected: int = 0
    archived: int = 0
    dead_lettered: int = 0


@dataclass(frozen=True)
class ShareGroupView:
    """A share group for the admin face: its members, per topic and partition its start offset and
    the records in flight (delivered, not yet acknowledged) by delivery count, and what this gateway
    saw rejected and archived."""

    group_id: str
    state: str
    epoch: int
    members: list[ShareMember]
    start_offsets: dict[str, dict[int, int]]
    in_flight: dict[str, dict[int, dict[int, int]]]  # topic -> partition -> delivery count -> records
    rejected: int
    archived: int
    dead_lettered: int


class _Member:
    """A member's consumers (one per topic it fetched) and what they were handed, not yet fetched.

    Records are handed to a member only while one of its fetches waits for them, and wait here,
    unlocked, until that fetch's response carries them: their locks start then (`take`), and what
    the response has no room for, or what arrives after it, goes back to the queue as it was
    (`give_back`), not as a delivery that failed, as Kafka acquires only what a response carries.
    So no record's first delivery is lost on the way, nor held by a member that stopped fetching."""

    def __init__(self, coordinator: ShareCoordinator, group_id: str, member_id: str) -> None:
        self.coordinator = coordinator
        self.group_id = group_id
        self.member_id = member_id
        self.consumers: dict[str, Consumer] = {}
        self.topics: dict[int, str] = {}  # consumer id -> topic
        self.handed: list[tuple[str, Delivery]] = []
        self.arrived = asyncio.Event()
        self.seen = now_ms()  # the end of its last request here
        self.fetching = 0  # its requests in progress here
        self.ids: dict[str, str] = {}  # topic -> the id its share session names it by

    async def deliver(self, consumer_id: int, deliveries: list[Delivery]) -> None:
        topic = self.topics.get(consumer_id)
        if topic is None:
            return
        for d in deliveries:
            d.deadline = 0.0  # locked from the response that carries it (`take`)
        self.handed.extend((topic, d) for d in deliveries)
        if self.fetching:
            self.arrived.set()
        else:  # its fetch ended meanwhile
            self.give_back(topic, frozenset())

    async def reset(self, consumer_id: int) -> None:
        """A seek forgot what was in flight: `take` drops what it handed out."""

    async def watermark(self, consumer_id: int, watermark: int | None) -> None:
        """Share consumers are not told watermarks."""

    def held(self, topic: str, d: Delivery) -> bool:
        consumer = self.consumers.get(topic)
        return consumer is not None and d.consumer is consumer and bool(d.offsets)

    def give_back(self, topic: str, keep: frozenset[int]) -> None:
        """What was handed out of the topic's partitions other than `keep` and not yet fetched goes
        back to the subscription undelivered (the member no longer fetches those partitions here)."""
        consumer = self.consumers.get(topic)
        sub = consumer.subscription if consumer is not None else None
        if sub is None:
            return
        back = [d for t, d in self.handed if t == topic and d.partition not in keep and self.held(t, d)]
        if back:
            self.handed = [(t, d) for t, d in self.handed if not (t == topic and d in back)]
            sub.give_back(back)

    def take(self, max_records: int, max_bytes: int, partitions: int = 1) -> list[tuple[str, Delivery]]:
        """What was handed out and is still held, within a ShareFetch's limits as Kafka applies
        them, its locks started now. MaxBytes is shared evenly among the `partitions` fetched
        (DelayedShareFetch's UNIFORM PartitionMaxBytesStrategy) and a partition gives whole stored
        batches within its share and what is left of MaxBytes, except that the first batch always
        goes (KIP-74's min-one-message, so a batch larger than the limit cannot stall the consumer);
        MaxRecords is soft: batches are taken whole until it is reached (ShareFetchUtils acquires
        `maxFetchRecords - acquiredRecordsCount` per partition, batch-aligned)."""
        out: list[tuple[str, Delivery]] = []
        records = size = 0
        share = max_bytes // max(1, partitions)
        per_partition: dict[TopicPartition, int] = {}
        keep: list[tuple[str, Delivery]] = []
        for topic, d in self.handed:
            if not self.held(topic, d):
                continue
            n, tp = len(d.entry.batch), (topic, d.partition)
            if out and (records >= max_records or size + n > max_bytes or per_partition.get(tp, 0) + n > share):
                keep.append((topic, d))
                continue
            out.append((topic, d))
            records += len(d.offsets)
            size += n
            per_partition[tp] = per_partition.get(tp, 0) + n
        self.handed = keep
        for topic, consumer in self.consumers.items():
            if consumer.subscription is not None:
                consumer.subscription.start_locks([d for t, d in out if t == topic])
        return out


class ShareCoordinator:
    """The share groups this gateway coordinates, over the subscription service."""

    def __init__(
        self, log_service: LogService, subscriptions: SubscriptionService, store: Store, *,
        session_timeout_ms: int, heartbeat_interval_ms: int, lock_durations_ms: tuple[int, int, int],
        leads: Callable[[str, int], bool] = lambda topic, partition: True,
        streams_config: StreamsGroupConfig | None = None,
    ) -> None:
        """`leads`: whether this gateway leads a partition (Metadata's answer); a member fetches a
        partition where it is led, and there alone its subscription dispatches it."""
        self.leads = leads
        self.log = log_service
        self.letters = Letters(log_service)
        self.subscriptions = subscriptions
        self.store = store.share_groups
        self._lag_history = store.lag_history
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # every group config is kept here, the streams protocol's too (read by its coordinator)
        self.specs = share_group_configs(lock_durations_ms) | streams_group_configs(streams_config)
        self.groups: dict[str, ShareGroup] = {}
        self.stats: dict[str, Stats] = {}
        self._members: dict[tuple[str, str], _Member] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._lock = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    # -- configs ---------------------------------------------------------------------------------

    async def configs(self, group_id: str, *, fresh: bool = False) -> dict[str, str]:
        """The group's configs as set (defaults not included)."""
        if fresh or group_id not in self._configs:
            _, self._configs[group_id] = await self.store.configs(group_id).get()
        return self._configs[group_id]

    def value(self, configs: Mapping[str, str], name: str) -> str:
        return configs.get(name, self.specs[name].default)

    async def alter_configs(self, group_id: str, changes: Iterable[Change], *, incremental: bool,
                            validate_only: bool) -> None:
        changes = list(changes)

        def change(current: dict[str, str]) -> dict[str, str]:
            return apply(current, changes, self.specs, incremental=incremental,
                         unknown=lambda name: InvalidConfig(f"Unknown group config name: {name}"))

        if validate_only:
            change(await self.configs(group_id, fresh=True))
            return
        self._configs[group_id] = await self.store.configs(group_id).alter(change)
        await self._apply_configs(group_id)

    async def _apply_configs(self, group_id: str) -> None:
        """Set lock durations and the delivery limit on the group's consumers and subscriptions."""
        cfg = self._configs.get(group_id, {})
        lock = int(self.value(cfg, LOCK_DURATION)) / 1000
        for (gid, _), member in self._members.items():
            if gid != group_id:
                continue
            for consumer in member.consumers.values():
                consumer.ack_timeout = lock
                if consumer.subscription is not None:
                    self._configure(consumer.subscription, cfg)

    def _configure(self, sub: Subscription, cfg: Mapping[str, str]) -> None:
        """The group's delivery limit and isolation level on one of its subscriptions."""
        sub.delivery_limit = int(self.value(cfg, DELIVERY_LIMIT))
        read_committed = self.value(cfg, ISOLATION_LEVEL) == "read_committed"
        if sub.read_committed != read_committed:
            sub.read_committed = read_committed
            sub.wake.set()

    # -- membership ------------------------------------------------------------------------------

    async def heartbeat(
        self, group_id: str, member_id: str, member_epoch: int, subscribed: Iterable[str] | None, *,
        rack_id: str | None = None, client_id: str = "", client_host: str = "",
    ) -> HeartbeatResult:
        topics = {t.name: t.partitions for t in await self.log.list_topics()}
        await self.configs(group_id, fresh=True)
        async with self._lock:
            group = self.groups.get(group_id)
            fresh = group is None
            if group is None:
                if member_epoch != JOIN_EPOCH and group_id not in await self.store.known():
                    # only a join makes a share group (Kafka's GroupMetadataManager.shareGroupHeartbeat:
                    # getOrMaybeCreatePersistedShareGroup(groupId, memberEpoch == 0))
                    raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
                group = ShareGroup(group_id)
            result = group.heartbeat(
                member_id, member_epoch, subscribed, topics, now_ms=now_ms(),
                session_timeout_ms=self.session_timeout_ms, rack_id=rack_id, client_id=client_id,
                client_host=client_host,
            )
            if fresh:  # kept only once a heartbeat of it is accepted: a refused join makes no group
                self.groups[group_id] = group
                self.stats.setdefault(group_id, Stats())
                await self.store.remember(group_id)
        if result.left:
            await self._drop(group_id, member_id)
        self._start_reaper()
        return result

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap(), name="share group sessions")
        self._wake.set()

    async def _reap(self) -> None:
        """Remove members whose session timed out, releasing what they held; and forget the share
        sessions of members silent here that long (on a gateway leading some of their partitions
        but not coordinating their group, no heartbeat says when they have gone), so that what
        they held is redelivered and their partitions can move to another leader."""
        while True:
            deadlines = [d for g in self.groups.values() if (d := g.next_deadline()) is not None]
            deadlines += [m.seen + self.session_timeout_ms for m in self._members.values() if not m.fetching]
            wait = 1.0 if not deadlines else max(0.0, min(deadlines) - now_ms()) / 1000
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=min(wait, 5.0))
            now = now_ms()
            for group_id, group in list(self.groups.items()):
                for member_id in group.expire(now):
                    log.info("share group %s: member %s timed out", group_id, member_id)
                    await self._drop(group_id, member_id)
            for (group_id, member_id), m in list(self._members.items()):
                if not m.fetching and m.seen + self.session_timeout_ms <= now:
                    log.info("share group %s: member %s silent here, its share session closed", group_id, member_id)
                    self._group(group_id).sessions.pop(member_id, None)
                    await self._drop(group_id, member_id)

    async def _drop(self, group_id: str, member_id: str) -> None:
        """The member is gone (or its session closed): what it held goes to the others."""
        member = self._members.pop((group_id, member_id), None)
        if member is None:
            return
        for topic, consumer in member.consumers.items():
            member.give_back(topic, frozenset())  # never sent: not a delivery that failed
            await self.subscriptions.unsubscribe_consumer(consumer)

    async def connection_closed(self, group_id: str, member_id: str, session: ShareSession) -> None:
        """The connection that opened `session` closed: as Kafka 4.4's ShareSessionCache
        (ClientConnectionDisconnectListener.onDisconnect), the session ends and what the member
        acquired is released at once (SharePartitionManager.releaseSession); the member stays in
        the group, whose membership its heartbeats keep."""
        group = self.groups.get(group_id)
        if group is not None and group.end_session(member_id, session):
            await self._drop(group_id, member_id)

    async def view(self, group_id: str) -> ShareGroupView | None:
        """What the admin face shows of a share group; None when there is no such group."""
        group = self.groups.get(group_id)
        if group is None and group_id not in await self.store.known():
            return None
        starts = await self.start_offsets(group_id, None)
        stats = self.stats.get(group_id, Stats())
        in_flight: dict[str, dict[int, dict[int, int]]] = {}
        for topic in starts:
            held = self.subscriptions.in_flight(topic, group_id)
            in_flight[topic] = {p: dict(sorted(counts.items())) for p, counts in held.items() if counts}
        return ShareGroupView(
            group_id, group.state if group is not None else "Empty", group.epoch if group is not None else 0,
            [] if group is None else list(group.members.values()), starts, in_flight, stats.rejected, stats.archived,
            stats.dead_lettered,
        )

    def describe(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    async def known(self) -> set[str]:
        return set(self.groups) | await self.store.known()

    async def list_groups(self, states: set[str] | None = None) -> list[GroupListing]:
        """ListGroups' share groups: those with members here, and every one Redis knows of."""
        out = []
        for group_id in sorted(await self.known()):
            group = self.groups.get(group_id)
            state = group.state if group is not None else "Empty"
            if states is None or state in states:
                out.append(GroupListing(group_id, SHARE, state, SHARE))
        return out

    async def delete_group(self, group_id: str) -> bool:
        """DeleteGroups of a share group (False when `group_id` is none): it must have no members;
        what it read of every topic (its subscriptions), its configs and its lag history are gone."""
        if group_id not in await self.known():
            return False
        await self.delete_offsets(group_id, list(await self.start_offsets(group_id, None)))
        self.groups.pop(group_id, None)
        self._configs.pop(group_id, None)
        self.stats.pop(group_id, None)
        await self.store.configs(group_id).alter(lambda _: {})
        await self.store.remember(group_id, present=False)
        await self._lag_history.forget(group_id)
        return True

    # -- offsets (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets) -----

    async def start_offsets(self, group_id: str, topics: Mapping[str, list[int]] | None) -> dict[str, dict[int, int]]:
        """Per topic the group reads (or of `topics`), each partition's start offset: the cursor of
        its subscription, below which every record is acknowledged or archived; -1 where it has none.
        Without `topics`, only the partitions the group has state for, as Kafka's
        GroupCoordinatorService.describeShareGroupAllOffsets lists the group's initialized partitions
        alone (a partition added to the topic later has none until the group reads it)."""
        names = list(topics) if topics is not None else [t.name for t in await self.log.list_topics()]
        out: dict[str, dict[int, int]] = {}
        for topic in names:
            try:
                partitions = (await self.log.topic(topic, create=False)).partitions
            except TopicNotFound:
                continue
            cursors = (await self.subscriptions.store.positions(topic, range(partitions))).get(group_id)
            if cursors is None and topics is None:
                continue
            if topics is None:
                wanted: Iterable[int] = sorted(cursors or {})
            else:
                wanted = topics[topic] or range(partitions)
            out[topic] = {p: (cursors or {}).get(p, -1) for p in wanted}
        return out

    def _check_empty(self, group_id: str, topics: Iterable[str]) -> None:
        group = self.groups.get(group_id)
        if (group is not None and group.members) or any(self.subscriptions.active(t, group_id) for t in topics):
            raise GroupError(GroupErrorKind.NON_EMPTY_GROUP, f"share group {group_id} has members")

    async def alter_offsets(self, group_id: str, offsets: Mapping[str, Mapping[int, int]]) -> None:
        """Move the group's start offsets (its subscriptions' cursors, made if need be); the group
        must have no members."""
        self._check_empty(group_id, offsets)
        for topic, targets in offsets.items():
            info = await self.log.topic(topic, create=False)
            await self.subscriptions.store.open(topic, range(info.partitions), group_id, initial="earliest",
                                                mode=Mode.SHARED.value)
            await self.subscriptions.store.seek(topic, group_id, dict(targets))
        await self.store.remember(group_id)

    async def delete_offsets(self, group_id: str, topics: Iterable[str]) -> None:
        """Forget what the group has read of these topics (their subscriptions); it must have no members."""
        topics = list(topics)
        self._check_empty(group_id, topics)
        for topic in topics:
            info = await self.log.topic(topic, create=False)
            await self.subscriptions.store.delete(topic, range(info.partitions), group_id)

    # -- fetch and acknowledge -------------------------------------------------------------------

    def _group(self, group_id: str) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        return group

    async def fetch(
        self, group_id: str, member_id: str, session_epoch: int, add: Iterable[TopicPartition],
        forget: Iterable[TopicPartition], acks: Mapping[TopicPartition, list[AckBatch]], *,
        max_records: int, max_bytes: int, max_wait: float, topic_ids: Mapping[str, str] | None = None,
    ) -> ShareFetched:
        """A ShareFetch: the session moved on, the acknowledgements applied, then records acquired
        (waiting up to `max_wait` for some); no records when the request closes the session, only
        the outcome of its acknowledgements. `topic_ids`: the ids the request named its topics by;
        one the member's subscription does not know is a topic created again, read afresh at once."""
        group = self._group(group_id)
        session = group.session(member_id, session_epoch, add, forget)
        out = ShareFetched(acknowledged=set(acks), opened=session if session_epoch == JOIN_EPOCH else None)
        if acks:
            out.ack_errors = await self.acknowledge(group_id, member_id, acks)
        if session is None:
            await self._drop(group_id, member_id)
            return out
        member = self._members.get((group_id, member_id))
        if member is None:
            member = self._members[(group_id, member_id)] = _Member(self, group_id, member_id)
            self._start_reaper()
        member.fetching += 1
        try:
            for topic, consumer in member.consumers.items():
                sub = consumer.subscription
                if sub is not None and (topic_ids or {}).get(topic, sub.topic_id) != sub.topic_id:
                    await self.subscriptions.refresh(sub)
            member.ids.update(topic_ids or {})
            self._drop_stale(member, session, out)
            return await self._fetch(member, session, out, max_records=max_records, max_bytes=max_bytes,
                                     max_wait=max_wait)
        finally:
            member.fetching -= 1
            member.seen = now_ms()

    @staticmethod
    def _drop_stale(member: _Member, session: ShareSession, out: ShareFetched) -> None:
        """A session's partitions of a topic created again since the session named it leave the
        session, answered by their old id (UNKNOWN_TOPIC_ID) and acquiring nothing, as Kafka's
        sessions hold topic ids: the client looks the topic up again and adds it by its new id.
        Records of the new topic answered under an id the client does not know were dropped by it,
        and reached the application only after their locks ran out, as second deliveries."""
        stale = {t: member.ids[t] for t, c in member.consumers.items() if c.subscription is not None
                 and c.subscription.topic_id and member.ids.get(t, c.subscription.topic_id) != c.subscription.topic_id}
        gone = {tp for tp in session.partitions if tp[0] in stale}
        session.partitions -= gone
        out.stale = {tp: stale[tp[0]] for tp in gone}

    async def _fetch(self, member: _Member, session: ShareSession, out: ShareFetched, *, max_records: int,
                     max_bytes: int, max_wait: float) -> ShareFetched:
        """The member takes the partitions of its session this gateway leads, then records of them."""
        # every partition of the session another gateway leads, as Kafka answers for a session's
        # partitions its broker does not lead: the client asks Metadata again and moves it there
        out.elsewhere = {(t, p) for t, p in session.partitions if not self.leads(t, p)}
        mine: dict[str, frozenset[int]] = {}
        for t, p in session.partitions:
            mine[t] = mine.get(t, frozenset()) | ({p} if self.leads(t, p) else set())
        topics = set(mine)
        for topic in topics - set(member.consumers):
            await self._attach(member, topic, mine[topic])
        # a topic or partition the session forgot is fetched no more, but what the member acquired
        # of it stays its own until acknowledged, released or expired, as in Kafka, where the
        # records a member acquired outlive its session's partitions (its consumer leaves with it)
        for topic, consumer in member.consumers.items():
            if consumer.subscription is not None:
                member.give_back(topic, mine.get(topic, frozenset()))
                consumer.subscription.take_partitions(consumer, mine.get(topic, frozenset()))
        # Kafka 4.4 answers MaxBytes 0 at once with no partitions, no error, nothing acquired (as
        # MaxRecords 0): librdkafka's fetch.max.bytes=0 test expects no records
        if max_records <= 0 or max_bytes <= 0 or not topics:
            return out
        fetched = len(session.partitions) - len(out.elsewhere)
        taken = member.take(max_records, max_bytes, fetched)
        if not taken and max_wait > 0 and not out.elsewhere:
            member.arrived.clear()
            for consumer in member.consumers.values():
                if consumer.subscription is not None:
                    consumer.permits = 0
                    self.subscriptions.flow(consumer, max_records)
            began = time.perf_counter()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(member.arrived.wait(), max_wait)
            out.waited = time.perf_counter() - began
            for consumer in member.consumers.values():
                consumer.permits = 0
            taken = member.take(max_records, max_bytes, fetched)
        for topic in member.consumers:  # what the response has no room for
            member.give_back(topic, frozenset())
        out.records = _acquired((t, d) for t, d in taken if (t, d.partition) in session.partitions)
        return out

    async def _attach(self, member: _Member, topic: str, partitions: frozenset[int]) -> None:
        """The member becomes a consumer of the topic's subscription of the group's name."""
        cfg = self._configs.get(member.group_id) or await self.configs(member.group_id)
        reset = self.value(cfg, AUTO_OFFSET_RESET)
        seek_to: int | None = None
        if reset.startswith("by_duration:"):
            existing = await self.subscriptions.store.positions(topic, range((await self.log.topic(topic)).partitions))
            if member.group_id not in existing:
                seek_to = now_ms() - (duration_ms(reset.removeprefix("by_duration:")) or 0)
            reset = "earliest"
        consumer = await self.subscriptions.subscribe(
            topic, member.group_id, member, mode=Mode.SHARED, initial_position=reset,
            consumer_name=member.member_id, ack_timeout=int(self.value(cfg, LOCK_DURATION)) / 1000,
            split=True, partitions=partitions,
        )
        member.consumers[topic] = consumer
        member.topics[consumer.id] = topic
        sub = consumer.subscription
        assert sub is not None
        self._configure(sub, cfg)
        stats = self.stats.setdefault(member.group_id, Stats())

        async def archived(d: Delivery) -> None:
            stats.archived += len(d.offsets)
            await self._dead_letter(member.group_id, topic, d, sorted(d.offsets), "delivery-limit", d.redelivery_count)

        sub.on_archive = archived
        if seek_to is not None:
            await self.subscriptions.seek_time(consumer, seek_to)

    async def acknowledge(
        self, group_id: str, member_id: str, acks: Mapping[TopicPartition, list[AckBatch]],
        session_epoch: int | None = None,
    ) -> dict[TopicPartition, ShareErrorKind]:
        """Apply acknowledgements per partition; the partitions refused (nothing of theirs applied).
        With `session_epoch` (a ShareAcknowledge), the session is checked and moved on first."""
        if session_epoch is not None:
            self._group(group_id).close_session(member_id, session_epoch)
        member = self._members.get((group_id, member_id))
        if member is not None:
            member.seen = now_ms()
        errors: dict[TopicPartition, ShareErrorKind] = {}
        by_topic: dict[str, dict[int, list[AckBatch]]] = {}
        for (topic, p), batches in acks.items():
            by_topic.setdefault(topic, {})[p] = batches
        for topic, parts in by_topic.items():
            consumer = member.consumers.get(topic) if member is not None else None
            sub = consumer.subscription if consumer is not None else None
            if consumer is None or sub is None:
                errors.update({(topic, p): ShareErrorKind.INVALID_RECORD_STATE for p in parts})
                continue
            done: dict[int, list[int]] = {}
            release: dict[int, list[int]] = {}
            renew: dict[int, list[int]] = {}
            rejected = 0
            rejects: dict[int, list[int]] = {}
            for p, batches in parts.items():
                sorted_out = _sort(batches)
                if sorted_out is None or not 0 <= p < sub.partitions or not all(
                    (d := sub.outstanding[p].get(o)) is not None and d.consumer is consumer
                    for t, offs in sorted_out.items() if t != AckType.GAP for o in offs
                ):
                    errors[(topic, p)] = ShareErrorKind.INVALID_RECORD_STATE
                    continue
                held = sub.outstanding[p]
                gaps = [o for o in sorted_out.get(AckType.GAP, []) if (d := held.get(o)) is not None
                        and d.consumer is consumer]
                done[p] = sorted_out.get(AckType.ACCEPT, []) + sorted_out.get(AckType.REJECT, []) + gaps
                rejected += len(sorted_out.get(AckType.REJECT, []))
                if sorted_out.get(AckType.REJECT):
                    rejects[p] = sorted_out[AckType.REJECT]
                if AckType.RELEASE in sorted_out:
                    release[p] = sorted_out[AckType.RELEASE]
                if AckType.RENEW in sorted_out:
                    renew[p] = sorted_out[AckType.RENEW]
            for p, offs in rejects.items():
                for d, which in _by_delivery(sub.outstanding[p], offs):
                    await self._dead_letter(group_id, topic, d, which, "rejected", d.redelivery_count + 1)
            if any(done.values()):
                await sub.acknowledge({p: o for p, o in done.items() if o}, {})
            delay = int(self.value(self._configs.get(group_id, {}), RELEASE_DELAY)) / 1000
            if release and delay > 0:  # held a while longer, then released as an expired lock is
                sub.renew(consumer, release, timeout=delay)
            elif release:
                sub.negative_acknowledge(release)
                await sub.archive_over_limit()
            if renew:
                sub.renew(consumer, renew)
            if rejected:
                self.stats.setdefault(group_id, Stats()).rejected += rejected
        if session_epoch == CLOSE_SESSION_EPOCH:
            await self._drop(group_id, member_id)  # the session's last acknowledgements: release the rest
        return errors

    async def _dead_letter(self, group_id: str, topic: str, d: Delivery, offsets: list[int], reason: str,
                           deliveries: int) -> None:
        """Copy these records of a delivery to the group's dead-letter topic, if it has one, each with
        headers saying why, how often it was delivered and where it came from; before the
        acknowledgement that archives them, exactly once (`gateway.domain.dead_letter`)."""
        dlq = self.value(self._configs.get(group_id, {}), DEAD_LETTER_TOPIC)
        if not dlq:
            return
        why = [("share.dlq.reason", reason.encode()), ("share.dlq.delivery.count", str(deliveries).encode()),
               ("share.dlq.group", group_id.encode()), ("share.dlq.topic", topic.encode()),
               ("share.dlq.partition", str(d.partition).encode())]
        written = await self.letters.dead_letter(
            dlq, group_id, topic, d, offsets, lambda r: [*r.headers, *why, ("share.dlq.offset", str(r.offset).encode())])
        self.stats.setdefault(group_id, Stats()).dead_lettered += written

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for group_id, member_id in list(self._members):
            with contextlib.suppress(Exception):
                await self._drop(group_id, member_id)


def _by_delivery(held: Mapping[int, Delivery], offsets: list[int]) -> list[tuple[Delivery, list[int]]]:
    """The offsets grouped by the delivery holding each."""
    out: dict[int, tuple[Delivery, list[int]]] = {}
    for o in offsets:
        d = held.get(o)
        if d is not None:
            out.setdefault(id(d), (d, []))[1].append(o)
    return list(out.values())


_ACK_TYPES = {int(t): t for t in AckType}


def _sort(batches: list[AckBatch]) -> dict[AckType, list[int]] | None:
    """Offsets by acknowledge type; None when a batch is malformed (Kafka's INVALID_REQUEST is
    answered per partition as INVALID_RECORD_STATE here: nothing of it is applied either way)."""
    out: dict[AckType, list[int]] = {}
    for first, last, types in batches:
        n = last - first + 1
        if n <= 0 or not types or (len(types) != 1 and len(types) != n):
            return None
        kinds = [_ACK_TYPES[t] for t in types if t in _ACK_TYPES]
        if len(kinds) != len(types):
            return None
        if len(kinds) == 1:  # one type for the whole range: the usual case, taken whole
            out.setdefault(kinds[0], []).extend(range(first, last + 1))
            continue
        for i, kind in enumerate(kinds):
            out.setdefault(kind, []).append(first + i)
    return out


def _acquired(taken: Iterable[tuple[str, Delivery]]) -> dict[TopicPartition, list[Acquired]]:
    """Per partition, the stored batches in offset order, each once, with its acquired ranges."""
    by_entry: dict[TopicPartition, dict[int, Acquired]] = {}
    for topic, d in taken:
        batches = by_entry.setdefault((topic, d.partition), {})
        acquired = batches.get(d.entry.base_offset)
        if acquired is None:
            acquired = batches[d.entry.base_offset] = Acquired(d.entry, [])
        count = d.redelivery_count + 1
        offsets = sorted(d.offsets)
        start = prev = offsets[0]
        for o in offsets[1:]:
            if o != prev + 1:
                acquired.ranges.append((start, prev, count))
                start = o
            prev = o
        acquired.ranges.append((start, prev, count))
    out: dict[TopicPartition, list[Acquired]] = {}
    for tp, batches in by_entry.items():
        out[tp] = [batches[base] for base in sorted(batches)]
        for acquired in out[tp]:
            acquired.ranges.sort()
    return out
