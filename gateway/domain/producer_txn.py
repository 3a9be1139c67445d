"""Kafka's transactional producer on our coordinator and transaction keys.

A transactional.id is a transaction key (owner "anonymous" until authentication exists):
InitProducerId is a connect (new epoch, the older epoch's transaction aborted, its producer
fenced). A transaction begins implicitly with the first partition or group added to it. Offsets
sent with TxnOffsetCommit wait beside the group until the transaction ends, then are applied or
dropped by one script, so a consume-transform-produce cycle commits exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.domain.fence import KAFKA_MAX_EPOCH, FenceService, KeyState
from gateway.domain.groups.consumer import validate_offset_commit
from gateway.domain.groups.errors import GroupError
from gateway.domain.txn import SubscriptionSettler, TransactionCoordinator, TxnId, TxnInfo
from gateway.errors import (
    ConcurrentTransactions,
    GatewayError,
    InvalidTxnState,
    NotAllowed,
    ProducerFenced,
    TransactionNotFound,
)
from gateway.store import Store
from gateway.store.groups import CommittedOffset

__all__ = ["CommittedOffset", "InvalidProducerIdMapping", "ProducerState", "TransactionalProducers",
           "UnknownMember", "group_offsets_settler"]

OFFSETS_TOPIC = "__consumer_offsets"  # how a group appears among a transaction's subscriptions

KAFKA_STATES = {
    "OPEN": "Ongoing",
    "COMMITTING": "PrepareCommit",
    "ABORTING": "PrepareAbort",
    "COMMITTED": "CompleteCommit",
    "ABORTED": "CompleteAbort",
}


class InvalidProducerIdMapping(GatewayError):
    """The producer id does not belong to that transactional.id."""


class UnknownMember(GatewayError):
    """The member is not in the group (or the generation is wrong): `kind` says which."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ProducerState:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    txn: TxnInfo | None  # the current or last transaction, None when there never was one

    @property
    def kafka_state(self) -> str:
        if self.txn is None:
            return "Empty"
        return KAFKA_STATES.get(self.txn.state, "Empty")


def group_offsets_settler(store: Store) -> SubscriptionSettler:
    """The coordinator's settler for the group offsets a Kafka transaction staged (TxnOffsetCommit):
    applied or dropped when it ends, a roll-forward after a restart included, so the wiring
    registers it whether or not this gateway serves Kafka's transactional producers."""
    offsets = store.txn_offsets

    async def settle(topic: str, partition: int, group_id: str, txn_id: str, commit: bool) -> None:
        if topic == OFFSETS_TOPIC:
            await offsets.settle(group_id, txn_id, commit)

    return settle


class TransactionalProducers:
    def __init__(self, store: Store, coordinator: TransactionCoordinator, fence: FenceService) -> None:
        self.coordinator = coordinator
        self.fence = fence
        self.offsets = store.txn_offsets
        self.groups = store.groups
        self.consumer_groups = store.consumer_groups

    async def init(self, transactional_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for a (re)starting transactional producer; fences the older one."""
        self.coordinator.check_timeout(timeout_ms)
        state = await self.fence.get("", transactional_id)
        presented = -1
        if producer_id >= 0 and state is not None:
            if producer_id != state.producer_id:
                raise InvalidProducerIdMapping(f"producer id {producer_id} is not {transactional_id!r}'s")
            presented = epoch
        try:
            conn = await self.fence.connect("", transactional_id, presented, max_epoch=KAFKA_MAX_EPOCH)
        except NotAllowed as exc:
            raise ProducerFenced(str(exc)) from exc
        await self.fence.set_timeout("", transactional_id, timeout_ms)
        return conn.producer_id, conn.epoch

    async def _key(self, transactional_id: str, producer_id: int, epoch: int) -> KeyState:
        state = await self.fence.get("", transactional_id)
        if state is None:
            raise InvalidProducerIdMapping(f"unknown transactional.id {transactional_id!r}")
        if producer_id != state.producer_id:
            raise InvalidProducerIdMapping(f"producer id {producer_id} is not {transactional_id!r}'s")
        if epoch < state.epoch:
            raise ProducerFenced(f"epoch {epoch} of {transactional_id!r} is fenced by epoch {state.epoch}")
        if epoch > state.epoch:
            raise InvalidTxnState(f"epoch {epoch} of {transactional_id!r} was never handed out")
        return state

    async def _open(self, transactional_id: str, producer_id: int, epoch: int) -> TxnId:
        """The producer's open transaction, begun now if there is none."""
        state = await self._key(transactional_id, producer_id, epoch)
        if state.txn:
            info = await self.coordinator.describe(state.txn)
            if info is not None and info.state == "OPEN":
                return TxnId.parse(state.txn)
            if info is not None and info.state in ("COMMITTING", "ABORTING"):
                raise ConcurrentTransactions(f"{transactional_id!r} is still ending {state.txn}")
        timeout = state.timeout_ms or self.coordinator.default_timeout_ms
        txn, _ = await self.fence.begin("", transactional_id, epoch, timeout)
        return txn

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> None:
        txn = await self._open(transactional_id, producer_id, epoch)
        await self.coordinator.add_partitions(txn, partitions, epoch)

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], bool]:
        state = await self._key(transactional_id, producer_id, epoch)
        info = await self.coordinator.describe(state.txn) if state.txn else None
        inside = set(info.partitions) if info is not None and info.state == "OPEN" else set()
        return {p: p in inside for p in partitions}

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> None:
        txn = await self._open(transactional_id, producer_id, epoch)
        await self.coordinator.add_subscriptions(txn, [(OFFSETS_TOPIC, 0, group_id)], epoch)

    async def commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: dict[tuple[str, int], CommittedOffset],
        *,
        generation: int = -1,
        member_id: str = "",
        instance_id: str | None = None,
    ) -> None:
        state = await self._key(transactional_id, producer_id, epoch)
        info = await self.coordinator.describe(state.txn) if state.txn else None
        if info is None or info.state != "OPEN" or (OFFSETS_TOPIC, 0, group_id) not in info.subscriptions:
            raise InvalidTxnState(f"group {group_id!r} was not added to {transactional_id!r}'s transaction")
        if member_id or generation >= 0:
            await self._check_member(group_id, generation, member_id, instance_id)
        await self.offsets.stage(group_id, info.txn_id, offsets)

    async def _check_member(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        """KIP-447: a zombie of an older generation must not commit offsets with its transaction;
        in a consumer group (KIP-848), `generation` is the member epoch."""
        consumer = await self.consumer_groups.load(group_id)
        if consumer is not None:
            try:
                validate_offset_commit(consumer, member_id, generation, transactional=True)
            except GroupError as exc:
                raise UnknownMember(exc.kind.name.lower(), str(exc)) from exc
            return
        group = await self.groups.load(group_id)
        if group is None or member_id not in group.members:
            raise UnknownMember("unknown_member_id", f"{member_id!r} is not a member of {group_id!r}")
        if instance_id is not None and group.instance_owner(instance_id) not in (None, member_id):
            raise UnknownMember("fenced_instance_id", f"instance {instance_id!r} belongs to another member")
        if generation != group.generation:
            raise UnknownMember("illegal_generation", f"generation {generation} is not {group.generation}")

    async def end(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> str:
        """Commit or abort; a retry of an end that already happened answers the same way."""
        state = await self._key(transactional_id, producer_id, epoch)
        if not state.txn:
            raise InvalidTxnState(f"{transactional_id!r} has no transaction to end")
        try:
            # the end script itself refuses the other outcome of a transaction already decided
            return await self.coordinator.end(state.txn, commit, epoch)
        except TransactionNotFound as exc:
            raise InvalidTxnState(f"{transactional_id!r} has no transaction to end") from exc

    async def describe(self, transactional_id: str) -> ProducerState:
        state = await self.fence.get("", transactional_id)
        if state is None:
            raise TransactionNotFound(f"unknown transactional.id {transactional_id!r}")
        info = await self.coordinator.describe(state.txn) if state.txn else None
        return ProducerState(transactional_id, state.producer_id, state.epoch, state.timeout_ms, info)

    async def list(self) -> list[ProducerState]:
        out = []
        for key in await self.fence.list():
            owner, _, tid = key.name.partition("&")
            info = await self.coordinator.describe(key.txn) if key.txn else None
            out.append(ProducerState(tid, key.producer_id, key.epoch, key.timeout_ms, info))
        return out
