"""Kafka's transactional producer on our coordinator and transaction keys.

A transactional.id is a transaction key (owner "anonymous" until authentication exists):
InitProducerId is a connect (new epoch, the older epoch's transaction aborted, its producer
fenced). A transaction begins implicitly with the first partition or group added to it. Offsets
sent with TxnOffsetCommit wait beside the group until the transaction ends, then are applied or
dropped by one script, so a consume-transform-produce cycle commits exactly once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gateway.domain.features import TRANSACTION_VERSION, Features
from gateway.domain.fence import ANONYMOUS, KAFKA_MAX_EPOCH, FenceService, KeyState, full_key
from gateway.domain.groups.consumer import validate_offset_commit
from gateway.domain.groups.errors import GroupError
from gateway.domain.groups.streams import validate_offset_commit as validate_streams_commit
from gateway.domain.txn import InvalidTransactionTimeout, SubscriptionSettler, TransactionCoordinator, TxnInfo
from gateway.errors import (
    ConcurrentTransactions,
    ErrorCode,
    GatewayError,
    InvalidProducerEpoch,
    InvalidTxnState,
    NotAllowed,
    ProducerFenced,
    TransactionNotFound,
)
from gateway.store import Store
from gateway.store.groups import CommittedOffset
from gateway.store.txn import ProducerRefused, part_member, sub_member

__all__ = ["CommittedOffset", "InvalidProducerIdMapping", "ProducerState", "TransactionalProducers",
           "UnknownMember", "group_offsets_settler", "subscription_settler"]

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


def subscription_settler(settle: SubscriptionSettler) -> SubscriptionSettler:
    """`settle` for every subscription of a transaction but the groups whose offsets it staged
    (`group_offsets_settler` settles those)."""

    async def settle_subscription(topic: str, partition: int, name: str, txn_id: str, commit: bool) -> None:
        if topic != OFFSETS_TOPIC:
            await settle(topic, partition, name, txn_id, commit)

    return settle_subscription


def group_offsets_settler(store: Store) -> SubscriptionSettler:
    """The coordinator's settler for the group offsets a Kafka transaction staged (TxnOffsetCommit):
    applied or dropped when it ends, a roll-forward after a restart included, so the wiring
    registers it whether or not this gateway serves Kafka's transactional producers."""
    offsets = store.txn_offsets

    async def settle(topic: str, partition: int, group_id: str, txn_id: str, commit: bool) -> None:
        if topic == OFFSETS_TOPIC:
            await offsets.settle(group_id, txn_id, commit)

    return settle


def _refused(exc: ProducerRefused, transactional_id: str, producer_id: int, epoch: int) -> GatewayError:
    """The error a transactional producer is given when it is not its transactional.id's producer."""
    if exc.why == "unknown":
        return InvalidProducerIdMapping(f"unknown transactional.id {transactional_id!r}")
    if exc.why == "pid":
        return InvalidProducerIdMapping(f"producer id {producer_id} is not {transactional_id!r}'s")
    if exc.why == "fenced":
        return ProducerFenced(f"epoch {epoch} of {transactional_id!r} is fenced by epoch {exc.epoch}")
    return InvalidTxnState(f"epoch {epoch} of {transactional_id!r} was never handed out")


class TransactionalProducers:
    def __init__(self, store: Store, coordinator: TransactionCoordinator, fence: FenceService) -> None:
        self.coordinator = coordinator
        self.features = Features(store.features)
        coordinator.timeout_fence = self._timeout_fence
        self.fence = fence
        self.offsets = store.txn_offsets
        self.groups = store.groups
        self.consumer_groups = store.consumer_groups
        self.streams_groups = store.streams_groups

    async def _timeout_fence(self, key: str) -> int:
        """The transaction.version at which a timed-out transaction's abort fences its producer (0:
        not at all, for keys of other owners, the native face's). As Kafka 4.4's
        TransactionCoordinator.abortTimedOutTransactions, it follows the cluster's level, not the
        transaction's: its epoch moves on by one (prepareFenceProducerEpoch) so that a late produce
        or EndTxn of the old epoch is fenced, and at level 2 the old epoch is kept as the last
        (prepareAbortOrCommit), with which InitProducerId carries on in the new one (KIP-360)."""
        if not key.startswith(ANONYMOUS + "&"):
            return 0
        return max(1, await self.features.level(TRANSACTION_VERSION))

    async def init(self, transactional_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1,
                   arrived_ms: int | None = None) -> tuple[int, int]:
        """(producer id, epoch) for a (re)starting transactional producer; fences the older one. A
        producer presenting another producer id than the transactional.id's is fenced, as by Kafka's
        TransactionCoordinator.handleInitProducerId (isValidProducerId). A new producer's request
        that reached this gateway (`arrived_ms`) before the key's epoch was last handed out is
        ConcurrentTransactions (retriable): its producer sent it again and was answered, and this one,
        held up on its way to Redis, would fence it (`FenceStore.connect`)."""
        self.coordinator.check_timeout(timeout_ms)
        await self.coordinator.settled(full_key("", transactional_id))
        state = await self.fence.get("", transactional_id)
        presented = -1
        if producer_id >= 0 and state is not None:
            if producer_id != state.producer_id:
                raise ProducerFenced(f"producer id {producer_id} is not {transactional_id!r}'s")
            presented = epoch
        try:
            conn = await self.fence.connect("", transactional_id, presented, max_epoch=KAFKA_MAX_EPOCH, keep_last=True,
                                            arrived_ms=arrived_ms)
        except NotAllowed as exc:
            raise ProducerFenced(str(exc)) from exc
        await self.fence.set_timeout("", transactional_id, timeout_ms)
        return conn.producer_id, conn.epoch

    async def _key(self, transactional_id: str, producer_id: int, epoch: int) -> KeyState:
        state = await self.fence.get("", transactional_id)
        why = ("unknown" if state is None else "pid" if producer_id != state.producer_id
               else "fenced" if epoch < state.epoch else "future" if epoch > state.epoch else "")
        if why:
            raise _refused(ProducerRefused(why, -1 if state is None else state.epoch), transactional_id,
                           producer_id, epoch)
        assert state is not None
        return state

    async def _join(self, transactional_id: str, producer_id: int, epoch: int, kind: str, members: list[str],
                    expect: list[tuple[str, int]] | None = None, arrived_ms: int | None = None) -> None:
        """Add to the producer's open transaction, begun now if there is none: one step that checks
        the producer against its transactional.id too (after `expect`'s partitions expect it). A
        request that reached this gateway (`arrived_ms`) before the producer's last transaction was
        decided, with none open now, is ConcurrentTransactions (`TxnStore.join`)."""
        try:
            await self.coordinator.join(full_key("", transactional_id), producer_id, epoch, kind, members, expect,
                                        arrived_ms)
        except ProducerRefused as exc:
            raise _refused(exc, transactional_id, producer_id, epoch) from None
        except ConcurrentTransactions as exc:
            raise ConcurrentTransactions(f"{transactional_id!r} is still ending its transaction") from exc
        except GatewayError as exc:
            if exc.code == ErrorCode.INVALID_CONFIG:
                raise InvalidTransactionTimeout(f"{transactional_id!r}: {exc}") from exc
            raise

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]],
        *, verified: bool = False, arrived_ms: int | None = None,
    ) -> None:
        """Add partitions to the producer's transaction. `verified` (transactions V1, whose Produce
        is checked: `LogService.append`'s verify_txn): each partition is told first to expect the
        transaction's first batch, so that a batch arriving after the transaction ended (and its
        marker removed the expectation) opens nothing, as KIP-890 part 1's verification refuses it."""
        await self._join(transactional_id, producer_id, epoch, "partition", [part_member(t, p) for t, p in partitions],
                         expect=partitions if verified else None, arrived_ms=arrived_ms)

    async def late_write_error(self, transactional_id: str, producer_id: int, epoch: int) -> GatewayError:
        """Why a transactional batch the partition did not expect is refused: its producer's epoch
        moved on (InvalidProducerEpoch), else no transaction of it adds that partition now
        (InvalidTxnState) -- as Kafka's leader answers from its verification with the coordinator."""
        state = await self.fence.get("", transactional_id)
        if state is not None and state.producer_id == producer_id and epoch < state.epoch:
            return InvalidProducerEpoch(f"{transactional_id!r}: epoch {epoch} is older than {state.epoch}")
        return InvalidTxnState(f"{transactional_id!r} has no open transaction writing this partition")

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], bool]:
        await self.coordinator.settled(full_key("", transactional_id))
        state = await self._key(transactional_id, producer_id, epoch)
        info = await self.coordinator.describe(state.txn) if state.txn else None
        inside = set(info.partitions) if info is not None and info.state == "OPEN" else set()
        return {p: p in inside for p in partitions}

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                          arrived_ms: int | None = None) -> None:
        await self._join(transactional_id, producer_id, epoch, "subscription", [sub_member(OFFSETS_TOPIC, 0, group_id)],
                         arrived_ms=arrived_ms)

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
        arrived_ms: int | None = None,
    ) -> None:
        """Stage the offsets in the producer's open transaction, which the group was added to. A
        request that reached this gateway (`arrived_ms`) before that transaction opened is
        ConcurrentTransactions: held up on its way to Redis, it meant one before, and would stage
        older offsets in this one."""
        # the producer's transaction and the group's member, read side by side, then the staging
        current = self.coordinator.current(full_key("", transactional_id), producer_id, epoch,
                                           (OFFSETS_TOPIC, 0, group_id), arrived_ms)
        member = self._check_member(group_id, generation, member_id, instance_id) \
            if member_id or generation >= 0 else asyncio.sleep(0)
        found, checked = await asyncio.gather(current, member, return_exceptions=True)
        if isinstance(found, ProducerRefused):
            raise _refused(found, transactional_id, producer_id, epoch)
        if isinstance(found, BaseException):
            raise found
        txn_id, state, added = found
        if state != "OPEN" or not added:
            raise InvalidTxnState(f"group {group_id!r} was not added to {transactional_id!r}'s transaction")
        if isinstance(checked, BaseException):
            raise checked
        await self.offsets.stage(group_id, txn_id, offsets)

    async def unstable_offsets(self, group_id: str, parts: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """KIP-447: those of `parts` whose offsets an open transaction has yet to commit for the
        group, which an OffsetFetch that requires stable offsets must not be given (Kafka's
        OffsetMetadataManager.fetchOffsets answers them UNSTABLE_OFFSET_COMMIT): a new owner of a
        partition waits for its former owner's transaction to end, so it reads on from where that
        transaction leaves the offsets."""
        return await self.offsets.pending(group_id, parts)

    async def _check_member(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        """KIP-447: a zombie of an older generation must not commit offsets with its transaction;
        in a consumer group (KIP-848), `generation` is the member epoch."""
        # a group is of one protocol or the other: both read side by side
        streams, consumer, group = await asyncio.gather(
            self.streams_groups.load(group_id), self.consumer_groups.load(group_id), self.groups.load(group_id))
        if streams is not None:
            try:
                validate_streams_commit(streams, member_id, generation)
            except GroupError as exc:
                raise UnknownMember(exc.kind.name.lower(), str(exc)) from exc
            return
        if consumer is not None:
            try:
                validate_offset_commit(consumer, member_id, generation, transactional=True)
            except GroupError as exc:
                raise UnknownMember(exc.kind.name.lower(), str(exc)) from exc
            return
        if group is None or member_id not in group.members:
            raise UnknownMember("unknown_member_id", f"{member_id!r} is not a member of {group_id!r}")
        if instance_id is not None and group.instance_owner(instance_id) not in (None, member_id):
            raise UnknownMember("fenced_instance_id", f"instance {instance_id!r} belongs to another member")
        if generation != group.generation:
            raise UnknownMember("illegal_generation", f"generation {generation} is not {group.generation}")

    async def end(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, *, bump: bool = False,
        arrived_ms: int | None = None,
    ) -> tuple[str, tuple[int, int]]:
        """Commit or abort; a retry of an end that already happened answers the same way. The state,
        and the producer id and epoch the producer goes on with: with `bump` (transactions V2,
        EndTxn v5) the next epoch, or a new producer id at epoch 0 after the last one, as Kafka's
        TransactionMetadata.prepareAbortOrCommit hands them out. `arrived_ms`: when the request came
        (Coordinator.end_current)."""
        next_pid = await self.fence.log_store.allocate_producer_id() if bump and epoch >= KAFKA_MAX_EPOCH else None
        try:
            # the end script itself refuses the other outcome of a transaction already decided
            return await self.coordinator.end_current(full_key("", transactional_id), producer_id, epoch, commit,
                                                      bump=bump, next_producer_id=next_pid, arrived_ms=arrived_ms)
        except ProducerRefused as exc:
            raise _refused(exc, transactional_id, producer_id, epoch) from None
        except TransactionNotFound as exc:
            raise InvalidTxnState(f"{transactional_id!r} has no transaction to end") from exc

    async def describe(self, transactional_id: str) -> ProducerState:
        await self.coordinator.settled(full_key("", transactional_id))
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
