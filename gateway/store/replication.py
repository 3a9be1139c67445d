"""Redis's replicas: counted, waited for, and shown.

Redis replicates asynchronously: a write is on the primary when its command returns and on a replica
some time later. `WAIT n timeout` on the connection that wrote returns once n replicas acknowledge
everything that connection wrote (or when the timeout passes, with how many did). Redis replicates one
ordered stream per primary, so a replica that holds a write also holds every write the primary ran
before it, from any connection.

Two kinds of writes wait here, on the same connections (one per primary, opened beside the redis-py
client), so that a WAIT in flight is shared by every write sent while it runs (`Waits`):
- appends of `acks=all` producers on topics with `min.insync.replicas` above 1 (`LogStore.append`);
- the state changes a client is told are done (`DURABLE`, run through `DurableScripts`).

Both wait for every replica in the primary's in-sync set (`Replication.in_sync`: online, heard from and
caught up within `--replica-lag-max-ms`), as Kafka's acks=all waits for its whole ISR, and are refused while the
set is smaller than their floor: a topic's `min.insync.replicas` less the primary for appends, and for
state changes `state_replicas`, the gateway's `--state-min-insync-replicas` less the
primary (Kafka keeps its offsets and transaction state in topics whose `min.insync.replicas` is 2, out
of 3 replicas), but never more replicas than the primary has had since the gateway started (read
at start, `learn`; a primary promoted in a failover is owed its predecessor's): a
single Redis waits for none and pays nothing, while a primary whose replicas went away answers
NotEnoughReplicas (nothing run) or, when WAIT times out, NotEnoughReplicasAfterAppend (run, maybe not
replicated). Both are retriable; the coordinators' faces answer them as Kafka's do (the group and
transaction coordinators say COORDINATOR_NOT_AVAILABLE), and each durable state change is safe to
repeat.

What does not wait, and why:
- writes a later waited-for write covers: the native face's transaction begin, its partitions and
  what its end settles (txn-new, txn-add, fence-begin) and acks within a transaction (sub-txn-ack)
  come before its end, which waits; a WAIT for the end holds every earlier write. Kafka's
  AddPartitionsToTxn and AddOffsetsToTxn (txn-join) do wait, as Kafka's coordinator writes them to
  its replicated log before answering: a lost one leaves a transaction the producer believes open
  unknown to the coordinator, whose EndTxn(abort) Kafka answers INVALID_TXN_STATE, which librdkafka
  takes as fatal (soak sentinel:929668516). The end itself (txn-finish) is repeatable: a lost
  finish leaves the transaction decided, and it is rolled forward again.
- group membership (group-save, cgroup-save): losing it costs a rebalance, which members recover from
  by rejoining (Kafka's UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH), and it changes on every join.
- leases (group, subscription, role, node): they expire within seconds and are renewed; a failover
  looks like an expiry to their holders.
- topic configs and deletion, users, ACLs and dynamic configs: administrative, rare, and covered by
  any later waited-for write; Kafka keeps them in its controller quorum, whose errors the admin APIs
  do not share with the coordinators'. A topic's creation and growth do wait (above): records follow
  them at once, and a topic lost with its partitions would lose what was produced to it.
- produces of delayed messages and watermark marks (delay-add, delay-hold, watermark-append): they
  follow the produce path, today answered at acks=1; what they lead to waits (their move to the log,
  their transaction's end).
- repeatable internal steps (partition init/drop/purge, retention trims, watermark snapshots, hints).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.exceptions import RedisClusterException, ResponseError

from gateway.errors import NotEnoughReplicas, NotEnoughReplicasAfterAppend, StorageUnavailable
from gateway.store import keys
from gateway.store.connection import (
    UNAVAILABLE,
    RedisClient,
    SentinelRedis,
    storage_error,
    storage_errors,
    storage_full,
)
from gateway.store.promotion import Promotion
from gateway.store.resp import DirectConnections, RespConnection, RespError
from gateway.store.scripts import Scripts, ScriptSpec

T = TypeVar("T")
_REPLICAS_FRESH = 1.0  # seconds a node's count of online replicas is trusted before it is read again
# the longest one WAIT for the in-sync set blocks its connection before the set is read again: it
# changes no faster than it is read (`confirmed`)
_WAIT_SLICE_MS = int(_REPLICAS_FRESH * 1000)
REPLICA_LAG_MAX_MS = 10_000  # `--replica-lag-max-ms`: Redis's own min-replicas-max-lag, 10 s
READ_CONFIRM_MS = 1_000  # how long a read waits for the replicas to hold what it read before giving none of it
_READ_MARK_CHANNEL = "gateway:read-mark"  # PUBLISHed to nobody: only to move the reading connection's replication offset
READ_MARK = "read-mark-1"  # the mark on a Cluster, where PUBLISH is not replicated
_READ_MARK_TTL_MS = 10_000  # how long a partition's read-mark key outlives its last read
# error replies of a node busy, loading, failing over or handing a slot on: the script did not run
_PASSING = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "BUSY", "MASTERDOWN", "READONLY")
_UNRUN = (*_PASSING, "NOSCRIPT")

DURABLE = frozenset({
    # the transaction coordinator's point of no return, and what rolling it forward writes
    "txn-end-4", "txn-group-commit-5", "txn-marker-6", "txn-offsets-settle-3", "sub-txn-settle-4",
    "watermark-settle-2", "delay-commit-8", "delay-drop-2",
    # a Kafka transaction's partitions and groups (AddPartitionsToTxn, AddOffsetsToTxn)
    "txn-join-5",
    # fencing epochs: InitProducerId, the native fence; producer ids
    "fence-connect-6", "producer-ids-1",
    # committed offsets (classic and consumer groups, transactional ones staged) and their deletion
    "group-commit-4", "cgroup-commit-3", "txn-offsets-stage-2", "group-offsets-delete-2",
    "group-delete-5", "cgroup-delete-4",
    # native subscriptions' acks and seeks
    "sub-ack-4", "sub-seek-4", "sub-delete-5",
    # delayed messages moved from the index into the log
    "delay-move-6",
    # a topic's creation and growth, answered as done: a CreateTopics run on a primary that was paused
    # through a failover and then resumed (a request held in its socket) was answered and lost
    # (tests/test_jepsen_lab.py)
    "topic-create-2", "partition-init-1", "topic-settle-2", "topic-grow-2",
})
"""Scripts whose answer tells a client its change is done: each waits for the replicas."""

DIRECT = frozenset({
    # a Kafka transaction's steps, one after another on its commit's critical path
    "txn-join-5", "txn-current-2", "txn-end-4", "txn-marker-6", "txn-finish-6", "txn-offsets-stage-2",
    "txn-offsets-settle-3", "txn-expect-2",
    # reading a group (TxnOffsetCommit checks the member, beside the transaction)
    "group-load-2",
    # a client quota's usage, recorded on the produce and fetch paths of throttled clients
    "quota-record-1",
})
"""Scripts sent on the connections beside redis-py (`resp`), whose round trip costs a fraction of
redis-py's, whether they wait for replicas or not; redis-py serves them when those cannot."""


@dataclass(frozen=True)
class ReplicaStatus:
    address: str  # host:port, as the primary sees it
    state: str  # online, wait_bgsave, send_bulk, ...
    offset: int  # replication offset the replica acknowledged
    lag_bytes: int  # the primary's offset less the replica's
    lag_seconds: int  # since its last acknowledgement


@dataclass(frozen=True)
class PrimaryStatus:
    address: str  # host:port of the primary
    offset: int  # its replication offset
    replicas: list[ReplicaStatus]

    @property
    def online(self) -> int:
        return sum(1 for r in self.replicas if r.state == "online")

    def in_sync(self, lag_max_ms: int, caught_up: Mapping[str, float] | None = None, now: float = 0.0) -> int:
        """How many replicas are in the primary's in-sync set (`in_sync_set`)."""
        return len(self.in_sync_set(lag_max_ms, caught_up, now))

    def in_sync_set(self, lag_max_ms: int, caught_up: Mapping[str, float] | None = None,
                    now: float = 0.0) -> list[str]:
        """The addresses of the replicas in the primary's in-sync set: online, acknowledged within
        `lag_max_ms` (Redis's `lag`, whole seconds since the replica's last REPLCONF ACK, sent every
        second; compared as Redis compares it with `min-replicas-max-lag`, refreshGoodReplicasCount),
        and, given when each last caught up (`caught_up`, on the clock of `now`), caught up within it too."""
        return [r.address for r in self.replicas if r.state == "online" and r.lag_seconds * 1000 <= lag_max_ms
                and (caught_up is None or now - caught_up.get(r.address, now) <= lag_max_ms / 1000)]

    def caught_up(self, before: tuple[int, Mapping[str, float]] | None, now: float) -> dict[str, float]:
        """When each online replica last held everything its primary had at the read before (`before`:
        that read's offset, and this map as it gave it), as Kafka's leader keeps each follower's
        lastCaughtUpTimeMs (`Replica.updateFetchStateOrThrow`): a replica that keeps acknowledging yet
        falls behind (its primary's stream to it cut one way) leaves the set too, not only a silent
        one. One first seen counts as caught up now, as a new Kafka leader starts its followers' clocks."""
        offset, seen = before if before is not None else (0, {})
        return {r.address: now if r.offset >= offset or r.address not in seen else seen[r.address]
                for r in self.replicas if r.state == "online"}


Vouch = Callable[[tuple[str, int] | None, Any], Awaitable[str | None]]
"""Why the primary at an address, whose WAIT was answered and then this ROLE reply, may be on its
way out (what its replicas confirmed then lost with it), or None."""


class Waits:
    """Redis's WAIT on the connections that write for the replicas: at most one in flight on each,
    and every write sent while one is in flight shares the next. WAIT blocks its connection in Redis,
    so writes sent meanwhile run only after it returns, and the next WAIT, sent then, covers them:
    pipelined requests share WAITs instead of queueing one each.

    Each waiter's timeout counts from its own `after`, not from the WAIT that serves it: a WAIT is
    given what is left of its earliest waiter's time. A write that joined the next WAIT while a
    stalled replica held the first one through its whole timeout would otherwise wait a second
    timeout on top (a produce answered after twice its `timeout_ms`, its client timing it out
    first: tests/jepsen soak sentinel:461914276), where Kafka's DelayedProduce expires each
    produce on its own timeout.

    With `vouch`, each WAIT is followed by a ROLE, which counts the replicas online once it returned,
    and its answer stands only once `vouch` finds no reason against it (StorageUnavailable else)."""

    def __init__(self, vouch: Vouch | None = None) -> None:
        self._next: dict[RespConnection, tuple[asyncio.Future[int], list[int], list[float]]] = {}
        self._flying: set[RespConnection] = set()
        self._vouch = vouch

    def after(self, conn: RespConnection, replicas: int, timeout_ms: int) -> asyncio.Future[int]:
        """The number of replicas that hold everything `conn` wrote so far (a WAIT's answer)."""
        loop = asyncio.get_running_loop()
        group = self._next.get(conn)
        if group is None:
            group = self._next[conn] = (loop.create_future(), [], [])
            # its waiters may be gone before it fails (their appends' replies failed first, the
            # connection lost under a paused primary): the failure is theirs, never a logged orphan
            group[0].add_done_callback(_observed)
        group[1].append(replicas)
        group[2].append(loop.time() + timeout_ms / 1000)  # its deadline
        if conn not in self._flying:
            self._send(conn)
        return group[0]

    def _send(self, conn: RespConnection) -> None:
        group = self._next.pop(conn, None)
        if group is None:
            self._flying.discard(conn)
            return
        self._flying.add(conn)
        fut, replicas, deadlines = group
        left_ms = (min(deadlines) - asyncio.get_running_loop().time()) * 1000
        # timeout 0 would block for ever: WAIT's timeout is at least a millisecond
        wait: list[tuple[Any, ...]] = [("WAIT", max(replicas), max(1, int(left_ms)))]
        sent = conn.pipeline([*wait, ("ROLE",)] if self._vouch else wait)
        sent.add_done_callback(lambda done: self._answered(conn, fut, done))

    def _answered(self, conn: RespConnection, fut: asyncio.Future[int], done: asyncio.Future[list[Any]]) -> None:
        if not fut.done():
            exc = done.exception()
            reply = None if exc is not None else done.result()[0]
            if exc is not None or not isinstance(reply, int):
                fut.set_exception(StorageUnavailable(f"redis: WAIT failed ({exc or reply}); retry"))
            elif self._vouch is not None:
                task = asyncio.ensure_future(self._vouched(self._vouch(conn.address, done.result()[1]), fut, reply))
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
            else:
                fut.set_result(reply)
        self._send(conn)

    @staticmethod
    async def _vouched(vouching: Awaitable[str | None], fut: asyncio.Future[int], acked: int) -> None:
        """`acked` for `fut` once `vouching` has found nothing against the primary."""
        reason = await vouching
        if fut.done():
            return
        if reason is None:
            fut.set_result(acked)
        else:
            fut.set_exception(StorageUnavailable(f"redis: the primary may be being replaced: {reason}; retry"))


async def by(fut: asyncio.Future[T], deadline: float) -> T:
    """`fut`'s outcome, or TimeoutError at `deadline` (the loop's clock), `fut` left alone: a reply
    that comes later still reaches its connection's next waiter in order, and a WAIT shared with
    other writes still answers them. Two callbacks and a timer, not `wait_for`'s task and shield:
    every produce's append waits through it."""
    if not fut.done():
        loop = fut.get_loop()  # not get_running_loop, a getpid call each on Python 3.11
        waiter: asyncio.Future[None] = loop.create_future()

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        timer = loop.call_at(deadline, wake)
        fut.add_done_callback(wake)
        try:
            await waiter
        finally:
            timer.cancel()
            fut.remove_done_callback(wake)
        if not fut.done():
            fut.add_done_callback(_observed)  # its failure, if it comes, is nobody's now
            raise TimeoutError
    return fut.result()


def _observed(fut: asyncio.Future[Any]) -> None:
    """Marks a WAIT's failure as seen: asyncio logs "Future exception was never retrieved" otherwise."""
    if not fut.cancelled():
        fut.exception()


def _parse_replica(raw: dict[str, Any], primary_offset: int) -> ReplicaStatus:
    offset = int(raw.get("offset", 0))
    return ReplicaStatus(f"{raw.get('ip', '?')}:{raw.get('port', '?')}", str(raw.get("state", "?")), offset,
                         max(0, primary_offset - offset), int(raw.get("lag", 0)))


def primary_status(address: str, info: dict[str, Any]) -> PrimaryStatus:
    """A primary's replicas from its INFO replication."""
    offset = int(info.get("master_repl_offset", 0))
    replicas = [_parse_replica(v, offset) for k, v in sorted(info.items())
                if k.startswith("slave") and k[5:].isdigit() and isinstance(v, dict)]
    return PrimaryStatus(address, offset, replicas)


def read_confirmed(reply: Any, replicas: int) -> bool:
    """Whether a WAIT's reply after `Replication.read_mark` says `replicas` hold what was read."""
    return isinstance(reply, int) and not isinstance(reply, bool) and reply >= replicas


def check_read(key: str, reply: Any, mark: int) -> None:
    """StorageUnavailable (retriable) unless a read's WAIT `reply` says `mark` replicas hold what it read."""
    if not read_confirmed(reply, mark):
        raise StorageUnavailable(f"{key}: what was read is not on {mark} Redis replicas within "
                                 f"{READ_CONFIRM_MS} ms ({reply}); retry")


class Replication:
    """The connections that write for the replicas and wait for them, one per primary, and each
    primary's count of replicas online."""

    def __init__(self, redis: RedisClient, scripts: Scripts, preload: Iterable[ScriptSpec]) -> None:
        self.redis = redis
        self.scripts = scripts
        self.connections = DirectConnections(
            redis, name="gateway-append-replicated", preload=tuple(s.source for s in preload))
        self.vouching = isinstance(redis, SentinelRedis)  # a ROLE follows each WAIT, for `replaced`
        self.waits = Waits(self.replaced if self.vouching else None)
        self._online: dict[tuple[str, int], tuple[float, int, int]] = {}  # node -> (read at, online, in sync)
        self._most: dict[tuple[str, int], int] = {}  # node -> most replicas ever seen online
        self._reading: dict[tuple[str, int], asyncio.Future[tuple[int, int]]] = {}  # node -> its INFO being read
        # node -> (its offset at the last read, when each replica last caught up: `PrimaryStatus.caught_up`)
        self._caught_up: dict[tuple[str, int], tuple[int, dict[str, float]]] = {}
        self.state_min_insync = 2
        self.state_timeout_ms = 5_000
        self.replica_lag_max_ms = REPLICA_LAG_MAX_MS
        # behind Sentinel, replicas out of the in-sync set kept from promotion (`promotion.py`)
        self.promotion = Promotion(redis, self.connections) if self.vouching else None

    def configure(self, state_min_insync: int, state_timeout_ms: int,
                  replica_lag_max_ms: int = REPLICA_LAG_MAX_MS, unclean_promotion: bool = False) -> None:
        """How many copies (the primary's included) a durable state change waits for at least, how
        long, how long a replica may go unheard and stay in its primary's in-sync set, and whether
        the Sentinels may promote one out of it."""
        self.state_min_insync, self.state_timeout_ms = state_min_insync, state_timeout_ms
        self.replica_lag_max_ms = replica_lag_max_ms
        if unclean_promotion and self.promotion is not None:
            self.promotion.close()
            self.promotion = None

    async def online(self, key: str, until: float | None = None) -> int:
        """The replicas of `key`'s node that are online (INFO replication), read again after a second;
        callers asking meanwhile share one read. TimeoutError at `until` (the loop's clock) when
        that read is not done by then (Redis stopped or cut off)."""
        return (await self._counts(key, until))[0]

    async def in_sync(self, key: str, until: float | None = None) -> int:
        """The replicas in the in-sync set of `key`'s node (`PrimaryStatus.in_sync`), read as `online`.

        Kafka's acks=all, its coordinators' writes and its high watermark wait for every replica in
        the partition's ISR, not for `min.insync.replicas` of them, which is only the floor below
        which acks=all is refused (`Partition.checkEnoughReplicasReachOffset`,
        `maybeIncrementLeaderHW`); a follower not caught up within `replica.lag.time.max.ms` leaves the
        ISR (`Partition.getOutOfSyncReplicas`, KIP-537). Waiting for fewer let the Sentinels promote
        a replica that lacked an acknowledged record while the one that had it was gone with the
        primary (soak sentinel:70115030)."""
        return (await self._counts(key, until))[1]

    def _known(self, key: str) -> tuple[int, int] | None:
        """(online, in sync) of `key`'s node as read within the last second, None when due for a read:
        what `_counts` answers at once, had without a coroutine (every durable call asks)."""
        seen = self._online.get(self.connections.address(key))
        if seen is not None and asyncio.get_running_loop().time() - seen[0] < _REPLICAS_FRESH:
            return seen[1], seen[2]
        return None

    async def _counts(self, key: str, until: float | None) -> tuple[int, int]:
        if (known := self._known(key)) is not None:
            return known
        addr = self.connections.address(key)
        now = asyncio.get_running_loop().time()
        reading = self._reading.get(addr)
        if reading is None:
            reading = self._reading[addr] = asyncio.ensure_future(self._read_online(key, addr, now))
            reading.add_done_callback(lambda _: self._reading.pop(addr, None))
        return await (asyncio.shield(reading) if until is None else by(reading, until))

    async def _read_online(self, key: str, addr: tuple[str, int], now: float) -> tuple[int, int]:
        async with storage_errors():
            if hasattr(self.redis, "get_node_from_key"):
                info = await self.redis.info("replication", target_nodes=self.redis.get_node_from_key(key))
            else:
                info = await self.redis.info("replication")
        status = primary_status("", info)
        caught_up = status.caught_up(self._caught_up.get(addr), now)
        self._caught_up[addr] = (status.offset, caught_up)
        in_sync_set = status.in_sync_set(self.replica_lag_max_ms, caught_up, now)
        online, in_sync = status.online, len(in_sync_set)
        self._online[addr] = (now, online, in_sync)
        if self.promotion is not None:
            self.promotion.settle(addr, [r.address for r in status.replicas], in_sync_set)
        # a primary first seen now (promoted in a failover) is owed the replicas its predecessors had:
        # read as it takes over, it may not have them back yet
        self._most[addr] = max(online, self._most.get(addr, max(self._most.values(), default=0)))
        return online, in_sync

    def wait(self, conn: RespConnection, needed: int, timeout_ms: int) -> asyncio.Future[int]:
        """The first WAIT of `confirmed`, sent at once: created before anything else is written
        after `conn`'s writes, it follows them in the same burst."""
        return self.waits.after(conn, needed, max(1, min(timeout_ms, _WAIT_SLICE_MS)))

    async def confirmed(self, conn: RespConnection, key: str, first: asyncio.Future[int], needed: int, floor: int,
                        end: float, give_up: float | None = None) -> tuple[int, int]:
        """(replicas that hold everything `conn` wrote, replicas that had to): once every replica in
        the in-sync set of `key`'s node does (`needed`, read when `first` was sent by `wait`), and at
        least `floor`, or what the last WAIT said once `end` (the loop's clock) has passed. As Kafka's
        DelayedProduce, a WAIT answered by fewer is no answer: it is asked again while the set is read
        again, and a replica that leaves the set (unheard past `replica_lag_max_ms`, or dropped by its
        primary) stops being waited for, as Kafka shrinks its ISR. Each WAIT lasts at most a second
        (`wait`), so the writes it holds up on its connection (`Waits`) never wait out a replica's
        leaving. NotEnoughReplicasAfterAppend once the set is smaller than `floor`, as Kafka answers
        a produce whose ISR shrank below `min.insync.replicas` (`Partition.checkEnoughReplicasReachOffset`).
        TimeoutError at `give_up` (Redis stopped or cut off)."""
        loop = asyncio.get_running_loop()
        wait = first
        while True:
            acked = await (wait if give_up is None else by(wait, give_up))
            if acked >= needed:
                return acked, needed
            in_sync = await self.in_sync(key, give_up)  # read again after a second
            if in_sync < floor:  # Kafka: the ISR shrank below min.insync.replicas after the append
                raise NotEnoughReplicasAfterAppend(f"appended; {in_sync} Redis replicas in sync now, {floor} needed")
            needed = in_sync
            left_ms = int((end - loop.time()) * 1000)
            if acked >= needed or left_ms <= 0:
                return acked, needed
            wait = self.wait(conn, needed, left_ms)

    def primary(self) -> tuple[str, int] | None:
        """Behind Sentinel, where the redis-py client last found the primary (its reads go there)."""
        return self.redis.primary_seen() if isinstance(self.redis, SentinelRedis) else None

    async def replaced(self, addr: tuple[str, int] | None, role: Any) -> str | None:
        """Why the primary at `addr`, whose replicas just confirmed a WAIT and which then answered
        `role` to ROLE, may be on its way out (`SentinelRedis.replacing`), or None. The Sentinels are
        asked only when it has fewer replicas online than it has had: the replica a failover promotes
        leaves it first (`REPLICAOF NO ONE` closes its link), so one that has all of them is not
        being replaced yet."""
        if not isinstance(role, list) or len(role) < 3 or role[0] not in (b"master", "master"):
            return f"it answers ROLE {role!r}"
        return await self._replacing(addr, len(role[2]))

    async def unconfirmed(self, key: str) -> str | None:
        """`replaced` for a read of `key` that no replica confirmed because its primary has none online
        (`read_replicas`): it may be the old one, resumed or cut off, which they all left."""
        if not self.vouching or self.state_min_insync <= 1:
            return None
        needed, online = await self.state_replicas(key)
        return await self._replacing(self.primary(), online) if needed > online == 0 else None

    async def _replacing(self, addr: tuple[str, int] | None, online: int) -> str | None:
        if addr is None or online >= self._most.get(addr, max(self._most.values(), default=0)):
            return None
        assert isinstance(self.redis, SentinelRedis)
        try:
            return await self.redis.replacing(addr)
        except (StorageUnavailable, *UNAVAILABLE) as exc:
            return f"the Sentinels could not be asked ({exc})"

    async def learn(self) -> None:
        """Each primary's replicas online, read once at start: a primary that has lost them before this
        gateway's first durable write is still waited on, never taken for a Redis without replicas (a
        primary paused through a failover, resumed with a request it held, ran it and was answered
        without a WAIT; the Sentinels then made it a replica, and the change was gone: tests/jepsen)."""
        with contextlib.suppress(StorageUnavailable):
            await self.connections.connection("")  # a Sentinel's primary found, so it is named as later
            for status in await self.primaries():
                host, port = status.address.rsplit(":", 1)
                self._most[(host, int(port))] = max(status.online, self._most.get((host, int(port)), 0))

    async def read_replicas(self, key: str) -> int:
        """How many replicas must hold what a read of `key` returns before a client sees it (0: none).

        Kafka hands a consumer only records below the high watermark, which moves once every in-sync
        replica holds them (Kafka's `Partition.maybeIncrementLeaderHW`; the leader epochs of KIP-101
        and KIP-320 keep a deposed leader from answering), so a record no replica holds is never
        read and then lost in a failover. Redis serves whatever its primary holds, and a primary
        paused through a failover and then resumed answers from its own log, which holds appends the
        new primary never got (their offsets since given to other records) until the Sentinels demote
        it seconds later (tests/jepsen's primary-paused). So a read waits, as a state change does,
        for every replica in the in-sync set (`in_sync`), and at least `state_replicas` of those
        online, to hold everything the node had when it read (`read_mark`), on a Redis Cluster as
        behind Sentinel: a read a failover then dropped was polled from a Cluster's isolated primary
        while the mark was a PUBLISH, which a Cluster does not replicate (tests/jepsen, soak
        cluster:938408598)."""
        if self.state_min_insync <= 1:
            return 0
        needed, online = await self.state_replicas(key)
        # every one in the in-sync set, as Kafka's high watermark waits for its whole ISR, and at least
        # the floor of those online: one its primary dropped (gone, or silent past repl-timeout) is out
        # of the set as a lagging follower leaves Kafka's ISR, which then moves the high watermark
        # without it
        return max(min(needed, online), await self.in_sync(key)) if needed else 0

    @property
    def cluster(self) -> bool:
        return hasattr(self.redis, "get_node_from_key")

    def read_mark(self, mark_key: str) -> tuple[Any, ...]:
        """A write that, sent after a read on the connection that read, moves the connection's
        replication offset to its node's (WAIT counts a connection's own writes, and a reader has
        none), so a WAIT after it counts the replicas that hold everything the node had when it read.
        Behind Sentinel a PUBLISH; on a Cluster, where PUBLISH goes over the bus and not the
        replication stream, read-mark-1 on `mark_key`, in the read's slot, which a node that no
        longer owns the slot answers MOVED and a replica READONLY or MOVED."""
        if self.cluster:
            return self.scripts.evalsha(READ_MARK, [mark_key], [_READ_MARK_TTL_MS])
        return ("PUBLISH", _READ_MARK_CHANNEL, "")

    async def confirm_read(self, key: str) -> None:
        """StorageUnavailable (retriable) unless the in-sync replicas of the node holding `key` hold all
        it has now, behind Sentinel on a primary that stands: what it read before is then what its
        successor holds too. Called before a refusal that state read there decides, and that a client
        takes as fatal (a transaction not open, a producer fenced): a primary cut off with a minority,
        or paused through its failover, answers from state the new primary has moved past (tests/jepsen
        soak sentinel:957377018: TxnOffsetCommit refused INVALID_TXN_STATE by the old primary, whose
        transaction lacked the AddOffsetsToTxn the new one had taken). Kafka's deposed coordinator
        cannot write its log and answers NOT_COORDINATOR."""
        mark = await self.read_replicas(key)
        if not mark:
            if why := await self.unconfirmed(key):
                raise StorageUnavailable(f"{key}: what was read may be gone with its primary ({why}); retry")
            return
        role = [("ROLE",)] if self.vouching else []
        replies = await self.connections.pipeline(
            key, [self.read_mark(keys.slot_mark(key)), ("WAIT", mark, READ_CONFIRM_MS), *role])
        if replies is None:
            raise StorageUnavailable(f"redis: {key}'s node unreachable to confirm what was read there; retry")
        if not read_confirmed(replies[1], mark):
            self.forget(key)
        await self.check_confirmation(key, replies, mark)

    async def check_confirmation(self, key: str, confirm: list[Any], mark: int) -> None:
        """StorageUnavailable (retriable) unless a read's confirming replies (its mark's, its WAIT's and
        behind Sentinel its ROLE's) say `mark` replicas hold what it read on a primary that stands."""
        check_read(key, confirm[1], mark)
        if len(confirm) > 2 and (why := await self.replaced(self.primary(), confirm[2])):
            raise StorageUnavailable(f"{key}: what was read may be gone with its primary ({why}); retry")

    def forget(self, key: str) -> None:
        """Read `key`'s node's replicas again next time (a WAIT fell short)."""
        self._online.pop(self.connections.address(key), None)

    async def state_replicas(self, key: str) -> tuple[int, int]:
        """(replicas a state change on `key` waits for, replicas online now)."""
        return self._state_replicas(key, await self.online(key))

    def _state_replicas(self, key: str, online: int) -> tuple[int, int]:
        """`state_replicas` given the replicas online."""
        # the node may have changed since it was read (the Sentinels named a new primary meanwhile):
        # one not read yet is owed its predecessors' replicas, as `_read_online` would record
        most = self._most.get(self.connections.address(key))
        if most is None:  # not as dict.get's default: every durable call asks, and nearly all find it
            most = max(self._most.values(), default=0)
        return min(self.state_min_insync - 1, most), online

    async def primaries(self) -> list[PrimaryStatus]:
        """Every primary's replicas, read now (for the admin API and metrics)."""
        found = await self.on_primaries(lambda redis, node: redis.info("replication", **node))
        return [primary_status(addr, info) for addr, info in sorted(found)]

    async def on_primaries(self, command: Callable[[RedisClient, dict[str, Any]], Awaitable[Any]]) -> list[tuple[str, Any]]:
        """`command(client, target)` on every primary at once (a Cluster's each, else the one Redis or
        Sentinel's current primary), as ("host:port", its answer); `target` is the keyword arguments
        that send a command to that node."""
        async with storage_errors():
            if hasattr(self.redis, "get_primaries"):
                await self.redis.initialize()  # the nodes are known once it has run a command
                nodes = self.redis.get_primaries()
                answers = await asyncio.gather(*(command(self.redis, {"target_nodes": n}) for n in nodes))
                return [(f"{n.host}:{n.port}", a) for n, a in zip(nodes, answers, strict=True)]
            host, port = self.connections.address("")
            return [(f"{host}:{port}", await command(self.redis, {}))]

    def address(self, key: str) -> str:
        """"host:port" of the primary holding `key`."""
        host, port = self.connections.address(key)
        return f"{host}:{port}"

    async def run(self, calls: list[tuple[str, list[str], list[Any]]], *, durable: list[bool] | None = None,
                  direct: bool = False) -> list[Any]:
        """Run `calls` (as `Scripts.call_many`: errors in place) and answer once the replicas that
        the `durable` ones (all by default) wait for hold them. NotEnoughReplicas (nothing run) when
        a node has fewer in sync; NotEnoughReplicasAfterAppend when WAIT times out first or the set
        shrinks below them (`confirmed`). `direct` sends them on this object's connections even when
        none waits; what those cannot run (no connection, a node that refused them unrun) goes
        through redis-py unless it waits."""
        needs: list[int] = []  # the floor of each
        waits_for: list[int] = []  # the in-sync set of each, at least its floor
        for i, (_, call_keys, _) in enumerate(calls):
            if durable is not None and not durable[i]:
                needs.append(0)
                waits_for.append(0)
                continue
            # counts read within the last second are taken as they are, without a coroutine's cost
            if (known := self._known(call_keys[0])) is not None:
                needed, _ = self._state_replicas(call_keys[0], known[0])
                in_sync = known[1] if needed else 0
            else:
                needed, _ = await self.state_replicas(call_keys[0])
                in_sync = await self.in_sync(call_keys[0]) if needed else 0
            if in_sync < needed:
                raise NotEnoughReplicas(f"{in_sync} Redis replicas in sync, {needed} needed for a state change "
                                        f"(state min.insync.replicas {self.state_min_insync})")
            needs.append(needed)
            waits_for.append(in_sync)
        waiting = any(needs)
        if not waiting and not direct:
            async with storage_errors():
                return await self.scripts.call_many(calls)
        conns: dict[RespConnection, list[int]] = {}
        for i, (_, call_keys, _) in enumerate(calls):
            try:
                conn = self.connections.ready(call_keys[0]) or await self.connections.connection(call_keys[0])
            except RedisClusterException:  # a cluster client that has not learnt the slots yet
                conn = None
            if conn is None:
                if not waiting:  # nothing sent yet
                    async with storage_errors():
                        return await self.scripts.call_many(calls)
                raise StorageUnavailable("redis: no connection for a replicated state change; retry")
            conns.setdefault(conn, []).append(i)
        # all written before the first await: WAITs sent after them cover them. A read mark after the
        # scripts of a connection that waits moves its replication offset to its node's, so the WAIT
        # also confirms a refusal, which writes nothing, as read on a primary that stands: a cut-off
        # primary refuses from state its successor has moved past (`confirm_read`)
        futures: dict[RespConnection, asyncio.Future[list[Any]]] = {}
        # each waiting connection's (floor, in-sync set): none on the usual path of a Redis without
        # replicas, which pays for no WAIT's bookkeeping
        floors: dict[RespConnection, tuple[int, int]] = {}
        for conn, idx in conns.items():
            commands = [self.scripts.evalsha(*calls[i]) for i in idx]
            if waiting and (needed := max(needs[i] for i in idx)):
                floors[conn] = (needed, max(waits_for[i] for i in idx))
                commands.append(self.read_mark(keys.slot_mark(calls[idx[0]][1][0])))
            futures[conn] = conn.pipeline(commands)
        # the WAITs after every connection's scripts, as they always were
        waits = {conn: self.wait(conn, in_sync, self.state_timeout_ms) for conn, (_, in_sync) in floors.items()}
        end = asyncio.get_running_loop().time() + self.state_timeout_ms / 1000
        replies: list[Any] = [None] * len(calls)
        unrun: list[int] = []  # refused by a node before running, waiting for no replica: redis-py's turn
        try:  # `storage_errors`, without its context's two coroutines on every state change
            for conn, fut in futures.items():
                idx = conns[conn]
                answered = await fut
                for n, i in enumerate(idx):
                    reply = answered[n]
                    if isinstance(reply, RespError):
                        replies[i] = self.reply(conn, reply)
                        if not needs[i] and str(reply).startswith(_UNRUN):
                            unrun.append(i)
                    else:
                        replies[i] = reply
            if unrun:
                again = await self.scripts.call_many([calls[i] for i in unrun])
                for i, reply in zip(unrun, again, strict=True):
                    replies[i] = reply
            for conn, wait in waits.items():
                key = calls[conns[conn][0]][1][0]
                floor, in_sync = floors[conn]
                acked, needed = await self.confirmed(conn, key, wait, in_sync, floor, end)
                if acked < needed:
                    self.forget(key)
                    raise NotEnoughReplicasAfterAppend(
                        f"a state change reached {acked} Redis replicas within {self.state_timeout_ms} ms, "
                        f"{needed} in sync needed (state min.insync.replicas {self.state_min_insync})")
        except BaseException as exc:
            if (ours := storage_error(exc)) is not None:
                raise ours from exc
            raise
        return replies

    def reply(self, conn: RespConnection, reply: Any) -> Any:
        """A script's reply on a replicated connection, its error replies as redis-py's would be."""
        if isinstance(reply, RespError) and str(reply).startswith("NOSCRIPT"):
            conn.close()  # its scripts were flushed: the next connection loads them again
            return StorageUnavailable("redis lost the gateway's scripts; retry")
        if isinstance(reply, RespError) and str(reply).startswith(_PASSING):
            if str(reply).startswith(("MOVED", "ASK")):
                self.connections.relocate()
            elif str(reply).startswith("READONLY"):
                conn.close()  # its node was demoted: the next connection finds the primary
            return StorageUnavailable(f"redis: {reply}; retry")
        if isinstance(reply, RespError):
            error = ResponseError(str(reply))
            return storage_full(error) or error
        return reply

    def close(self) -> None:
        if self.promotion is not None:
            self.promotion.close()
        self.connections.close()


class DurableScripts(Scripts):
    """`Scripts` as the sub-stores call them, with the state changes of `DURABLE` run through
    `Replication.run`: answered once the replicas hold them. Every other script goes straight on."""

    def __init__(self, scripts: Scripts, replication: Replication, durable: frozenset[str] = DURABLE,
                 direct: frozenset[str] = DIRECT) -> None:
        vars(self).update(vars(scripts))  # the same registrations on the same client, not loaded again
        self._plain = scripts
        self._replication = replication
        self._durable = durable
        self._direct = direct

    def _waits(self, names: Iterable[str]) -> bool:
        return self._replication.state_min_insync > 1 and any(n in self._durable for n in names)

    async def call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        waits = self._replication.state_min_insync > 1 and name in self._durable  # `_waits` of one, inline
        if not waits and name not in self._direct:
            return await self._plain.call(name, keys, args)
        (reply,) = await self._replication.run([(name, keys, args)], durable=[waits], direct=name in self._direct)
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def call_many(self, calls: list[tuple[str, list[str], list[Any]]]) -> list[Any]:
        waits = self._waits(name for name, _, _ in calls)
        direct = any(name in self._direct for name, _, _ in calls)
        if not waits and not direct:
            return await self._plain.call_many(calls)
        durable = [waits and name in self._durable for name, _, _ in calls]
        return await self._replication.run(calls, durable=durable, direct=direct)
