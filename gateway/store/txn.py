"""The transaction coordinator's durable state: a hash per transaction, the open set, the log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from gateway.clock import now_ms
from gateway.errors import ErrorCode, InvalidTxnState, error_for
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.replication import Replication
from gateway.store.scripts import Scripts

SEP = "\x00"


def part_member(topic: str, partition: int) -> str:
    return f"{topic}{SEP}{partition}"


def sub_member(topic: str, partition: int, subscription: str) -> str:
    return f"{topic}{SEP}{partition}{SEP}{subscription}"


def settle_member(kind: str, topic: str, partition: int) -> str:
    return f"{kind}{SEP}{topic}{SEP}{partition}"


@dataclass(frozen=True)
class Ending:
    """What `end` decided: the state to roll forward and everything the transaction touched; what
    its end settles on its partitions besides markers, (kind, topic, partition), is all there is
    when it is `marked` (else it was opened by an older gateway, and every kind is settled)."""

    state: str
    producer_id: int
    producer_epoch: int
    partitions: list[tuple[str, int]] = field(default_factory=list)
    subscriptions: list[tuple[str, int, str]] = field(default_factory=list)
    settles: list[tuple[str, str, int]] = field(default_factory=list)
    txn_id: str = ""
    marked: bool = True
    key_producer: tuple[int, int] = (-1, -1)  # ended by its key: the key's producer id and epoch from now on


class ProducerRefused(Exception):
    """The caller is not its transaction key's producer: `why` is "unknown" (no such key), "pid"
    (another producer id), "fenced" (an older epoch) or "future" (an epoch never handed out);
    `epoch` is the key's."""

    def __init__(self, why: str, epoch: int) -> None:
        super().__init__(why)
        self.why = why
        self.epoch = epoch


@dataclass(frozen=True)
class TxnInfo:
    txn_id: str
    state: str
    timeout_ms: int
    start_ms: int
    updated_ms: int
    producer_id: int
    producer_epoch: int
    owner: str
    partitions: list[tuple[str, int]]
    subscriptions: list[tuple[str, int, str]]


def _decode_parts(raw: list[bytes]) -> list[tuple[str, int]]:
    out = []
    for m in raw:
        t, p = m.decode().split(SEP)
        out.append((t, int(p)))
    return sorted(out)


def _decode_subs(raw: list[bytes]) -> list[tuple[str, int, str]]:
    out = []
    for m in raw:
        t, p, s = m.decode().split(SEP)
        out.append((t, int(p), s))
    return sorted(out)


def _decode_settles(raw: list[bytes]) -> list[tuple[str, str, int]]:
    out = []
    for m in raw:
        k, t, p = m.decode().split(SEP)
        out.append((k, t, int(p)))
    return sorted(out)


def _check(reply: list[Any], what: str) -> list[Any]:
    code = int(reply[0])
    if code == ErrorCode.OK:
        return reply
    if code == ErrorCode.NOT_ALLOWED and len(reply) == 3:
        raise ProducerRefused(reply[1].decode(), int(reply[2]))
    if code == ErrorCode.INVALID_TXN_STATE:
        raise InvalidTxnState(f"{what}: transaction is {reply[1].decode()}")
    raise error_for(code, what)


_SETS = {"partition": keys.TXN_PARTS, "subscription": keys.TXN_SUBS, "settle": keys.TXN_SETTLE}
"""A transaction's sets by the kind of member they hold: what each adds to its hash's name."""


class TxnStore:
    def __init__(self, redis: RedisClient, scripts: Scripts, replication: Replication | None = None) -> None:
        self.redis = redis
        self.scripts = scripts
        self.replication = replication  # confirms what a refusal read (`current`)

    async def next_sequence(self) -> int:
        async with storage_errors():
            return int(await self.redis.incr(keys.TXN_SEQ))

    async def create(
        self, txn_id: str, timeout_ms: int, producer_id: int, producer_epoch: int, owner: str,
        group: str = "", group_commit_id: int = 0,
    ) -> None:
        async with storage_errors():
            reply = await self.scripts.call(
                "txn-new-4", [keys.txn(txn_id), keys.TXN_OPEN, keys.TXN_LOG, keys.txn_key_children(group or "-")],
                # id, timeout, now, pid, epoch, owner, group, gid
                [txn_id, timeout_ms, now_ms(), producer_id, producer_epoch, owner, group, group_commit_id],
            )
        _check(reply, txn_id)

    async def add(self, txn_id: str, kind: str, members: list[str], epoch: int = -1) -> int:
        """Add members of `kind` ("partition", "subscription", or "settle": what its end settles)."""
        target = keys.txn(txn_id) + _SETS[kind]
        async with storage_errors():
            reply = await self.scripts.call(
                "txn-add-3", [keys.txn(txn_id), target, keys.TXN_LOG],
                # id, kind, items, epoch, now
                [txn_id, kind, "\n".join(members), epoch, now_ms()],
            )
        return int(_check(reply, txn_id)[1])

    async def needs(self, txn_id: str, kind: str, partitions: list[tuple[str, int]]) -> None:
        """Record that the transaction's end must run the partition settler of `kind` on these
        partitions. Called before what it settles is written, so a crash in between orphans nothing;
        InvalidTxnState once the transaction is no longer open."""
        await self.add(txn_id, "settle", [settle_member(kind, t, p) for t, p in partitions])

    async def join(
        self, name: str, producer_id: int, epoch: int, coordinator: int, timeout_ms: int, max_timeout_ms: int,
        kind: str, members: list[str], *, expect: list[tuple[str, int]] | None = None,
        arrived_ms: int | None = None,
    ) -> str:
        """Add members of `kind` to the open transaction of transaction key `name`, opening one first
        when it has none; its id. ProducerRefused unless the caller is the key's producer. With
        `expect` (V1's AddPartitionsToTxn), those partitions are first told to let the producer's
        transactional batches open its transaction there (txn-expect-2), in one round trip before the
        join's, as txn-expect-2 requires the join to follow them. `arrived_ms`: when the request
        reached this gateway (the deployment's clock); with none open, a request that came before the
        key's last transaction was decided is ConcurrentTransactions: it was meant for that one, and
        would open a transaction its producer knows nothing of (see txn-join-5)."""
        join = ("txn-join-5", [keys.txn_key(name), keys.TXN_SEQ, keys.TXN_OPEN, keys.TXN_LOG, keys.txn("")],
                # name, pid, epoch, coord, timeout, max, now, kind, suffix, items, arrived
                [name, producer_id, epoch, coordinator, timeout_ms, max_timeout_ms, now_ms(), kind, _SETS[kind],
                 "\n".join(members), "" if arrived_ms is None else arrived_ms])
        async with storage_errors():
            if expect:
                self._expected(expect, await self.scripts.call_many(self._expect_calls(expect, producer_id, epoch)))
            reply = await self.scripts.call(*join)
        return str(_check(reply, name)[1].decode())

    async def current(self, name: str, producer_id: int, epoch: int, kind: str, member: str,
                      arrived_ms: int | None = None) -> tuple[str, str, bool]:
        """(id, state, whether `member` of `kind` is in it) of key `name`'s current transaction ("",
        "", False for none). ProducerRefused unless the caller is the key's producer;
        ConcurrentTransactions when it opened after the request reached this gateway (`arrived_ms`:
        it meant one before, see txn-current-2). An answer
        short of an open transaction holding `member` is one its caller refuses on, fatally for a
        Kafka client (INVALID_TXN_STATE, PRODUCER_FENCED): it stands once the replicas confirm the
        node read (`Replication.confirm_read`), else StorageUnavailable, retriable."""
        async with storage_errors():
            reply = await self.scripts.call(
                "txn-current-2", [keys.txn_key(name), keys.txn("")],
                # pid, epoch, suffix, member, arrived
                [producer_id, epoch, _SETS[kind], member, "" if arrived_ms is None else arrived_ms],
            )
        if self.replication is not None and (int(reply[0]) != ErrorCode.OK or reply[2] != b"OPEN" or not int(reply[3])):
            await self.replication.confirm_read(keys.txn_key(name))
        r = _check(reply, name)
        return r[1].decode(), r[2].decode(), bool(int(r[3]))

    async def end(
        self, txn_id: str, commit: bool, epoch: int = -1, *, key: str = "", producer_id: int = -1,
        bump: bool = False, next_producer_id: int | None = None, fence_key: str = "", fence: int = 0,
        arrived_ms: int | None = None,
    ) -> Ending:
        """The point of no return of `txn_id`, or with a transaction `key` (and `producer_id`) of
        that key's current transaction, checking the caller is its producer in the same step. With
        `bump` (transactions V2) the key's epoch moves on in that step, to producer
        `next_producer_id` at epoch 0 when given (the caller's epoch being the last). With `fence`
        (a transaction.version, 0 for none) the reaper fences the producer of transaction key
        `fence_key` in the same step, if `txn_id` is that key's current transaction (see txn-end-4).
        `arrived_ms`: when the request ending the key's current transaction reached this gateway (the
        deployment's clock); a transaction the key opened after it is refused ConcurrentTransactions,
        being not the one the request meant (transactions V1 name none; see txn-end-4)."""
        async with storage_errors():
            reply = await self.scripts.call(
                "txn-end-4", [keys.txn_key(key or fence_key or "-"), keys.TXN_OPEN, keys.TXN_LOG, keys.txn("")],
                # id, action, pid, epoch, now, sets, bump, next_pid, fence, arrived
                ["" if key else txn_id, "commit" if commit else "abort", producer_id if key else "", epoch,
                 now_ms(), " ".join(_SETS.values()), 1 if bump else 0,
                 "" if next_producer_id is None else next_producer_id, fence if fence_key else 0,
                 arrived_ms if key and arrived_ms is not None else ""],
            )
        r = _check(reply, txn_id or key)
        return Ending(r[1].decode(), int(r[2]), int(r[3]), _decode_parts(r[4]), _decode_subs(r[5]),
                      _decode_settles(r[6]), r[7].decode(), bool(int(r[8])), (int(r[9]), int(r[10])))

    async def commit_group(
        self, txn_ids: list[str], key: str, epoch: int, commit_id: int | None
    ) -> tuple[bool, list[str], list[str]]:
        """The point of no return of several transactions at once: (duplicate, each one's state to roll
        forward, the orphans aborted). `key` (a full transaction key, "" for none) with `epoch` fences
        the caller; a `commit_id` at or below the key's last is a duplicate, whose OPEN transactions
        are aborted; the key's other open group members up to `commit_id` are orphans, aborted."""
        async with storage_errors():
            reply = await self.scripts.call(
                "txn-group-commit-5",
                [keys.txn_key(key or "-"), keys.TXN_OPEN, keys.TXN_LOG, keys.txn(""), keys.txn_key_children(key or "-")],
                # ids, epoch, commit, now
                ["\n".join(txn_ids), epoch if key else -1, "" if commit_id is None else commit_id, now_ms()],
            )
        code = int(reply[0])
        if code != ErrorCode.OK:
            txn_id, state = reply[1].decode(), reply[2].decode()
            if code == ErrorCode.INVALID_TXN_STATE:
                raise InvalidTxnState(f"transaction {txn_id} is {state}")
            if code == ErrorCode.PRODUCER_FENCED:
                raise error_for(code, f"transaction key {key}: epoch {epoch} was fenced by a newer one")
            if code == ErrorCode.INVALID_REQUEST:
                raise error_for(code, f"transaction {txn_id} belongs to a transaction key: it ends through it")
            raise error_for(code, f"transaction {txn_id}")
        return bool(int(reply[1])), [s.decode() for s in reply[2]], [o.decode() for o in reply[3]]

    async def finish(self, txn_id: str, keep_ms: int) -> str:
        async with storage_errors():
            reply = await self.scripts.call(
                "txn-finish-6",
                [keys.txn(txn_id), keys.TXN_OPEN, keys.TXN_LOG, keys.txn_parts(txn_id), keys.txn_subs(txn_id),
                 keys.txn_settle(txn_id)],
                # id, now, keep_ms
                [txn_id, now_ms(), keep_ms],
            )
        return str(_check(reply, txn_id)[1].decode())

    async def write_markers(
        self, partitions: list[tuple[str, int]], producer_id: int, producer_epoch: int, commit: bool, marker: bytes,
        *, always: bool = False, txn_id: str = "",
    ) -> list[int]:
        """One marker script per partition, all in one round trip. The coordinator's own (not
        `always`) are safe to repeat: a marker only ends an open transaction, and one of `txn_id`
        (or an older transaction's) written again does nothing (txn-marker-6), whatever its producer
        has opened since; "" for a transaction that is its own producer. `always` is Kafka's
        WriteTxnMarkers: the marker is appended whatever is open, and a stale epoch is refused."""
        calls = [
            ("txn-marker-6",
             [keys.log(t, p), keys.meta(t, p), keys.open_txns(t, p), keys.aborted_txns(t, p),
              keys.producers(t, p), keys.expected_txns(t, p)],
             # pid, epoch, marker, commit, always, txn
             [producer_id, producer_epoch, marker, 1 if commit else 0, 1 if always else 0, txn_id])
            for t, p in partitions
        ]
        async with storage_errors():
            replies = await self.scripts.call_many(calls)
        out = []
        for (t, p), r in zip(partitions, replies, strict=True):
            if isinstance(r, Exception):
                raise r
            out.append(int(_check(r, f"{t}-{p}")[1]))
        return out

    @staticmethod
    def _expect_calls(partitions: list[tuple[str, int]], producer_id: int,
                      epoch: int) -> list[tuple[str, list[str], list[Any]]]:
        """txn-expect-2 on each partition."""
        return [("txn-expect-2", [keys.meta(t, p), keys.expected_txns(t, p)], [producer_id, epoch])  # pid, epoch
                for t, p in partitions]

    @staticmethod
    def _expected(partitions: list[tuple[str, int]], replies: list[Any]) -> None:
        """txn-expect-2's replies checked: the first refusal raised."""
        for (t, p), r in zip(partitions, replies, strict=True):
            if isinstance(r, Exception):
                raise r
            _check(r, f"{t}-{p}")

    async def due(self, now: int, limit: int = 100) -> list[str]:
        """Unfinished transactions whose deadline has passed, or that wait to be rolled forward."""
        async with storage_errors():
            raw = await self.redis.zrangebyscore(keys.TXN_OPEN, "-inf", now, start=0, num=limit)
        return [r.decode() for r in cast("list[bytes]", raw)]

    async def take_over(self, now: int) -> int:
        """A reaper taking its role: every open transaction's deadline becomes at least `now` plus
        its timeout (see txn-takeover-2); how many moved."""
        async with storage_errors():
            # now
            reply = await self.scripts.call("txn-takeover-2", [keys.TXN_OPEN, keys.txn("")], [now])
        return int(_check(reply, "txn-takeover")[1])

    async def describe(self, txn_id: str) -> TxnInfo | None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.txn(txn_id))
        pipe.smembers(keys.txn_parts(txn_id))
        pipe.smembers(keys.txn_subs(txn_id))
        async with storage_errors():
            h, parts, subs = await pipe.execute()
        if not h:
            return None
        return TxnInfo(
            txn_id, h[b"state"].decode(), int(h[b"timeout"]), int(h[b"start"]), int(h[b"updated"]),
            int(h[b"pid"]), int(h[b"epoch"]), h[b"owner"].decode(), _decode_parts(list(parts)),
            _decode_subs(list(subs)),
        )

    async def unfinished(self) -> list[str]:
        async with storage_errors():
            raw = await self.redis.zrange(keys.TXN_OPEN, 0, -1)
        return [r.decode() for r in cast("list[bytes]", raw)]
