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
writers busy on the partition), they go through append-5, which needs no prediction.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from gateway.errors import StorageUnavailable, error_for
from gateway.store import keys
from gateway.store.connection import storage_errors, storage_full
from gateway.store.log import Append, AppendRequest, LogStore
from gateway.store.resp import DirectConnections, RespConnection, RespError
from gateway.store.scripts import Scripts

CHECK = "append-check-6"
REFUSED = -1  # the check script's answer to a prediction that does not hold
ROUNDS = 2  # predicted sends of one append; still refused (other writers busy on it), append-5 takes it


@dataclass
class _Next:
    """What the next append of a partition is predicted to find, and the token its chain holds."""

    hw: int
    maxts: int
    bytes: int
    token: str
    claim: bool


class PredictedAppender:
    """Appends plain and idempotent batches (transactional ones stay on append-5) through predicted
    MULTI units. One call at a time (`append` holds a lock for its whole call): a refusal is resent
    before any append sent after it, which overlapping calls could not promise without a queue that
    orders their resends."""

    def __init__(self, log: LogStore) -> None:
        self._log = log
        self._scripts: Scripts = log.scripts
        self._conns: DirectConnections = log.ordered
        self._next: dict[str, _Next] = {}
        self._lock = asyncio.Lock()

    def _error(self, conn: RespConnection, error: RespError, log: str) -> Exception:
        """An error reply as the append path answers it: retriable where Redis moved or stopped."""
        if str(error).startswith(("MOVED", "ASK")) or "MOVED" in str(error):
            self._conns.relocate()
        elif str(error).startswith("READONLY"):
            conn.close()
        full = storage_full(ResponseError(str(error)))
        return full or StorageUnavailable(f"{log}: redis: {error}; retry")

    def _token(self) -> str:
        return secrets.token_hex(8)

    def _unit(self, r: AppendRequest) -> tuple[tuple[Any, ...], ...]:
        log = keys.log(r.topic, r.partition)
        n = self._next.get(log) or _Next(-1, -1, 0, self._token(), True)
        after = max(n.maxts, r.max_timestamp)
        check = self._scripts.evalsha(CHECK, [
            log, keys.meta(r.topic, r.partition), keys.producers(r.topic, r.partition), keys.log_aside(r.topic, r.partition),
            keys.open_txns(r.topic, r.partition), keys.expected_txns(r.topic, r.partition),
        ], [n.hw, r.count, r.max_timestamp, len(r.batch), after, n.bytes, n.token, 1 if n.claim else 0,
            r.producer_id, r.producer_epoch, r.base_sequence])
        aside = keys.log_aside(r.topic, r.partition)
        self._next[log] = _Next(n.hw + r.count, after, n.bytes + len(r.batch), n.token, False)
        return (("MULTI",), check,
                ("XADD", aside, "NOMKSTREAM", f"{n.hw}-1", "b", r.batch, "n", r.count, "t", after, "c", n.bytes),
                ("RENAME", aside, log), ("EXEC",))

    async def append(self, requests: list[AppendRequest]) -> list[Append | Exception]:
        """Append `requests` in order (per partition), each answered as append-5 would answer it."""
        if any(r.transactional or r.replicas for r in requests):
            raise ValueError("transactional and replicated appends go through LogStore.append")
        out: list[Append | Exception | None] = [None] * len(requests)
        async with self._lock, storage_errors():
            todo = list(range(len(requests)))
            for _ in range(ROUNDS):
                if not todo:
                    break
                todo = await self._round(requests, todo, out)
        if todo:  # after those before them, on a path that needs no prediction; the next call claims again
            for i in todo:
                self._next.pop(keys.log(requests[i].topic, requests[i].partition), None)
            for i, reply in zip(todo, await self._log.append([requests[i] for i in todo]), strict=True):
                out[i] = reply
        return [o for o in out if o is not None]

    async def _round(self, requests: list[AppendRequest], todo: list[int], out: list[Append | Exception | None]
                     ) -> list[int]:
        """Send `todo` once; fill `out` for those answered; return those to send again, in order."""
        by_conn: dict[RespConnection, list[int]] = {}
        for i in todo:
            conn = await self._conns.connection(keys.log(requests[i].topic, requests[i].partition))
            if conn is None:
                out[i] = StorageUnavailable("redis: no ordered connection for the append; retry")
                continue
            by_conn.setdefault(conn, []).append(i)
        sent = {conn: conn.pipeline([c for i in idx for c in self._unit(requests[i])]) for conn, idx in by_conn.items()}
        again: list[int] = []
        failed: set[str] = set()  # partitions with an append refused or failed this round
        for conn, fut in sent.items():
            try:
                replies = await fut
            except ConnectionError as exc:
                for i in by_conn[conn]:
                    self._next.pop(keys.log(requests[i].topic, requests[i].partition), None)
                    out[i] = StorageUnavailable(f"redis: the connection dropped under the append ({exc}); "
                                                f"it may be stored: retry")
                continue
            for k, i in enumerate(by_conn[conn]):
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
                if isinstance(first, RespError):  # nothing ran: this one answered, the later ones resent
                    out[i] = self._error(conn, first, log)
                    failed.add(log)
                    self._next.pop(log, None)
                    continue
                code = int(first[0])
                if code == REFUSED:
                    if log not in failed:  # the state the first refusal saw: the resend predicts from it
                        self._next[log] = _Next(int(first[1]), int(first[2]), int(first[3]), self._token(), True)
                    failed.add(log)
                    again.append(i)
                    continue
                out[i] = Append(int(first[1]), int(first[2]), duplicate=code == 9) if code in (0, 9) else \
                    error_for(code, f"{r.topic}-{r.partition}")
                if code != 0:  # nothing appended: the later ones of this partition predicted otherwise
                    failed.add(log)
                    self._next.pop(log, None)
        return sorted(again)
