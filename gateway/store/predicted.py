"""Appends whose batch never passes through Lua: the gateway predicts each append's offset, running
max timestamp and log bytes, and one MULTI per append carries a check script and a raw XADD.

Per append, on the node's ordered connection: `MULTI`, `EVALSHA append-check-6` (checks the
prediction and the producer, advances meta and producer state, renames the stream aside), `XADD
<aside> NOMKSTREAM <offset>-1 b <batch> n <count> t <maxts> c <bytes>`, `RENAME <aside> <log>`,
`EXEC`: one atomic unit in one slot. A refused prediction (or an unloaded script, or a refused
batch) leaves no stream aside, so its XADD writes nothing. Why: Redis's Lua interns every argument
as a Lua string, which at a kilobyte and more is most of what a script append costs beyond a raw
XADD (gateway/bench/append_cost.py measures both).

What is kept here is a cache of Redis's state, never trusted: every append is checked against the
meta hash, and the writer token (`w` in it) makes an append that follows a refused one refused
too, even if other writers brought the partition to the state it predicted; a refused append and
all after it are sent again, in order, from the state the refusal reported; refused again (other
writers busy on the partition), they go through append-5, which needs no prediction. Calls overlap
(a producer's pipelined requests): a call with refusals resends once the calls before it on that
partition have settled, and until the last call sent has settled, new appends of the partition go
out predicted to be refused, so that none overtakes a resend.

An acks=all append that waits for replicas keeps every guarantee of the append-5 path
(`LogStore.append`): its in-sync set read before (NotEnoughReplicas, nothing sent), its units on the
replicated connections, each round of them followed by a WAIT on that connection, and its answer
settled by `LogStore.confirm` as append-5's is (NotEnoughReplicasAfterAppend, ReplicationTimedOut,
ReplyLost on a lost WAIT).
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

from gateway.errors import ReplyLost, StorageUnavailable
from gateway.store import keys
from gateway.store import log as _log  # a module: log.py builds on this one and this one on its types
from gateway.store.connection import storage_errors, storage_full
from gateway.store.replication import by
from gateway.store.resp import DirectConnections, RespConnection, RespError
from gateway.store.scripts import Scripts

if TYPE_CHECKING:
    from gateway.store.log import Append, AppendRequest, LogStore

CHECK = "append-check-6"
REFUSED = -1  # the check script's answer to a prediction that does not hold
MIN_BYTES = 1024  # smaller batches stay on append-5: measured, the MULTI costs more than it saves there


@dataclass
class _Next:
    """What the next append of a partition is predicted to find, and the token its chain holds."""

    hw: int
    maxts: int
    bytes: int
    token: str
    claim: bool


@dataclass
class _Lane:
    """A partition's appends on this gateway: the prediction, and the order of calls in flight."""

    next: _Next | None = None
    blocked: bool = False  # a refusal is being settled: new appends go out to be refused
    last: asyncio.Future[None] | None = None  # settled when the latest call sent has settled
    resume: _Next | None = None  # the prediction after the last resends, for the next call's resends


_BLOCKED = _Next(-1, -1, 0, "", False)  # refused whatever the partition holds: hw is never -1


@dataclass
class _Round:
    """Units sent on a replicated connection, the first WAIT after them, and those they answered."""

    conn: RespConnection
    wait: asyncio.Future[int]
    in_sync: int
    answered: list[int]


class PredictedAppender:
    """Appends plain and idempotent batches (transactional ones stay on append-5) through predicted
    MULTI units on the ordered connections, or the replicated ones for those that wait for replicas."""

    def __init__(self, log: LogStore) -> None:
        self._log = log
        self._scripts: Scripts = log.scripts
        self._conns: DirectConnections = log.ordered
        self._lanes: dict[str, _Lane] = {}
        self._tasks: set[asyncio.Task[list[Any]]] = set()

    def takes(self, r: AppendRequest) -> bool:
        """Whether `r` goes predicted: plain or idempotent, and a kilobyte or
        more, or smaller on a partition being predicted: behind a predicted append still in flight
        (which may be resent: a smaller one must not overtake it), or where its prediction holds
        (an append-5 between would make the next large one's refused)."""
        if r.transactional:
            return False
        lane = self._lanes.get(keys.log(r.topic, r.partition))
        return len(r.batch) >= MIN_BYTES or (lane is not None and (lane.last is not None or lane.next is not None))

    def _pool(self, r: AppendRequest) -> DirectConnections:
        """Where `r` goes: a WAIT counts its own connection's writes, and holds up all behind it."""
        return self._log.replication.connections if r.replicas else self._conns

    def _error(self, r: AppendRequest, conn: RespConnection, error: RespError, log: str) -> Exception:
        """An error reply as the append path answers it: retriable where Redis moved or stopped."""
        if "MOVED" in str(error) or str(error).startswith("ASK"):
            self._pool(r).relocate()
        elif str(error).startswith("READONLY"):
            conn.close()
        full = storage_full(ResponseError(str(error)))
        return full or StorageUnavailable(f"{log}: redis: {error}; retry")

    def _unit(self, r: AppendRequest, n: _Next) -> tuple[list[tuple[Any, ...]], _Next]:
        """The MULTI of `r` predicted from `n`, and the prediction for the append after it."""
        log, aside = keys.log(r.topic, r.partition), keys.log_aside(r.topic, r.partition)
        after = max(n.maxts, r.max_timestamp)
        check = self._scripts.evalsha(CHECK, [
            log, keys.meta(r.topic, r.partition), keys.producers(r.topic, r.partition), aside,
            keys.open_txns(r.topic, r.partition), keys.expected_txns(r.topic, r.partition),
        ], [n.hw, r.count, r.max_timestamp, len(r.batch), after, n.bytes, n.token or "-", 1 if n.claim else 0,
            r.producer_id, r.producer_epoch, r.base_sequence])
        unit = [("MULTI",), check,
                ("XADD", aside, "NOMKSTREAM", f"{n.hw}-1", "b", r.batch, "n", r.count, "t", after, "c", n.bytes),
                ("RENAME", aside, log), ("EXEC",)]
        return unit, _Next(n.hw + r.count, after, n.bytes + len(r.batch), n.token, False)

    async def send(self, requests: list[AppendRequest], in_sync: list[int] | None = None, timeout_ms: int = 30_000
                   ) -> asyncio.Task[list[Any]] | None:
        """Write `requests` on the ordered connections, all before returning (appends sent later
        run after them), and return the task that answers them, raw as `LogStore.scripted` (await it
        shielded: it settles the partition for the calls after it, so it runs to its end even if its
        caller gives up); None (nothing sent) when a node's connection cannot be had. `in_sync`: the
        in-sync replicas of each one's node, as `LogStore.append` read them, for those that wait."""
        in_sync = in_sync or [0] * len(requests)
        conns: list[RespConnection] = []
        for r in requests:
            conn = await self._pool(r).connection(keys.log(r.topic, r.partition))
            if conn is None:
                return None
            conns.append(conn)
        by_conn: dict[RespConnection, list[int]] = {}
        commands: dict[RespConnection, list[tuple[Any, ...]]] = {}
        turns: dict[str, tuple[asyncio.Future[None] | None, asyncio.Future[None]]] = {}
        for i, (r, conn) in enumerate(zip(requests, conns, strict=True)):
            log = keys.log(r.topic, r.partition)
            lane = self._lanes.setdefault(log, _Lane())
            if log not in turns:
                mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                turns[log], lane.last = (lane.last, mine), mine
            n = _BLOCKED if lane.blocked else lane.next or _Next(-1, -1, 0, secrets.token_hex(8), True)
            unit, after = self._unit(r, n)
            if not lane.blocked:
                lane.next = after
            by_conn.setdefault(conn, []).append(i)
            commands.setdefault(conn, []).extend(unit)
        futures = {conn: conn.pipeline(cmds) for conn, cmds in commands.items()}
        waits = {conn: self._log.replication.wait(conn, max(in_sync[i] for i in idx), timeout_ms)
                 for conn, idx in by_conn.items() if requests[idx[0]].replicas}  # in the same burst
        task = asyncio.create_task(self._finish(requests, in_sync, by_conn, futures, waits, turns, timeout_ms))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def append(self, requests: list[AppendRequest], timeout_ms: int = 30_000) -> list[Append | Exception]:
        """Append `requests`, each answered as append-5 would answer it; append-5 takes them all
        when the ordered connections cannot be had."""
        task = await self.send(requests, timeout_ms=timeout_ms)
        if task is None:
            return await self._log.append(requests, timeout_ms=timeout_ms)
        return [_log.answer(r, reply) for r, reply in zip(requests, await asyncio.shield(task), strict=True)]

    async def _finish(
        self, requests: list[AppendRequest], in_sync: list[int], by_conn: dict[RespConnection, list[int]],
        futures: dict[RespConnection, asyncio.Future[list[Any]]], waits: dict[RespConnection, asyncio.Future[int]],
        turns: dict[str, tuple[asyncio.Future[None] | None, asyncio.Future[None]]], timeout_ms: int,
    ) -> list[Any]:
        out: list[Any] = [None] * len(requests)
        refused: dict[str, list[int]] = {}  # per partition, the appends to send again, in order
        states: dict[str, list[Any]] = {}  # per partition, the state its first refusal reported
        resumed: dict[str, _Next | None] = {}  # per partition, the prediction after its resends
        end = asyncio.get_running_loop().time() + timeout_ms / 1000
        give_up = _log.give_up_at(timeout_ms)
        rounds: list[_Round] = []  # replicated units, confirmed once the partitions are settled
        try:
            async with storage_errors():
                for conn, fut in futures.items():
                    await self._replies(requests, by_conn[conn], conn, fut, give_up, out, refused, states)
                    if conn in waits:
                        rounds.append(_Round(conn, waits[conn], max(in_sync[i] for i in by_conn[conn]), [
                            i for i in by_conn[conn] if i not in refused.get(keys.log(requests[i].topic,
                                                                                    requests[i].partition), ())]))
                for log, todo in refused.items():
                    before = turns[log][0]
                    if before is not None:
                        await before  # the calls sent before this one have settled this partition
                    resumed[log] = await self._resend(requests, in_sync, todo, log, states[log], out, rounds,
                                                      timeout_ms)
        finally:
            for log, (_, mine) in turns.items():
                lane = self._lanes[log]
                if lane.last is mine:  # the last call sent: new appends may be predicted again
                    lane.blocked, lane.last, lane.resume = False, None, None
                    if log in refused:
                        lane.next = resumed.get(log)
                mine.set_result(None)
        logs = [keys.log(r.topic, r.partition) for r in requests]
        async with storage_errors():
            for rnd in rounds:
                if rnd.answered:
                    await self._log.confirm(rnd.conn, rnd.wait, rnd.answered, logs, out, rnd.in_sync,
                                            [r.replicas for r in requests], end, give_up, timeout_ms)
        return [o if o is not None else StorageUnavailable("append not answered; retry") for o in out]

    async def _replies(
        self, requests: list[AppendRequest], idx: list[int], conn: RespConnection, fut: asyncio.Future[list[Any]],
        give_up: float, out: list[Any], refused: dict[str, list[int]],
        states: dict[str, list[Any]],
    ) -> None:
        """Fill `out` from one connection's replies; collect the refused appends by partition."""
        try:
            replies = await by(fut, give_up)
        except (TimeoutError, ConnectionError) as exc:  # written, maybe run: as the append-5 path says it
            for i in idx:
                r = requests[i]
                self._block(keys.log(r.topic, r.partition))
                out[i] = ReplyLost(f"{r.topic}-{r.partition}: no reply from Redis to the append ({exc!r}); "
                                   f"it may be stored: retry")
            return
        for k, i in enumerate(idx):
            r = requests[i]
            log = keys.log(r.topic, r.partition)
            reply = replies[5 * k + 4]
            first = reply[0] if isinstance(reply, list) else reply
            if isinstance(first, RespError) and str(first).startswith("EXECABORT"):  # why: a queued one's
                first = next((e for e in replies[5 * k:5 * k + 4] if isinstance(e, RespError)), first)
            if isinstance(first, RespError) and str(first).startswith("NOSCRIPT"):
                # nothing ran (scripts flushed): loaded on this connection, then sent again
                await conn.pipeline([("SCRIPT", "LOAD", self._scripts.specs[CHECK].source)])
                first = [REFUSED, -1, -1, 0]
            if isinstance(first, RespError):  # nothing ran: this one answered, the later ones refused
                out[i] = self._error(r, conn, first, log)
                self._block(log)
                continue
            code = int(first[0])
            if code == REFUSED:
                self._block(log)
                states.setdefault(log, first)
                refused.setdefault(log, []).append(i)
            else:  # stored, a duplicate, or refused as append-5 refuses: `_log.answer` reads it
                out[i] = [int(x) for x in first]
            if code not in (0, REFUSED):  # nothing appended: the later ones predicted otherwise
                self._block(log)

    def _block(self, log: str) -> None:
        lane = self._lanes.get(log)
        if lane is not None:
            lane.blocked, lane.next = True, None

    async def _resend(self, requests: list[AppendRequest], in_sync: list[int], todo: list[int], log: str,
                      state: list[Any], out: list[Any], rounds: list[_Round], timeout_ms: int) -> _Next | None:
        """Send `todo` again, in order, predicted from what the calls before left (or the reported
        `state`), then from what a refusal of that reports; refused twice, through append-5. The
        prediction after them when they went through as predicted."""
        lane = self._lanes[log]
        n: _Next | None = lane.resume or _Next(int(state[1]), int(state[2]), int(state[3]), "", True)
        lane.resume = None
        for _ in range(2):
            conn = await self._pool(requests[todo[0]]).connection(log)
            if conn is None or n is None:
                break
            n = _Next(n.hw, n.maxts, n.bytes, secrets.token_hex(8), True)
            commands: list[tuple[Any, ...]] = []
            for i in todo:
                unit, n = self._unit(requests[i], n)
                commands.extend(unit)
            more: dict[str, list[int]] = {}
            seen: dict[str, list[Any]] = {}
            sending = conn.pipeline(commands)
            if requests[todo[0]].replicas:
                wait = self._log.replication.wait(conn, max(in_sync[i] for i in todo), timeout_ms)
            await self._replies(requests, todo, conn, sending, _log.give_up_at(timeout_ms), out, more, seen)
            if requests[todo[0]].replicas:
                rounds.append(_Round(conn, wait, max(in_sync[i] for i in todo),
                                     [i for i in todo if i not in more.get(log, ())]))
            if not more.get(log):
                done = [out[i] for i in todo]
                lane.resume = n if all(isinstance(o, list) and o[0] == 0 for o in done) else None
                return lane.resume
            todo = more[log]
            n = _Next(int(seen[log][1]), int(seen[log][2]), int(seen[log][3]), "", True) if log in seen else None
        waiting = any(requests[i].replicas for i in todo)  # their WAITs need an ordered connection
        for i, reply in zip(todo, await self._log.scripted([requests[i] for i in todo], [in_sync[i] for i in todo],
                                                           _nothing if waiting else None, timeout_ms), strict=True):
            out[i] = reply
        return None


def _nothing() -> None:
    """`LogStore.scripted`'s `sent` where nothing waits on its sending."""
