"""Topics and their partition logs: the semantics both faces share.

Batches arrive as RecordBatch v2 bytes; only their 61-byte headers are read here (CRC, counts,
producer fields), never the records.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.clock import now_ms
from gateway.domain.memory import MemoryBudget
from gateway.domain.readahead import ReadAhead
from gateway.domain.record_checks import check_records
from gateway.domain.remote import RemoteLog
from gateway.domain.roles import NO_LEASE, Lease
from gateway.domain.topic_configs import (
    BROKER_DEFAULTS,
    REPLICATION_THROTTLES,
    TOPIC_CONFIGS,
    Change,
    Op,
    apply,
    check_remote,
    check_together,
    resolve,
    validate_topic_config,
)
from gateway.errors import (
    CorruptMessage,
    InvalidPartitions,
    InvalidRequest,
    MessageTooLarge,
    OffsetOutOfRange,
    PartitionNotFound,
    StorageFull,
    StorageRefused,
    StorageUnavailable,
    TopicExists,
    TopicNotFound,
)
from gateway.formats.records import (
    BatchHeader,
    iter_records,
    parse_header,
    split_batches,
    stamp_log_append_time,
)
from gateway.store import Store
from gateway.store.log import Append, AppendRequest, Entry, PartitionBounds, Slice, TopicInfo
from gateway.store.log import PartitionProducer as PartitionProducer  # the faces' DescribeProducers
from gateway.store.objects import ObjectStore
from gateway.store.replication import PrimaryStatus

log = logging.getLogger(__name__)

FIRST_READ_ENTRIES = 8  # batches a sequential reader's first read asks for, before their size is known
DIRECT_READ_BATCH = 32 * 1024  # average batch size from which reads skip redis-py's copies
RANGE_ENTRIES = 128  # batches looked at per range read at most; markers and aborted ones count
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PARTITIONS = 10_000  # per topic: every Metadata answer lists them all
CLUSTER_CONFIG_TTL = 1.0  # seconds a gateway trusts the cluster-wide defaults it read before reading again


def _sent(sl: Slice, max_bytes: int, read_committed: bool) -> int:
    """How many of a slice's batches a reader limited to `max_bytes` takes: the first always, as a
    Kafka fetch does, and none at or past the last stable offset for read_committed."""
    limit = sl.stable if read_committed else sl.high_watermark
    taken = size = 0
    for e in sl.entries:
        if e.base_offset >= limit or (taken and size + len(e.batch) > max_bytes):
            break
        taken += 1
        size += len(e.batch)
    return taken


def effective_config(info: TopicInfo, cluster: dict[str, str] | None = None) -> dict[str, str]:
    """Every config of the topic: its own, else the cluster-wide default, else Kafka's."""
    return resolve(info.config, cluster or {})


def validate_topic_name(name: str) -> None:
    if not _LEGAL_TOPIC.match(name) or name in (".", ".."):
        raise InvalidRequest(f"illegal topic name {name!r}: use 1-249 of [a-zA-Z0-9._-]")


class Notifier:
    """Wakes readers of a partition when it grows, so long polls need no polling: appends in this
    process notify directly; those of other gateways through `LogService.arm_wakeups`."""

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = defaultdict(set)

    def notify(self, topic: str, partition: int) -> None:
        for fut in self._waiters.pop((topic, partition), ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, parts: Iterable[tuple[str, int]], timeout: float) -> bool:
        """True when any of `parts` grew before the timeout."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watched = list(parts)
        for p in watched:
            self._waiters[p].add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for p in watched:
                waiters = self._waiters.get(p)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[p]


@dataclass(frozen=True)
class CommittedRange:
    """Batches of an offset range a read-committed reader may see, and where to read on."""

    entries: list[Entry]
    next_offset: int
    last_stable_offset: int


@dataclass(frozen=True)
class Produced:
    """One batch's fate: its base offset, or the error that refused it."""

    topic: str
    partition: int
    result: Append | Exception
    log_append_time: int = -1  # the time the batches were stamped with, on LogAppendTime topics


@dataclass(frozen=True)
class BrokerDefaults:
    """The dynamic broker configs as last read: cluster-wide, this gateway's own, and both merged
    (its own first), the defaults its topics resolve with."""

    read_at: float
    cluster: dict[str, str]
    own: dict[str, str]
    effective: dict[str, str]


_NOT_READ = BrokerDefaults(-CLUSTER_CONFIG_TTL, {}, {}, {})


def check_partitions(n: int) -> None:
    """A topic's partition count; Kafka's INVALID_PARTITIONS otherwise (never a quiet default)."""
    if n < 1:
        raise InvalidPartitions(f"a topic has at least 1 partition, not {n}")
    if n > MAX_PARTITIONS:
        raise InvalidPartitions(f"a topic has at most {MAX_PARTITIONS} partitions, not {n}")


class LogService:
    def __init__(
        self, store: Store, *, auto_create: bool = True, default_partitions: int = 1,
        peers: Callable[[], bool] = lambda: False, node_id: int = 0, memory: MemoryBudget | None = None,
        objects: ObjectStore | None = None,
    ) -> None:
        self.store = store
        # tiered storage (Kafka's remote.log.storage.system.enable): on when the gateway has an object store
        self.remote = RemoteLog(store, objects) if objects is not None else None
        self.node_id = node_id  # whose per-broker configs apply here
        self.memory = memory or MemoryBudget(store)  # never sampled: admits every produce
        self.auto_create = auto_create
        self.default_partitions = default_partitions
        self.notifier = Notifier()
        self.wakeups = store.open_wakeups(self.notifier.notify)
        self.peers = peers  # whether other gateways write too (the registry's)
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[str, TopicInfo] = {}  # topics by id, as last seen: an id names one incarnation
        self._avg_batch: dict[tuple[str, int], int] = {}  # recent stored batch size per partition
        self._local_start: dict[tuple[str, int], int] = {}  # tiered partitions' local log start, as last read
        self._ahead = ReadAhead(self._read)
        self._defaults = _NOT_READ
        self._resolved: dict[str, tuple[TopicInfo, dict[str, str], dict[str, str]]] = {}

    # -- topics ---------------------------------------------------------------------------------

    async def create_topic(
        self, name: str, partitions: int | None = None, config: dict[str, str | None] | None = None
    ) -> TopicInfo:
        """`partitions` None: the gateway's default partitions."""
        validate_topic_name(name)
        n = self.default_partitions if partitions is None else partitions
        check_partitions(n)
        info = TopicInfo(name, n, await self.checked_config(config or {}), now_ms())
        info = await self.store.log.create_topic(info)
        self._remember(info)
        await self.warn_unmet_min_insync([info])
        return info

    async def checked_config(self, config: dict[str, str | None]) -> dict[str, str]:
        """A new topic's configs as kept, each checked, and together as Kafka's LogConfig checks them
        (remote storage only with this gateway's object store: Kafka's broker-level switch)."""
        kept = validate_topic_config(config)
        check_remote(resolve(kept, await self.cluster_config()), system_enabled=self.remote is not None)
        return kept

    async def topic(self, name: str, *, create: bool | None = None) -> TopicInfo:
        """The topic's description; created on first use when allowed."""
        info = await self.store.log.get_topic(name)
        if info is None:
            if not (self.auto_create if create is None else create):
                raise TopicNotFound(f"topic {name!r} does not exist")
            try:
                info = await self.create_topic(name)
            except TopicExists as exc:
                info = await self.store.log.get_topic(name)
                if info is None:
                    raise TopicNotFound(f"topic {name!r} does not exist") from exc
        self._remember(info)
        return info

    async def known_topic(self, name: str, *, partition: int = 0) -> TopicInfo:
        """The topic's description as last seen here when it has `partition` (a topic only grows),
        read from Redis otherwise: for checks on a hot path, as Kafka's metadata cache serves them."""
        info = self._topics.get(name)
        if info is not None and partition < info.partitions:
            return info
        return await self.topic(name, create=False)

    def _remember(self, info: TopicInfo) -> None:
        old = self._topics.get(info.name)
        if old is not None and old.topic_id != info.topic_id:
            self._by_id.pop(old.topic_id, None)  # an incarnation gone: its id names nothing now
        self._topics[info.name] = info
        if info.topic_id:
            self._by_id[info.topic_id] = info

    async def list_topics(self) -> list[TopicInfo]:
        topics = await self.store.log.list_topics()
        for info in topics:
            self._remember(info)
        return topics

    async def topic_by_id(self, topic_id: str, *, fresh: bool = False) -> TopicInfo | None:
        """The topic (incarnation) this id names, None when it names none any more or never did.
        What was seen before is believed unless `fresh`: readers check each partition they read is
        of the incarnation (`Slice.generation`), and come back with `fresh` when it is not."""
        info = None if fresh else self._by_id.get(topic_id)
        if info is None:
            self._by_id.pop(topic_id, None)
            info = await self.store.log.topic_by_id(topic_id)
            if info is not None:
                self._remember(info)
        return info

    async def delete_topic(self, name: str, topic_id: str = "") -> None:
        """Delete the topic; with `topic_id`, only while the name is still that incarnation's."""
        info = await self.store.log.get_topic(name) if self.remote is not None else None
        await self.store.log.delete_topic(name, topic_id)
        if self.remote is not None and info is not None and (not topic_id or topic_id == info.topic_id):
            try:
                await self.remote.delete_topic(name, info.topic_id)
            except StorageUnavailable as exc:
                log.warning("topic %s deleted; its tiered segments stay for the tiering role's sweep: %s", name, exc)
        # its reassignments go with it, so that a topic made again under the name starts unplaced
        placed = await self.store.registry.placements()
        await self.store.registry.place([(k, None, None) for k in placed if k[0] == name], expect=False)
        self._resolved.pop(name, None)
        forgotten = self._topics.pop(name, None)
        if forgotten is not None:
            self._by_id.pop(forgotten.topic_id, None)
        self._by_id.pop(topic_id, None)
        self._ahead.forget(name)

    async def alter_config(
        self, name: str, changes: dict[str, str | None] | list[Change], *, incremental: bool = True,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Apply `changes` (a dict: set, or with None reset); non-incremental replaces the whole set
        (AlterConfigs). Applied to the topic as stored, in one step: a racing change is not lost.
        `validate_only` checks the changes and keeps nothing."""
        ops = _changes(changes)
        cluster = await self.cluster_config()

        def changed(info: TopicInfo) -> dict[str, str]:
            new = apply(info.config, ops, TOPIC_CONFIGS, incremental=incremental)
            check_together(resolve(new, {}))
            was = resolve(info.config, cluster).get("remote.storage.enable") == "true"
            check_remote(resolve(new, cluster), system_enabled=self.remote is not None, was_enabled=was)
            return new

        if validate_only:
            info = await self.topic(name, create=False)
            changed(info)
            return info
        new = await self.store.log.alter_config(name, changed)
        self._remember(new)
        await self.warn_unmet_min_insync([new])
        return new

    async def broker_defaults(self, *, fresh: bool = False) -> BrokerDefaults:
        """The broker configs an admin set, cluster-wide and for this gateway alone (shared by every
        gateway through Redis); read again once `CLUSTER_CONFIG_TTL` has passed, or at once when `fresh`."""
        now = time.monotonic()
        if fresh or now - self._defaults.read_at >= CLUSTER_CONFIG_TTL:
            (_, cluster), (_, own) = await asyncio.gather(self.store.cluster_config.get(),
                                                          self.store.broker_config(self.node_id).get())
            self._defaults = BrokerDefaults(now, cluster, own, {**cluster, **own})
        return self._defaults

    async def cluster_config(self, *, fresh: bool = False) -> dict[str, str]:
        """The broker configs that topics resolve with on this gateway: its own over the cluster-wide
        ones, as a Kafka broker's per-broker dynamic configs override the cluster defaults."""
        return (await self.broker_defaults(fresh=fresh)).effective

    async def alter_cluster_config(
        self, changes: list[Change], *, incremental: bool = True, validate_only: bool = False, node: bool = False,
    ) -> dict[str, str]:
        """Change the cluster-wide defaults (broker names: log.retention.ms, ...), or with `node`
        this gateway's own (Kafka's per-broker dynamic configs), as one step; only those Kafka
        changes at run time (`BROKER_DEFAULTS`), others are refused as Kafka does."""

        def static(name: str) -> Exception:
            # DynamicBrokerConfig.validateConfigs names them as a Java set prints: "[name]"
            return InvalidRequest(f"Cannot update these configs dynamically: [{name}]")

        kept = [c for c in changes if not (c.op is Op.DELETE and c.name in REPLICATION_THROTTLES)]

        def changed(current: dict[str, str]) -> dict[str, str]:
            return apply(current, kept, BROKER_DEFAULTS, incremental=incremental, unknown=static)

        store = self.store.broker_config(self.node_id) if node else self.store.cluster_config
        if validate_only:
            return changed((await store.get())[1])
        new = await store.alter(changed)
        self._defaults = _NOT_READ
        return new

    async def add_partitions(self, name: str, total: int) -> TopicInfo:
        """Checked against the topic as stored when it grows: of two racing, one may be refused."""

        def checked(info: TopicInfo) -> int:
            if total <= info.partitions:
                raise InvalidPartitions(f"topic {name!r} has {info.partitions} partitions; the count only grows")
            check_partitions(total)
            return total

        grown = await self.store.log.add_partitions(name, checked)
        self._remember(grown)
        return grown

    async def delayed_topic(self, topic: str) -> bool:
        """Whether the topic honours delay headers; from the cached description, so the produce path
        of every other topic pays nothing."""
        info = self._topics.get(topic)
        if info is None:
            try:
                info = await self.topic(topic, create=False)
            except TopicNotFound:
                return False
        return info.config.get("delayed.delivery.enable") == "true"

    async def topic_config(self, topic: str) -> dict[str, str]:
        """Every config of an existing topic as it applies now, from the cached description (resolved
        again only when it or the cluster-wide defaults changed: the produce path asks each time)."""
        info = self._topics.get(topic) or await self.topic(topic, create=False)
        cluster = await self.cluster_config()
        seen = self._resolved.get(topic)
        if seen is not None and seen[0] is info and seen[1] is cluster:
            return seen[2]
        cfg = effective_config(info, cluster)
        self._resolved[topic] = (info, cluster, cfg)
        return cfg

    # -- produce --------------------------------------------------------------------------------

    async def append(
        self, items: list[tuple[str, int, bytes | memoryview]], *, sent: Callable[[], None] | None = None,
        acks: int = 1, timeout_ms: int = 30_000, control: bool = False, verify_txn: bool = False,
    ) -> list[Produced]:
        """Append record blobs (one or more batches each) to partitions in one round trip.

        Each blob is checked (magic, length, CRC, size limit) before anything is written, so a bad
        batch is refused alone and never half-stored. On a LogAppendTime topic each batch is stamped
        with the time of its append (the one case where a batch header changes here); other topics'
        batches are stored untouched. `sent`: see `LogStore.append`. With `acks` -1 (all), a topic's
        `min.insync.replicas` counts Redis itself and its replicas, as Kafka counts the leader and
        its followers: the batches are acknowledged once Redis's WAIT says N-1 replicas hold them,
        within most of `timeout_ms` (the answer must reach the client before it gives up).
        A produce is refused (`StorageFull`, nothing written) while its Redis primary is at its memory
        high-water mark (`MemoryBudget`); `control` appends (a share group's dead letters, moved on
        a consumer's acknowledgement) use the room above it. `verify_txn`: a transactional batch
        opens no transaction its coordinator is not adding the partition to (`TxnStore.expect`), and
        is refused with InvalidTxnState (Produce before v12, KIP-890 part 1).
        """
        requests: list[AppendRequest] = []
        owners: list[int] = []  # index into `items` of each request
        refused: dict[int, Exception] = {}
        stamped: dict[int, int] = {}  # append time of the blobs of LogAppendTime topics
        for i, (topic, partition, blob) in enumerate(items):
            try:
                batches = split_batches(blob)
                if not batches:
                    raise CorruptMessage("no record batch in the request")
                cfg = await self.topic_config(topic)
                limit = int(cfg["max.message.bytes"])
                for h, _ in batches:
                    if h.size > limit:
                        raise MessageTooLarge(f"batch of {h.size} bytes over max.message.bytes {limit}")
                    if h.record_count != h.last_offset_delta + 1:
                        raise CorruptMessage("record count does not match the last offset delta")
                    if h.control:  # markers are the coordinator's: a forged one would end transactions
                        raise InvalidRequest("clients cannot write control batches")
                check_records(topic, partition, batches, cfg, now_ms())
                replicas = int(cfg["min.insync.replicas"]) - 1 if acks == -1 else 0
                if cfg["message.timestamp.type"] == "LogAppendTime":
                    stamped[i] = now_ms()
                    batches = [stamp_log_append_time(h, view, stamped[i]) for h, view in batches]
                if not control:
                    self.memory.admit(topic, partition, len(blob))
            except (StorageFull, StorageRefused) as exc:  # the memory budget's refusal: nothing sent
                refused[i] = exc
                for h, view in batches:  # the batches pipelined behind are refused alike (LogStore.hold)
                    self.store.log.hold(self._request(topic, partition, h, view, 0), exc)
                continue
            except Exception as exc:
                refused[i] = exc
                continue
            for h, view in batches:
                requests.append(self._request(topic, partition, h, view, replicas, verify_txn))
                owners.append(i)
        outcome: dict[int, Append | Exception] = dict(refused)
        if requests:
            appended = await self.store.log.append(requests, sent=sent, timeout_ms=timeout_ms * 4 // 5)
            for i, req, res in zip(owners, requests, appended, strict=True):
                # several batches in one blob: the first batch's offset stands, unless one failed
                if i not in outcome or (isinstance(res, Exception) and not isinstance(outcome[i], Exception)):
                    outcome[i] = res
                if not isinstance(res, Exception):
                    self.notifier.notify(req.topic, req.partition)
                elif isinstance(res, StorageFull):  # Redis's own refusal, past maxmemory: look again now
                    self.memory.oom_seen()
        return [Produced(t, p, outcome[i], stamped.get(i, -1)) for i, (t, p, _) in enumerate(items)]

    @staticmethod
    def _request(topic: str, partition: int, h: BatchHeader, view: memoryview, replicas: int,
                 verify_txn: bool = False) -> AppendRequest:
        return AppendRequest(
            topic,
            partition,
            view,
            h.record_count,
            -1 if h.control else h.max_timestamp,  # entries' running max counts records only
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.transactional and not h.control,
            replicas,
            verify_txn,
        )

    # -- reads ----------------------------------------------------------------------------------

    async def arm_wakeups(self, parts: Iterable[tuple[str, int]]) -> bool:
        """Before readers wait on `parts`: have a write by another gateway wake them too. True when
        that took a change, and the readers must look at the logs again before they wait (a write
        just before it woke nobody); False when alone, or when it was so already."""
        if not self.peers():
            return False
        return await self.wakeups.arm(parts)

    async def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_entries: int = 64,
        *,
        read_committed: bool = False,
        max_bytes: int | None = None,
    ) -> Slice:
        """Batches from `offset` on. With `max_bytes` (sequential readers: Kafka fetches), asks
        Redis for about as many batches as fit, judged by the partition's recent batch sizes
        (reading 64 one-megabyte batches to send one would cost more than the fetch itself), and
        starts reading the next slice before this one is sent. A negative offset reads from 0: the
        slice's bounds then tell the reader it is out of range."""
        key = (topic, partition)
        offset = max(offset, 0)
        if max_bytes is None:
            return await self._read(topic, partition, offset, max_entries, read_committed)
        fitting = self._fitting(key, max_entries, max_bytes)
        early = self._ahead.take((topic, partition, offset, read_committed), fitting)
        sl = None
        if early is not None:
            try:
                sl = await early
            except Exception:  # read again below, where the error reaches the reader
                sl = None
        if sl is None:
            sl = await self._read(topic, partition, offset, fitting, read_committed)
        if sl.entries:
            size = sum(len(e.batch) for e in sl.entries) // len(sl.entries)
            self._avg_batch[key] = max(1, (self._avg_batch.get(key, size) + size) // 2)
        sent = _sent(sl, max_bytes, read_committed)
        following = sl.entries[sent - 1].next_offset if sent else None
        if following is not None and following < (sl.stable if read_committed else sl.high_watermark):
            # from where the reader asks next: the batches read that do not fit in `max_bytes` begin
            # the next slice, not a read of theirs wasted (sized by the average just updated)
            self._ahead.start((topic, partition, following, read_committed), self._fitting(key, max_entries, max_bytes),
                              held=sl, skip=sent)
        return sl

    def _fitting(self, key: tuple[str, int], max_entries: int, max_bytes: int) -> int:
        """About as many batches as fit in `max_bytes`, judged by the partition's recent batch sizes
        (a few while they are unknown)."""
        avg = self._avg_batch.get(key, 0)
        return max(1, min(max_entries, max_bytes // avg if avg else FIRST_READ_ENTRIES))

    async def _read(self, topic: str, partition: int, offset: int, max_entries: int, committed: bool) -> Slice:
        """Large batches are received in place (`store.resp`); many small ones parse faster through
        redis-py's C parser."""
        key = (topic, partition)
        direct = self._avg_batch.get(key, 0) >= DIRECT_READ_BATCH
        sl = await self.store.log.read(topic, partition, offset, max_entries, with_aborted=committed, direct=direct,
                                       below_local=offset < self._local_start.get(key, -1))
        if sl.local_start > sl.log_start:  # a tiered partition: the next read below it skips the stream
            self._local_start[key] = sl.local_start
        else:
            self._local_start.pop(key, None)
        if sl.log_start <= offset < sl.local_start and not sl.entries:
            if self.remote is None:
                raise StorageUnavailable(f"{topic}-{partition}: offset {offset} is in tiered storage, and this "
                                         "gateway has no --tier-store")
            info = await self.known_topic(topic, partition=partition)
            sl = await self.remote.read(topic, info.topic_id, partition, offset, max_entries, sl)
        return sl

    async def tier_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(local log start, highest offset in tiered storage or -1): ListOffsets' EARLIEST_LOCAL
        and LATEST_TIERED (KIP-405, KIP-1005)."""
        state = await self.store.tier.state(topic, partition)
        if state is None:
            raise TopicNotFound(f"{topic}-{partition} does not exist")
        highest = state.tiered_end - 1 if state.tiered_end > state.log_start else -1
        return state.local_start, highest

    async def _drop_segments(self, topic: str, partition: int, members: list[str]) -> None:
        """Delete the objects of segments a trim unlisted. They are out of the manifest already, so
        objects left (no object store here, or it is away) are orphans for the tiering role's sweep,
        and the trim stands."""
        if not members:
            return
        if self.remote is None:
            log.warning("%s-%d: %d tiered segments unlisted, their objects left for a gateway with a tier store",
                        topic, partition, len(members))
            return
        try:
            info = await self.known_topic(topic, partition=partition)
            await self.remote.delete(topic, info.topic_id, partition, members)
        except StorageUnavailable as exc:
            log.warning("%s-%d: %d tiered segments unlisted, their objects left for the tiering role's sweep: %s",
                        topic, partition, len(members), exc)

    async def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark)."""
        return await self.store.log.bounds(topic, partition)

    async def confirmed_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """`bounds`, read as a Fetch reads: confirmed by the replicas (see `LogStore.confirmed_bounds`)."""
        return await self.store.log.confirmed_bounds(topic, partition)

    async def bounds_many(self, parts: list[tuple[str, int]]) -> list[tuple[int, int] | None]:
        """(log start offset, high watermark) of each partition, None for one that does not exist;
        one round trip, for listings of every partition."""
        return await self.store.log.bounds_many(parts)

    async def producer_states(self, topic: str, partition: int) -> list[PartitionProducer]:
        """The producers a partition keeps sequences for, with their open transactions there."""
        return await self.store.log.producer_states(topic, partition)

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, by any gateway: the log's dedupe is keyed by it."""
        return await self.store.log.allocate_producer_id()

    # -- replication ----------------------------------------------------------------------------

    async def replication(self) -> list[PrimaryStatus]:
        """Each Redis primary's replicas, and how far behind each one is."""
        return await self.store.replication.primaries()

    async def warn_unmet_min_insync(self, topics: list[TopicInfo] | None = None) -> int:
        """Log a warning for each topic (of `topics`, else all) whose `min.insync.replicas` the Redis
        replicas online cannot meet: acks=all produces to it are refused until they can. Returns how
        many; Redis being away is no reason to warn, and warns of nothing."""
        short = 0
        try:
            for info in await self.list_topics() if topics is None else topics:
                need = int((await self.topic_config(info.name))["min.insync.replicas"]) - 1
                if need <= 0:
                    continue
                online = [await self.store.log.replicas_online(info.name, p) for p in range(info.partitions)]
                if min(online, default=need) < need:
                    short += 1
                    log.warning("topic %s: min.insync.replicas %d needs %d Redis replicas, but %d of its %d "
                                "partitions' primaries have fewer online (as few as %d): acks=all produces to "
                                "them are refused with NOT_ENOUGH_REPLICAS", info.name, need + 1, need,
                                sum(1 for n in online if n < need), info.partitions, min(online))
        except StorageUnavailable as exc:
            log.info("could not compare topics' min.insync.replicas with the Redis replicas online: %s", exc)
        return short

    async def ping(self) -> bool:
        """Whether the storage under the logs answers (a health check)."""
        return await self.store.ping()

    async def close(self) -> None:
        """Stop listening for other gateways' writes (before the store closes)."""
        await self.wakeups.close()

    async def partition_bounds(self, topic: str) -> list[PartitionBounds]:
        """Offsets of every partition of an existing topic, last stable ones included."""
        info = await self.topic(topic, create=False)
        return await self.store.log.stable_bounds(topic, info.partitions)

    async def read_range(self, topic: str, partition: int, start: int, end: int, max_bytes: int) -> CommittedRange:
        """A read-committed read of [start, end) (end -1: the last stable offset) that keeps no position:
        whole batches up to about `max_bytes` (the first always), markers and aborted batches left out."""
        sl = await self.read(topic, partition, start, RANGE_ENTRIES, read_committed=True, max_bytes=max_bytes)
        if not sl.log_start <= start <= sl.high_watermark:
            raise OffsetOutOfRange(
                f"{topic}-{partition}: offset {start} is outside [{sl.log_start}, {sl.high_watermark}]"
            )
        limit = sl.stable if end < 0 else min(end, sl.stable)
        entries: list[Entry] = []
        size, next_offset = 0, start
        for e in sl.entries:
            if e.base_offset >= limit or (entries and size + len(e.batch) > max_bytes):
                break
            next_offset = e.next_offset
            if not _hidden(e, sl):
                entries.append(e)
                size += len(e.batch)
        return CommittedRange(entries, next_offset, sl.stable)

    async def check_partition(self, topic: str, partition: int) -> TopicInfo:
        info = await self.topic(topic, create=False)
        if not 0 <= partition < info.partitions:
            raise PartitionNotFound(f"{topic} has no partition {partition}")
        return info

    async def offset_for_time(self, topic: str, partition: int, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `ts`, or None. Control records
        (transaction and watermark markers, stamped when written) are never the answer."""
        after = -1
        if self.remote is not None:
            local_start, highest = await self.tier_bounds(topic, partition)
            if highest >= 0:
                start, _ = await self.bounds(topic, partition)
                info = await self.known_topic(topic, partition=partition)
                found = await self.remote.offset_for_time(topic, info.topic_id, partition, ts, start)
                if found is not None:
                    return found
                after = local_start
        while True:
            start, entry = await self.store.log.entry_for_time(topic, partition, ts, after)
            if entry is None:
                return None
            for rec in iter_records(entry.batch, entry.base_offset):
                if rec.timestamp >= ts and rec.offset >= start:
                    return rec.offset, rec.timestamp
            after = entry.next_offset  # its late records are below the log start

    async def max_timestamp(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the partition's largest timestamp (ListOffsets'
        MAX_TIMESTAMP), or None when it holds no record (or retention removed that one)."""
        ts = await self.store.log.max_timestamp(topic, partition)
        return None if ts < 0 else await self.offset_for_time(topic, partition, ts)

    async def delete_records(self, topic: str, partition: int, before: int) -> int:
        """Move the log start to `before` (-1: the high watermark); returns the new log start."""
        trimmed = await self.store.log.trim(topic, partition, min_start=-2 if before == -1 else before)
        self._ahead.forget(topic)
        await self._drop_segments(topic, partition, trimmed.segments)
        return trimmed.log_start

    # -- retention ------------------------------------------------------------------------------

    async def enforce_retention(self, lease: Lease = NO_LEASE) -> int:
        """One pass over every partition; returns the number of entries removed. Under the retention
        role's `lease`: stops once the lease may have run out, and each trim carries its epoch."""
        await self.store.log.finish_deletes()  # those a gateway stopped half-way
        removed = 0
        cluster = await self.cluster_config(fresh=True)
        for info in await self.list_topics():
            cfg = effective_config(info, cluster)
            if "delete" not in cfg["cleanup.policy"].split(","):
                continue  # an empty policy keeps everything
            for p in range(info.partitions):
                if not lease.held():
                    return removed
                trimmed = await self.store.log.trim(
                    info.name,
                    p,
                    retention_ms=int(cfg["retention.ms"]),
                    retention_bytes=int(cfg["retention.bytes"]),
                    role_epoch=lease.epoch,
                )
                removed += trimmed.removed
                await self._drop_segments(info.name, p, trimmed.segments)
        return removed

    async def retention_pass(self, lease: Lease = NO_LEASE) -> None:
        n = await self.enforce_retention(lease)
        if n:
            log.info("retention removed %d batches", n)


def absent_offsets(e: Entry) -> set[int]:
    """The offsets a batch spans but holds no record for: those the log cleaner removed from it
    (it keeps a rewritten batch's span). Only a batch with fewer records than offsets is decoded."""
    if parse_header(e.batch, verify_crc=False).record_count == e.count:
        return set()
    return set(range(e.base_offset, e.next_offset)) - {r.offset for r in iter_records(e.batch, e.base_offset)}


def _hidden(e: Entry, sl: Slice) -> bool:
    """A transaction marker, or a batch of a transaction that aborted: what read-committed readers
    never see. Only the 61-byte header is read."""
    h = parse_header(e.batch, verify_crc=False)
    return h.control or aborted(sl, h, e.base_offset)


def committed_entries(sl: Slice) -> list[Entry]:
    """What a read-committed reader that filters on the gateway side may see of a slice: entries
    below the last stable offset, without markers or the batches of aborted transactions."""
    out = []
    for e in sl.entries:
        if e.base_offset >= sl.stable:
            break
        if not _hidden(e, sl):
            out.append(e)
    return out


def uncommitted_entries(sl: Slice) -> list[Entry]:
    """What a read-uncommitted reader that filters on the gateway side may see of a slice: entries
    below the high watermark, open and aborted transactions' batches included, without markers."""
    return [e for e in sl.entries
            if e.base_offset < sl.high_watermark and not parse_header(e.batch, verify_crc=False).control]


def aborted(sl: Slice, h: BatchHeader, base_offset: int) -> bool:
    """Whether a batch of a read-committed slice belongs to an aborted transaction."""
    return h.transactional and any(
        a.producer_id == h.producer_id and a.first_offset <= base_offset < a.marker_offset for a in sl.aborted
    )


def _changes(changes: dict[str, str | None] | list[Change]) -> list[Change]:
    """A dict of values (None: reset) as the operations it stands for."""
    if isinstance(changes, list):
        return changes
    return [Change(k, Op.SET if v is not None else Op.DELETE, v) for k, v in changes.items()]
