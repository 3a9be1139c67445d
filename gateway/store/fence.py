"""Transaction keys in Redis: per `owner&key`, the current epoch, producer id and open transaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from gateway.clock import now_ms
from gateway.errors import ConcurrentTransactions, ErrorCode, error_for
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts


@dataclass(frozen=True)
class KeyState:
    name: str
    epoch: int
    producer_id: int
    txn: str
    created_ms: int
    updated_ms: int
    timeout_ms: int = 0  # the transaction timeout its producer asked for (Kafka), 0: the default
    incarnation: str = ""  # of the holder that connected with one, "" otherwise
    last_commit_id: int = -1  # of its last group commit, -1 for none
    last_epoch: int = -1  # the epoch a Kafka producer may still present to carry on (KIP-360), -1 for none


class Retry(Exception):
    """The key moved under the caller (its open transaction changed); read it again and retry."""

    def __init__(self, txn: str = "") -> None:
        super().__init__(txn)
        self.txn = txn


def _code(reply: list[Any], what: str) -> list[Any]:
    code = int(reply[0])
    if code == ErrorCode.OK:
        return reply
    if code == ErrorCode.CONCURRENT_TRANSACTIONS:
        raise Retry(reply[1].decode() if len(reply) > 1 else "")
    raise error_for(code, what)


class FenceStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def get(self, name: str) -> KeyState | None:
        async with storage_errors():
            h = cast("dict[bytes, bytes]", await self.redis.hgetall(keys.txn_key(name)))
        if not h:
            return None
        return KeyState(name, int(h[b"epoch"]), int(h[b"pid"]), h.get(b"txn", b"").decode(),
                        int(h.get(b"created", 0)), int(h.get(b"updated", 0)), int(h.get(b"timeout", 0)),
                        h.get(b"inc", b"").decode(), int(h.get(b"commit", -1)), int(h.get(b"last") or -1))

    async def set_timeout(self, name: str, timeout_ms: int) -> None:
        async with storage_errors():
            await self.redis.hset(keys.txn_key(name), "timeout", timeout_ms)

    async def names(self) -> list[str]:
        async with storage_errors():
            return sorted(m.decode() for m in cast("set[bytes]", await self.redis.smembers(keys.TXN_KEYS)))

    async def connect(
        self, name: str, epoch: int, seen_txn: str, new_pid: int, max_epoch: int, incarnation: str = "",
        keep_last: bool = False, arrived_ms: int | None = None,
    ) -> tuple[int, int, str]:
        """(new epoch, producer id, id of the transaction aborted by this connect or ""). With
        `keep_last` a presented current epoch stays the key's last (see fence-connect-6). A new
        producer's connect whose request reached its gateway (`arrived_ms`, the deployment's clock)
        before the key's epoch was last handed out is ConcurrentTransactions: a resend was answered
        first, and this late one would fence it."""
        async with storage_errors():
            reply = await self.scripts.call(
                "fence-connect-6",
                [keys.txn_key(name), keys.TXN_KEYS, keys.txn(seen_txn or "-"), keys.TXN_OPEN, keys.TXN_LOG,
                 keys.txn_key_incarnations(name)],
                # name, epoch, seen, now, new_pid, max_epoch, inc, keep_last, arrived
                [name, epoch, seen_txn, now_ms(), new_pid, max_epoch, incarnation, 1 if keep_last else 0,
                 "" if arrived_ms is None else arrived_ms],
            )
        if len(reply) > 2 and reply[2] == b"late":
            raise ConcurrentTransactions(f"transaction key {name!r}: this request arrived before its current "
                                         "epoch was handed out; retry")
        r = _code(reply, name)
        return int(r[1]), int(r[2]), r[3].decode()

    async def begin(
        self, name: str, epoch: int, txn_id: str, timeout_ms: int, producer_id: int | None, seen_txn: str
    ) -> int:
        """Open `txn_id` for the key's current epoch; returns the producer id its batches carry."""
        async with storage_errors():
            reply = await self.scripts.call(
                "fence-begin-5",
                [keys.txn_key(name), keys.txn(txn_id), keys.TXN_OPEN, keys.TXN_LOG, keys.txn(seen_txn or "-")],
                # id, epoch, timeout, now, pid, name, seen
                [txn_id, epoch, timeout_ms, now_ms(), "" if producer_id is None else producer_id, name, seen_txn],
            )
        return int(_code(reply, name)[1])

    async def delete(self, name: str) -> None:
        async with storage_errors():
            # name
            await self.scripts.call(
                "fence-forget-4",
                [keys.txn_key(name), keys.TXN_KEYS, keys.txn_key_incarnations(name), keys.txn_key_children(name)],
                [name],
            )
