"""A native transaction (PIP-31): messages sent and acknowledgements made in it count only when it
commits. An abort drops its messages and releases its acknowledgements for redelivery.

The transaction is its own producer: its batches carry its producer id and epoch, the transactional
flag and a sequence per partition from 0, so resending one after a reconnect is deduplicated.
Producers batch a transaction's records apart from their ordinary batches, one batch in flight per
partition; `commit` first sends what they hold and waits for every send and ack of the transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gateway.client.errors import ConnectionLost
from gateway.errors import ExpiredTransactionError, GatewayError, NotAllowed
from gateway.pb import gateway_pb2 as pb

if TYPE_CHECKING:
    from gateway.client.client import Client

T = TypeVar("T")


class Holder(Protocol):
    async def flush_txn(self, txn: Transaction) -> None: ...


class Transaction:
    def __init__(self, client: Client, created: pb.TransactionCreated, epoch: int) -> None:
        self.client = client
        self.txn_id = created.txn_id
        self.producer_id = created.producer_id
        self.producer_epoch = created.producer_epoch
        self.timeout = created.timeout_ms / 1000
        self._key_epoch = epoch  # the client's transaction-key epoch when it began (-1: no key)
        self._sequences: dict[tuple[str, int], int] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._ops: set[asyncio.Future[Any]] = set()
        self._holders: set[Holder] = set()
        self._failed: GatewayError | None = None
        self.state = "OPEN"

    def __repr__(self) -> str:
        return f"Transaction({self.txn_id}, {self.state})"

    def check(self) -> None:
        """ExpiredTransactionError once the transaction has ended here or its key's epoch has moved on."""
        if self.state != "OPEN":
            raise ExpiredTransactionError(f"transaction {self.txn_id} is {self.state.lower()}")
        if self._key_epoch >= 0 and (self.client.fenced is not None or self.client.epoch != self._key_epoch):
            raise ExpiredTransactionError(f"transaction {self.txn_id}: its transaction key was taken by a newer epoch")

    async def run(self, step: Callable[[], Awaitable[T]]) -> T:
        """One step of the transaction, tracked so `commit` waits for it."""
        self.check()
        return await self.track(asyncio.ensure_future(self.call(step)))

    def track(self, fut: asyncio.Future[T]) -> asyncio.Future[T]:
        """`commit` waits for `fut`, and fails (aborting) if it failed."""
        self._ops.add(fut)

        def done(f: asyncio.Future[T]) -> None:
            self._ops.discard(f)
            if not f.cancelled() and (exc := f.exception()) is not None:
                self.fail(exc)

        fut.add_done_callback(done)
        return fut

    def fail(self, exc: BaseException) -> None:
        """A step failed: `flush` and `commit` raise its error (the first), and commit aborts."""
        if isinstance(exc, GatewayError) and self._failed is None:
            self._failed = exc

    def enlist(self, holder: Holder) -> None:
        """A producer holding records of this transaction in batches: `commit` and `abort` flush it first."""
        self._holders.add(holder)

    async def call(self, step: Callable[[], Awaitable[T]]) -> T:
        """Every step is safe to repeat, so a lost connection means trying again once reconnected;
        a refused reconnect of the fenced key is reported as the transaction's expiry."""
        deadline = asyncio.get_running_loop().time() + self.client.operation_timeout
        while True:
            try:
                return await step()
            except ConnectionLost:
                if not self.client.will_reconnect or asyncio.get_running_loop().time() >= deadline:
                    raise
            except NotAllowed as exc:
                if self.client.fenced is not None:
                    raise ExpiredTransactionError(f"transaction {self.txn_id}: {exc}") from exc
                raise

    def lock(self, topic: str, partition: int) -> asyncio.Lock:
        return self._locks.setdefault((topic, partition), asyncio.Lock())

    def next_sequence(self, topic: str, partition: int, count: int) -> int:
        seq = self._sequences.get((topic, partition), 0)
        self._sequences[(topic, partition)] = (seq + count) % 2147483648
        return seq

    async def flush(self) -> None:
        """Send what producers hold of the transaction and wait until the gateway has it all, without
        ending it (a two-phase commit's prepare); raises the first failure of a step."""
        await self._settle_ops()
        if self._failed is not None:
            raise self._failed

    async def commit(self) -> None:
        """Wait for the transaction's sends and acks, then commit. A step that failed (a conflict,
        say) makes the commit fail too: the transaction is aborted then, and the error raised."""
        await self._settle_ops()
        if self._failed is not None:
            await self.abort()
            raise self._failed
        await self._end(True)

    async def abort(self) -> None:
        """Drop its messages and release its acknowledgements; harmless once aborted."""
        if self.state == "ABORTED":
            return
        await self._settle_ops()
        await self._end(False)

    async def _settle_ops(self) -> None:
        holders, self._holders = self._holders, set()
        for holder in holders:
            await holder.flush_txn(self)
        if self._ops:
            await asyncio.gather(*list(self._ops), return_exceptions=True)

    async def _end(self, commit: bool) -> None:
        self.check()
        req = pb.Request(end_transaction=pb.EndTransaction(txn_id=self.txn_id, commit=commit))
        try:
            await self.call(lambda: self.client.request(req))
        except ExpiredTransactionError:
            self.state = "EXPIRED"
            raise
        self.state = "COMMITTED" if commit else "ABORTED"

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(self, exc_type: object, *rest: object) -> None:
        """Commit when the block ends normally, abort when it raises."""
        if exc_type is None:
            await self.commit()
        elif self.state == "OPEN":
            try:
                await self.abort()
            except GatewayError:
                pass
