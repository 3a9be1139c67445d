"""The transaction coordinator (PIP-31, marker approach).

A transaction is OPEN while it touches partitions and subscriptions. Ending it first makes
COMMITTING or ABORTING durable (the point of no return), then writes one marker per partition and
settles each subscription's pending acks (each step safe to repeat), then records COMMITTED or
ABORTED. Whoever finds a transaction stuck between those steps (this gateway after a crash, or
another one) rolls it forward; the reaper aborts transactions past their timeout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from gateway import telemetry
from gateway.clock import now_ms
from gateway.errors import ErrorCode, GatewayError, InvalidRequest
from gateway.formats.records import build_control_batch
from gateway.store import Store
from gateway.store.txn import Ending, TxnInfo, part_member, sub_member

__all__ = ["TransactionCoordinator", "TxnId", "TxnInfo"]

log = logging.getLogger(__name__)

OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED = "OPEN", "COMMITTING", "COMMITTED", "ABORTING", "ABORTED"


class InvalidTransactionTimeout(GatewayError):
    """The requested timeout is over the configured maximum."""

    code = ErrorCode.INVALID_CONFIG


@dataclass(frozen=True)
class TxnId:
    """PIP-31's id: the coordinator in the high bits, a sequence in the low bits."""

    coordinator: int
    sequence: int

    def __str__(self) -> str:
        return f"{self.coordinator}:{self.sequence}"

    @classmethod
    def parse(cls, text: str) -> TxnId:
        try:
            c, s = text.split(":")
            return cls(int(c), int(s))
        except ValueError:
            raise InvalidRequest(f"not a transaction id: {text!r}") from None


# Settles a transaction's acks on one subscription partition: (topic, partition, subscription, txn, commit).
SubscriptionSettler = Callable[[str, int, str, str, bool], Awaitable[None]]
# Settles what a transaction held on one partition besides its batches: (topic, partition, txn, commit).
PartitionSettler = Callable[[str, int, str, bool], Awaitable[None]]

# Fault injection for crash tests: the gateway kills itself with SIGKILL at the named step.
_CRASH_AT = os.environ.get("GATEWAY_CRASH_AT", "")


def _crash_point(step: str) -> None:
    if _CRASH_AT == step:
        log.warning("crash point %s reached: killing this process", step)
        os.kill(os.getpid(), signal.SIGKILL)


async def _no_fence(key: str) -> int:
    return 0


class TransactionCoordinator:
    def __init__(
        self,
        store: Store,
        *,
        coordinator_id: int = 0,
        default_timeout_ms: int = 60_000,
        max_timeout_ms: int = 900_000,
        keep_finished_ms: int = 3_600_000,
        notify_partition: Callable[[str, int], None] = lambda t, p: None,
        partition_settlers: Mapping[str, PartitionSettler] | None = None,
        settlers: Sequence[SubscriptionSettler] = (),
    ) -> None:
        """`notify_partition` wakes this gateway's readers of a partition given a marker; the
        settlers settle what else a transaction held, every time it ends, a roll-forward included:
        on each subscription (`settlers`), and on the partitions where it recorded a need of their
        kind (`partition_settlers` by kind: the services holding such things record the need with
        `TxnStore.needs` before they hold them)."""
        self.txns = store.txn
        self.notify_partition = notify_partition
        self.coordinator_id = coordinator_id
        self.default_timeout_ms = default_timeout_ms
        self.max_timeout_ms = max_timeout_ms
        self.keep_finished_ms = keep_finished_ms
        self.settlers = list(settlers)
        self.partition_settlers = dict(partition_settlers or {})
        # each running roll-forward: (set once its markers and settlements are done, the whole run)
        self._ending: dict[str, tuple[asyncio.Future[None], asyncio.Task[str]]] = {}
        self._finishing: dict[str, asyncio.Task[str]] = {}  # by transaction key: its last end's final step
        # the transaction.version at which the reaper fences the producer it aborts, by its full key (0: not)
        self.timeout_fence: Callable[[str], Awaitable[int]] = _no_fence

    def check_timeout(self, timeout_ms: int | None) -> int:
        timeout = self.default_timeout_ms if timeout_ms is None or timeout_ms <= 0 else timeout_ms
        if timeout > self.max_timeout_ms:
            raise InvalidTransactionTimeout(
                f"transaction timeout {timeout} ms is over the maximum of {self.max_timeout_ms} ms"
            )
        return timeout

    async def next_id(self) -> TxnId:
        return TxnId(self.coordinator_id, await self.txns.next_sequence())

    @staticmethod
    def own_producer_id(txn: TxnId) -> int:
        """PIP-31: a native transaction is its own producer. Far above the shared producer-id counter."""
        return (1 << 40) + txn.sequence

    async def begin(
        self,
        timeout_ms: int | None = None,
        *,
        producer_id: int | None = None,
        producer_epoch: int = 0,
        owner: str = "",
        group: str = "",
        group_commit_id: int = 0,
    ) -> TxnId:
        """Open a transaction not bound to a transaction key. With a `group` (a full transaction key),
        it is meant for that key's group commit `group_commit_id`: a group commit of the key with that
        id or a later one that leaves it out aborts it (a task that died leaves nothing open long)."""
        timeout = self.check_timeout(timeout_ms)
        txn = await self.next_id()
        pid = producer_id if producer_id is not None else self.own_producer_id(txn)
        await self.txns.create(str(txn), timeout, pid, producer_epoch, owner, group, group_commit_id)
        return txn

    async def add_partitions(self, txn: TxnId | str, partitions: list[tuple[str, int]], epoch: int = -1) -> None:
        await self.txns.add(str(txn), "partition", [part_member(t, p) for t, p in partitions], epoch)

    async def add_subscriptions(
        self, txn: TxnId | str, subs: list[tuple[str, int, str]], epoch: int = -1
    ) -> None:
        await self.txns.add(str(txn), "subscription", [sub_member(t, p, s) for t, p, s in subs], epoch)

    async def settled(self, key: str) -> None:
        """Wait until the last transaction of transaction key `key` (full name) that this gateway
        ended has its outcome recorded: `end_current` answers before that last step, and the
        key's next step must not find its transaction still ending. Its failure is not this
        caller's: the transaction stays unfinished, for the step to be refused as ending still
        (CONCURRENT_TRANSACTIONS, which clients retry) until the reaper rolls it forward."""
        finishing = self._finishing.get(key)
        if finishing is not None and not finishing.done():
            await asyncio.wait((finishing,))

    async def join(self, key: str, producer_id: int, epoch: int, kind: str, members: list[str],
                   expect: list[tuple[str, int]] | None = None, arrived_ms: int | None = None) -> str:
        """Add members (`part_member`s or `sub_member`s by `kind`) to the current transaction of the
        transaction key `key` (full name), opened first when there is none, checking the caller is
        the key's producer in the same step (the store's ProducerRefused when not). `expect`: the
        partitions told first to expect the producer's batches; `arrived_ms`: when the request came
        (`TxnStore.join`: a late one is refused)."""
        await self.settled(key)
        return await self.txns.join(key, producer_id, epoch, self.coordinator_id, self.default_timeout_ms,
                                    self.max_timeout_ms, kind, members, expect=expect, arrived_ms=arrived_ms)

    async def current(self, key: str, producer_id: int, epoch: int, sub: tuple[str, int, str],
                      arrived_ms: int | None = None) -> tuple[str, str, bool]:
        """(id, state, whether subscription `sub` is in it) of transaction key `key`'s current
        transaction ("", "", False: none), checking the caller is its producer in the same step, and
        that it opened before the request came (`arrived_ms`, `TxnStore.current`)."""
        await self.settled(key)
        return await self.txns.current(key, producer_id, epoch, "subscription", sub_member(*sub), arrived_ms)

    async def end_current(
        self, key: str, producer_id: int, epoch: int, commit: bool, *, bump: bool = False,
        next_producer_id: int | None = None, arrived_ms: int | None = None,
    ) -> tuple[str, tuple[int, int]]:
        """`end` of the current transaction of transaction key `key` (full name), checking the caller
        is its producer in the same step (the store's ProducerRefused when not). Answers once every
        marker is written and everything settled, the outcome visible to readers; the final state is
        recorded after (one round trip less to wait for), and the key's next step waits for it
        (`settled`). Kafka answers EndTxn earlier still, before its markers. Returns the state and
        the key's producer id and epoch from now on, which `bump` (transactions V2) moves on in the
        point of no return (see `TxnStore.end`), which refuses a transaction opened after
        `arrived_ms`, when the request came (ConcurrentTransactions: not the one it meant)."""
        await self.settled(key)
        _crash_point("before-point-of-no-return")
        ending = await self.txns.end("", commit, epoch, key=key, producer_id=producer_id, bump=bump,
                                     next_producer_id=next_producer_id, arrived_ms=arrived_ms)
        _crash_point("after-point-of-no-return")
        marked, running = self._rolling(ending.txn_id, ending)
        if not running.done():
            self._finishing[key] = running
            running.add_done_callback(lambda done: self._finishing.pop(key, None) if self._finishing.get(key)
                                      is done else None)
        await asyncio.wait((marked, running), return_when=asyncio.FIRST_COMPLETED)
        if marked.done() and not marked.cancelled():
            return (COMMITTED if ending.state in (COMMITTING, COMMITTED) else ABORTED), ending.key_producer
        return running.result(), ending.key_producer

    async def describe(self, txn: TxnId | str) -> TxnInfo | None:
        return await self.txns.describe(str(txn))

    async def end(self, txn: TxnId | str, commit: bool, epoch: int = -1, *, fence_key: str = "",
                  fence: int = 0) -> str:
        """Commit or abort; returns the final state. Repeating the same request is harmless. With
        `fence` (a transaction.version, 0 for none) the producer of transaction key `fence_key` is
        fenced in the point of no return when the transaction is its current one (`TxnStore.end`)."""
        _crash_point("before-point-of-no-return")
        ending = await self.txns.end(str(txn), commit, epoch, fence_key=fence_key, fence=fence)
        _crash_point("after-point-of-no-return")
        return await self._complete(str(txn), ending)

    async def commit_group(
        self, txn_ids: list[str], *, key: str = "", epoch: int = -1, commit_id: int | None = None
    ) -> bool:
        """Commit several transactions at one point of no return (COMMITTING for all, in one script),
        then write each one's markers; a crash in between is rolled forward like any commit. With a
        transaction key (its full name) the caller's `epoch` must be the key's; a `commit_id` at or
        below the key's last commit id is a retried commit: nothing more becomes visible, and the
        OPEN transactions given are aborted. The key's other group members up to `commit_id` (see
        `begin`) are aborted too. Returns False for a duplicate."""
        _crash_point("before-point-of-no-return")
        duplicate, states, orphans = await self.txns.commit_group(txn_ids, key, epoch, commit_id)
        _crash_point("after-point-of-no-return")
        if orphans:
            log.info("group commit %s of %s aborts transactions left behind: %s", commit_id, key, ", ".join(orphans))
        ended = [*zip(txn_ids, states, strict=True), *((o, ABORTING) for o in orphans)]
        await asyncio.gather(*(self._finish(t, s) for t, s in ended))
        return not duplicate

    async def _finish(self, txn_id: str, state: str) -> str:
        """Roll a transaction forward from a state decided elsewhere (a group commit)."""
        return await self._complete(txn_id, await self.txns.end(txn_id, state in (COMMITTING, COMMITTED)))

    async def _complete(self, txn_id: str, ending: Ending) -> str:
        """Markers, subscription settlement, final state; concurrent callers share one run."""
        _, running = self._rolling(txn_id, ending)
        return await asyncio.shield(running)

    def _rolling(self, txn_id: str, ending: Ending) -> tuple[asyncio.Future[None], asyncio.Task[str]]:
        """The roll-forward of `txn_id` running, started now when none is: (done once its markers
        and settlements are, the whole run)."""
        run = self._ending.get(txn_id)
        if run is None:
            marked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            running = asyncio.ensure_future(self._roll_forward(txn_id, ending, marked))
            run = self._ending[txn_id] = (marked, running)
            running.add_done_callback(lambda done: self._rolled(txn_id, marked, done))
        return run

    def _rolled(self, txn_id: str, marked: asyncio.Future[None], done: asyncio.Task[str]) -> None:
        self._ending.pop(txn_id, None)
        marked.cancel()  # a run that failed before its markers were done
        if not done.cancelled() and (exc := done.exception()) is not None and marked.done() \
                and not marked.cancelled():
            log.warning("transaction %s: could not record its end (%s); it is rolled forward later", txn_id, exc)

    async def _roll_forward(self, txn_id: str, ending: Ending, marked: asyncio.Future[None]) -> str:
        if ending.state in (COMMITTED, ABORTED):
            return ending.state
        commit = ending.state == COMMITTING
        # subscriptions settle beside the markers (nothing of theirs waits for one); a transaction of
        # none, a Kafka producer's without offsets, starts no task for them
        subs = asyncio.ensure_future(self._settle_subscriptions(txn_id, ending.subscriptions, commit)) \
            if ending.subscriptions and self.settlers else None
        try:
            await self._write_markers(txn_id, ending, commit)
        finally:
            if subs is not None:
                await subs
        marked.set_result(None)
        telemetry.uncounted_round_trips()  # an end answered at its markers does not wait for this one
        _crash_point("before-finish")
        return await self.txns.finish(txn_id, self.keep_finished_ms)

    async def _write_markers(self, txn_id: str, ending: Ending, commit: bool) -> None:
        """Markers, each partition's settlers after its marker: only the kinds the transaction
        recorded there (every kind everywhere for one opened by an older gateway)."""
        marker = build_control_batch(commit, ending.producer_id, ending.producer_epoch)
        kinds: dict[tuple[str, int], list[str]] = {}
        if ending.marked:
            for kind, topic, partition in ending.settles:
                kinds.setdefault((topic, partition), []).append(kind)
        else:
            kinds = {tp: list(self.partition_settlers) for tp in ending.partitions}
        # every partition's marker in one round trip; under the crash test of that step, the first
        # alone, so a crash between two partitions' markers (a cluster's nodes fail apart) is tested
        split = 1 if _CRASH_AT == "after-first-marker" else len(ending.partitions)
        first, rest = ending.partitions[:split], ending.partitions[split:]
        # a transaction that is its own producer (PIP-31) has no later one a late marker could end:
        # its end is not remembered on the partition, which would keep one entry a transaction
        named = "" if ending.producer_id == self.own_producer_id(TxnId.parse(txn_id)) else txn_id
        for group in (first, rest):
            if not group:
                continue
            await self.txns.write_markers(group, ending.producer_id, ending.producer_epoch, commit, marker,
                                         txn_id=named)
            for topic, partition in group:
                self.notify_partition(topic, partition)
            settling = [self.partition_settlers[kind](t, p, txn_id, commit)
                        for t, p in group for kind in kinds.get((t, p), ()) if kind in self.partition_settlers]
            if settling:
                await asyncio.gather(*settling)
            if group is first:
                _crash_point("after-first-marker")

    async def write_markers(self, partitions: list[tuple[str, int]], producer_id: int, producer_epoch: int,
                            commit: bool) -> None:
        """Markers on these partitions as an operator asks for them (Kafka's WriteTxnMarkers, from
        `kafka-transactions abort`) for a transaction its coordinator will not finish: appended as
        Kafka appends them, whether or not the producer has a transaction open there, and refused
        for an epoch older than the producer's (InvalidProducerEpoch). The coordinator's own record
        of the transaction is left as it is."""
        marker = build_control_batch(commit, producer_id, producer_epoch)
        await self.txns.write_markers(partitions, producer_id, producer_epoch, commit, marker, always=True)
        for topic, partition in partitions:
            self.notify_partition(topic, partition)

    async def _settle_subscriptions(self, txn_id: str, subs: list[tuple[str, int, str]], commit: bool) -> None:
        for topic, partition, sub in subs:
            for settle_sub in self.settlers:
                await settle_sub(topic, partition, sub, txn_id, commit)

    def reaper(self) -> Callable[[], Awaitable[int]]:
        """The reaper's pass for one holding of its role: `recover`, the first pass giving every open
        transaction its whole timeout again first (`TxnStore.take_over`). A reaper that has just
        taken over (its gateway restarted, or the holder's lease lapsed) would otherwise abort at
        once the transactions whose timeout ran out while none ran, fencing their producers as
        they reconnect (librdkafka backs off up to 10 s between attempts): a live producer would
        hear PRODUCER_FENCED, fatal to it, with no other instance of it anywhere. Kafka 4.4's
        coordinator spares them by not looking at first: its first abortTimedOutTransactions comes
        one transaction.abort.timed.out.transaction.cleanup.interval.ms after it starts."""
        taken = False

        async def reap() -> int:
            nonlocal taken
            if taken:
                return await self.recover()
            now = now_ms()
            await self.txns.take_over(now)
            taken = True
            return await self.recover(now)  # overdue as of the takeover: none open, however slow this pass

        return reap

    async def recover(self, now: int | None = None) -> int:
        """Roll forward what a dead coordinator left between steps, and abort what has expired (by
        `now`, epoch milliseconds, the wall clock's unless given)."""
        handled = 0
        for txn_id in await self.txns.due(now_ms() if now is None else now):
            try:
                info = await self.txns.describe(txn_id)
                if info is None:
                    continue
                if info.state == OPEN:
                    log.info("transaction %s timed out after %d ms: aborting", txn_id, info.timeout_ms)
                    fence = await self.timeout_fence(info.owner)
                    await self.end(txn_id, commit=False, fence_key=info.owner, fence=fence)
                else:
                    log.info("rolling transaction %s forward from %s", txn_id, info.state)
                    await self.end(txn_id, commit=info.state in (COMMITTING, COMMITTED))
                handled += 1
            except GatewayError as exc:
                log.warning("could not end transaction %s: %s", txn_id, exc)
        return handled

    async def open_transactions(self) -> list[TxnInfo]:
        out = []
        for txn_id in await self.txns.unfinished():
            info = await self.txns.describe(txn_id)
            if info is not None:
                out.append(info)
        return out
