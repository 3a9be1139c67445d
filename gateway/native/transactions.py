"""One native connection's transactions (PIP-31) and its transaction key's epoch, and the requests
that drive them: NewTransaction, EndTransaction and CommitTransactions.

A connection with a transaction key holds the key for one epoch: its transactions are the key's
(one at a time, FenceService), and every step carries that epoch, so once a newer connection takes
the key each step of the old transaction fails. Without a key, transactions are plain coordinator
transactions. Whatever the coordinator or the log answer for a transaction that has ended, timed
out or been fenced becomes ExpiredTransactionError, the one error a native client acts on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gateway.domain.fence import full_key
from gateway.domain.services import Services
from gateway.domain.txn import TxnId
from gateway.errors import (
    ExpiredTransactionError,
    GatewayError,
    InvalidProducerEpoch,
    InvalidRequest,
    InvalidTxnState,
    ProducerFenced,
    TransactionNotFound,
)
from gateway.native.dispatch import Session, handles
from gateway.pb import gateway_pb2 as pb


@dataclass(frozen=True)
class Txn:
    """What a connection knows of a transaction: the producer its batches must carry."""

    txn_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int


def as_expired(txn_id: str, exc: GatewayError) -> GatewayError:
    """The coordinator's and the log's ways of saying 'this transaction is over', as one error."""
    if isinstance(exc, ProducerFenced | InvalidProducerEpoch):
        return ExpiredTransactionError(f"transaction {txn_id} was fenced by a newer epoch of its key")
    if isinstance(exc, InvalidTxnState):
        return ExpiredTransactionError(f"transaction {txn_id} has ended: {exc}")
    if isinstance(exc, TransactionNotFound):
        return ExpiredTransactionError(f"transaction {txn_id} is unknown or long finished")
    return exc


@contextlib.contextmanager
def expired_errors(txn_id: str) -> Iterator[None]:
    try:
        yield
    except GatewayError as exc:
        mapped = as_expired(txn_id, exc)
        if mapped is exc:
            raise
        raise mapped from exc


class TxnSession:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.owner = ""  # the authenticated user whose keys these are; "" (anonymous) without authentication
        self.key = ""
        self.epoch = -1  # the key's epoch this connection holds; -1 without a key (no epoch checks)
        self.fenced = False
        self._txns: dict[str, Txn] = {}
        self._on_fenced: Callable[[], None] | None = None

    async def connect(self, key: str, last_epoch: int, on_fenced: Callable[[], None], incarnation: str = "") -> int:
        """Take the key for a new epoch (or the epoch of its current incarnation); the older epoch's
        connection and transaction end at once."""
        connected = await self.services.fence.connect(
            self.owner, key, last_epoch, on_fenced=on_fenced, incarnation=incarnation
        )
        self.key, self.epoch, self._on_fenced = key, connected.epoch, on_fenced
        return connected.epoch

    def disconnected(self) -> None:
        if self.key and not self.fenced and self._on_fenced is not None:
            self.services.fence.disconnected(self.owner, self.key, self._on_fenced)

    def _check_live(self, txn_id: str) -> None:
        if self.fenced:
            raise ExpiredTransactionError(f"transaction {txn_id}: the connection's epoch was fenced")

    async def begin(self, timeout_ms: int, group_key: str = "", group_commit_id: int = 0) -> Txn:
        """The connection's key's transaction, or a plain one; with `group_key`, one meant for that
        key's group commit `group_commit_id`."""
        coordinator = self.services.txn
        timeout = coordinator.check_timeout(timeout_ms or None)
        if group_key and self.key:
            raise InvalidRequest("a transaction of the connection's key cannot be meant for a group commit")
        if group_key:
            tid = await coordinator.begin(timeout, group=full_key(self.owner, group_key), group_commit_id=group_commit_id)
            txn = Txn(str(tid), coordinator.own_producer_id(tid), 0, timeout)
        elif self.key:
            self._check_live("new")
            txn_id, pid = await self.services.fence.begin(self.owner, self.key, self.epoch, timeout, own_producer=True)
            txn = Txn(str(txn_id), pid, self.epoch, timeout)
        else:
            plain: TxnId = await coordinator.begin(timeout)
            txn = Txn(str(plain), coordinator.own_producer_id(plain), 0, timeout)
        self._txns[txn.txn_id] = txn
        return txn

    async def get(self, txn_id: str) -> Txn:
        """A transaction of this connection, or one opened before a reconnect (looked up once)."""
        self._check_live(txn_id)
        txn = self._txns.get(txn_id)
        if txn is None:
            info = await self.services.txn.describe(txn_id)
            if info is None or info.state != "OPEN":
                raise ExpiredTransactionError(f"transaction {txn_id} is not open")
            txn = self._txns[txn_id] = Txn(txn_id, info.producer_id, info.producer_epoch, info.timeout_ms)
        return txn

    async def add_partitions(self, txn_id: str, partitions: list[tuple[str, int]]) -> None:
        """Before a transactional batch (or a delayed message held for the transaction) goes out:
        a new partition joins, and every call checks that the transaction is open for our epoch."""
        await self.get(txn_id)
        with expired_errors(txn_id):
            await self.services.txn.add_partitions(txn_id, partitions, self.epoch)

    async def add_subscriptions(self, txn_id: str, subs: list[tuple[str, int, str]]) -> None:
        await self.get(txn_id)
        with expired_errors(txn_id):
            await self.services.txn.add_subscriptions(txn_id, subs, self.epoch)

    async def commit_group(self, txn_ids: list[str], commit_id: int | None) -> bool:
        """Commit transactions (of any connection) together, fenced by this connection's key epoch;
        False when `commit_id` was committed before (the OPEN ones given are aborted then)."""
        if commit_id is not None and not self.key:
            raise InvalidRequest("a commit id needs a connection with a transaction key")
        self._check_live(",".join(txn_ids))
        key = full_key(self.owner, self.key) if self.key else ""
        with expired_errors(",".join(txn_ids)):
            committed = await self.services.txn.commit_group(txn_ids, key=key, epoch=self.epoch, commit_id=commit_id)
        for txn_id in txn_ids:
            self._txns.pop(txn_id, None)
        return committed

    async def end(self, txn_id: str, commit: bool) -> str:
        self._check_live(txn_id)
        with expired_errors(txn_id):
            state = await self.services.txn.end(txn_id, commit, self.epoch)
        self._txns.pop(txn_id, None)
        return state


@handles("new_transaction")
async def new_transaction(s: Session, req: pb.Request) -> pb.Response:
    r = req.new_transaction
    txn = await s.txns.begin(r.timeout_ms, r.group_key, r.group_commit_id)
    created = pb.TransactionCreated(
        txn_id=txn.txn_id, producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
        timeout_ms=txn.timeout_ms,
    )
    return pb.Response(transaction_created=created)


@handles("end_transaction")
async def end_transaction(s: Session, req: pb.Request) -> pb.Response:
    r = req.end_transaction
    await s.txns.end(r.txn_id, r.commit)
    return pb.Response(success=pb.Success())


@handles("commit_transactions")
async def commit_transactions(s: Session, req: pb.Request) -> pb.Response:
    r = req.commit_transactions
    if not r.txn_ids:
        raise InvalidRequest("no transactions to commit")
    commit_id = r.commit_id if r.HasField("commit_id") else None
    committed = await s.txns.commit_group(list(r.txn_ids), commit_id)
    return pb.Response(transactions_committed=pb.TransactionsCommitted(duplicate=not committed))
