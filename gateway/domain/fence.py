"""Epoch fencing of transaction keys: one live connection and one transaction per `owner&key`.

Connecting with a key bumps its epoch and aborts the transaction of the older epoch at once; the
older connection is closed, a reconnect with its stale epoch is refused, and every step of its
transaction fails (the abort markers carry the new epoch, so even its late writes are refused).
Kafka's transactional.id is the same thing: InitProducerId is a connect.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.domain.txn import TransactionCoordinator, TxnId
from gateway.errors import ConcurrentTransactions, InvalidRequest, NotAllowed
from gateway.store import Store
from gateway.store.fence import KeyState, Retry

__all__ = ["FenceService", "KeyState", "full_key"]

log = logging.getLogger(__name__)

ANONYMOUS = "anonymous"
KAFKA_MAX_EPOCH = 32766  # producer epochs are int16 on the Kafka wire; the last one is kept in reserve
NATIVE_MAX_EPOCH = 2**62


def full_key(owner: str, key: str) -> str:
    if "&" in key:
        raise InvalidRequest(f"a transaction key may not contain '&': {key!r}")
    if not key:
        raise InvalidRequest("a transaction key may not be empty")
    return f"{owner or ANONYMOUS}&{key}"


@dataclass(frozen=True)
class Connected:
    epoch: int
    producer_id: int
    aborted_txn: str  # the older epoch's transaction this connect aborted, "" for none


class FenceService:
    def __init__(self, store: Store, coordinator: TransactionCoordinator) -> None:
        self.keys = store.fence
        self.log_store = store.log
        self.coordinator = coordinator
        # live connections of this gateway per key: how to close each, and its epoch; those of an
        # older epoch are closed when a newer one connects (an incarnation's connections share one)
        self._live: dict[str, dict[Callable[[], None], int]] = defaultdict(dict)

    async def connect(
        self, owner: str, key: str, epoch: int = -1, *, max_epoch: int = NATIVE_MAX_EPOCH,
        on_fenced: Callable[[], None] | None = None, incarnation: str = "", keep_last: bool = False,
        arrived_ms: int | None = None,
    ) -> Connected:
        """Take the key for a new epoch. `epoch` is the last one this caller was given (-1: a new task);
        any other stale epoch is refused with NotAllowed, but the key's last epoch, which carries on in
        its current one (a Kafka producer's InitProducerId after its coordinator moved the epoch on,
        KIP-360). With `keep_last` the presented current epoch becomes the key's last. `arrived_ms`: when
        the request reached this gateway, for a new producer (`FenceStore.connect`: a late one is refused).

        With an `incarnation` (a name for one run of a task whose processes come and go, like a Spark
        query's run id): the incarnation holding the key carries on in its epoch, a new one takes a
        new epoch, and one that held the key before a newer one is refused with NotAllowed."""
        name = full_key(owner, key)
        for _ in range(20):
            state = await self.keys.get(name)
            if state is not None and epoch != -1 and epoch not in (state.epoch, state.last_epoch):
                raise NotAllowed(f"transaction key {key!r}: epoch {epoch} is stale (current {state.epoch})")
            new_pid = await self.log_store.allocate_producer_id()
            try:
                new_epoch, pid, aborted = await self.keys.connect(
                    name, epoch, state.txn if state else "", new_pid, max_epoch, incarnation, keep_last,
                    arrived_ms)
            except Retry:
                continue
            break
        else:
            raise NotAllowed(f"transaction key {key!r} is changing too fast to connect")
        for close, old_epoch in list(self._live[name].items()):
            if old_epoch != new_epoch:
                del self._live[name][close]
                close()
        if on_fenced is not None:
            self._live[name][on_fenced] = new_epoch
        if aborted:
            log.info("transaction key %s epoch %d fenced transaction %s", name, new_epoch, aborted)
            await self.coordinator.end(aborted, commit=False)
        return Connected(new_epoch, pid, aborted)

    def disconnected(self, owner: str, key: str, on_fenced: Callable[[], None]) -> None:
        self._live[full_key(owner, key)].pop(on_fenced, None)

    async def begin(
        self, owner: str, key: str, epoch: int, timeout_ms: int | None = None, *, own_producer: bool = False
    ) -> tuple[TxnId, int]:
        """Open the key's one transaction for `epoch`; (txn, producer id its batches carry).
        `own_producer` gives the transaction a producer id of its own (native transactions)."""
        name = full_key(owner, key)
        timeout = self.coordinator.check_timeout(timeout_ms)
        for _ in range(20):
            state = await self.keys.get(name)
            if state is None or state.epoch != epoch:
                raise NotAllowed(f"transaction key {key!r}: epoch {epoch} is not the current one")
            txn = await self.coordinator.next_id()
            pid = self.coordinator.own_producer_id(txn) if own_producer else None
            try:
                return txn, await self.keys.begin(name, epoch, str(txn), timeout, pid, state.txn)
            except Retry as r:
                if r.txn and r.txn == state.txn:
                    # the previous transaction is still ending (a crash mid-way): finish it first
                    info = await self.coordinator.describe(r.txn)
                    if info is not None and info.state in ("COMMITTING", "ABORTING"):
                        await self.coordinator.end(r.txn, commit=info.state == "COMMITTING")
                        continue
                    raise ConcurrentTransactions(f"transaction key {key!r} has transaction {r.txn} open") from r
        raise NotAllowed(f"transaction key {key!r} is changing too fast to begin a transaction")

    async def set_timeout(self, owner: str, key: str, timeout_ms: int) -> None:
        """The transaction timeout the key's producer asked for (Kafka's InitProducerId carries it)."""
        await self.keys.set_timeout(full_key(owner, key), timeout_ms)

    async def get(self, owner: str, key: str) -> KeyState | None:
        return await self.keys.get(full_key(owner, key))

    async def list(self) -> list[KeyState]:
        out = []
        for name in await self.keys.names():
            state = await self.keys.get(name)
            if state is not None:
                out.append(state)
        return out

    async def delete(self, name: str) -> KeyState | None:
        """Abort the key's open transaction and forget the key (admin)."""
        state = await self.keys.get(name)
        if state is None:
            return None
        if state.txn:
            info = await self.coordinator.describe(state.txn)
            if info is not None and info.state not in ("COMMITTED", "ABORTED"):
                await self.coordinator.end(state.txn, commit=False)
        await self.keys.delete(name)
        for close in self._live.pop(name, {}):
            close()
        return state
