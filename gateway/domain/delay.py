"""Delayed delivery (PIP-195 on Redis): messages held per partition until their delivery time,
then moved into the log by a scheduler, so every subscription sees each of them once.

Faces call `DelayService.schedule` (or `send`) with whole RecordBatch v2 blobs and an absolute
delivery time; the blob reaches the log unchanged. Inside a transaction the messages wait under the
transaction id until the coordinator settles the partition (`settle_txn`). Any number of
`DelayScheduler`s may run (one per gateway): each move step is one atomic script per partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.clock import now_ms
from gateway.domain.memory import MemoryBudget
from gateway.domain.roles import NO_LEASE, Lease
from gateway.errors import CorruptMessage, NotAllowed, log_failure
from gateway.formats.records import BatchBuilder, iter_records, parse_header, split_batches
from gateway.store import Store
from gateway.store.delay import DelayConfig, DelayItem, DelayStats, Moved, Part, Scheduled

__all__ = ["DELIVER_AFTER_HEADER", "DELIVER_AT_HEADER", "DelayConfig", "DelayRequest", "DelayScheduler", "DelayService", "DelayStats", "Scheduled"]

log = logging.getLogger(__name__)


DELIVER_AT_HEADER = "x-deliver-at"  # epoch milliseconds
DELIVER_AFTER_HEADER = "x-deliver-after"  # milliseconds after the gateway receives it


def deliver_at(headers: list[tuple[str, bytes | None]], now: int) -> int | None:
    """A record's delivery time from its delay headers, None when it has none (or they do not parse)."""
    for name, value in headers:
        if value is None or name not in (DELIVER_AT_HEADER, DELIVER_AFTER_HEADER):
            continue
        try:
            n = int(value.decode())
        except (UnicodeDecodeError, ValueError):
            continue
        return n if name == DELIVER_AT_HEADER else now + n
    return None


@dataclass(frozen=True)
class DelayRequest:
    """One delayed message (or batch of them, all due together) for one partition."""

    topic: str
    partition: int
    batch: bytes
    deliver_at_ms: int
    txn_id: str | None = None


class DelayService:
    settle_kind = "delay"
    """What a transaction records of a partition where it holds delayed messages (`settle_txn`)."""

    def __init__(
        self,
        store: Store,
        config: DelayConfig | None = None,
        *,
        notify_partition: Callable[[str, int], None] = lambda t, p: None,
        clock: Callable[[], int] = now_ms,
        memory: MemoryBudget | None = None,
    ) -> None:
        self.memory = memory or MemoryBudget(store)  # never sampled: admits every message
        self.index = store.delay if config is None else store.delay.shaped(config)
        self.txns = store.txn
        self.notify_partition = notify_partition  # LogService.notifier.notify: wakes log readers
        self.clock = clock
        self._schedulers: list[DelayScheduler] = []

    async def accept(
        self, topic: str, partition: int, blob: bytes | memoryview, txn_id: str | None = None
    ) -> tuple[bytes | memoryview | None, int]:
        """Take a produced records blob of a delay-enabled topic apart by its records' delay headers.

        Records due later are held (each as a batch of one, compression kept); the rest come back
        to be appended now: the blob itself when no record asks for a delay, else a new batch of
        those records. Returns (what to append now or None, number of records held)."""
        now = self.clock()
        keep: list[bytes | memoryview] = []
        held: list[DelayRequest] = []
        for h, view in split_batches(blob):
            records = list(iter_records(view))
            due = [deliver_at(r.headers, now) for r in records]
            if h.control or all(d is None or d <= now for d in due):
                keep.append(view)
                continue
            now_part = BatchBuilder(h.compression)
            for rec, at in zip(records, due, strict=True):
                if at is None or at <= now:
                    now_part.append(rec.value, rec.key, rec.headers, rec.timestamp)
                else:
                    one = BatchBuilder(h.compression)
                    one.append(rec.value, rec.key, rec.headers, rec.timestamp)
                    held.append(DelayRequest(topic, partition, one.build(), at, txn_id))
            if len(now_part):
                keep.append(now_part.build())
        if held:
            await self.schedule(held)
        if not keep:
            return None, len(held)
        if len(keep) == 1:
            return keep[0], len(held)
        return b"".join(bytes(k) for k in keep), len(held)

    @property
    def config(self) -> DelayConfig:
        return self.index.config

    async def schedule(self, requests: list[DelayRequest]) -> list[Scheduled]:
        """Hold each message until its time; one already due is appended to the log at once.
        One script call per partition, all in one round trip. Transactional requests are held
        under their transaction and report `held` 0 until it commits. Refused whole (`StorageFull`)
        while a partition's Redis primary is at its memory high-water mark."""
        items = [self._item(r) for r in requests]
        for r in requests:
            self.memory.admit(r.topic, r.partition, len(r.batch))
        now = self.clock()
        groups: dict[tuple[str, int, str | None], list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            groups[(r.topic, r.partition, r.txn_id)].append(i)
        out: list[Scheduled] = [Scheduled(0, -1)] * len(requests)
        plain = [(k, idx) for k, idx in groups.items() if k[2] is None]
        for (topic, partition, txn_id), idx in groups.items():
            if txn_id is not None:
                await self.txns.needs(txn_id, self.settle_kind, [(topic, partition)])
                await self.index.hold_in_txn(topic, partition, txn_id, [items[i] for i in idx])
        if plain:
            done = await self.index.schedule(now, [(t, p, [items[i] for i in idx]) for (t, p, _), idx in plain])
            for ((topic, partition, _), idx), res in zip(plain, done, strict=True):
                for i in idx:
                    out[i] = res
                if res.held < len(idx):
                    self.notify_partition(topic, partition)
                if res.first_due_ms >= 0:
                    self._wake(res.first_due_ms)
        return out

    async def send(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        *,
        deliver_at_ms: int | None = None,
        deliver_after_ms: int | None = None,
        txn_id: str | None = None,
    ) -> Scheduled:
        """One message, by absolute time or by delay (the native producer's deliver_at/deliver_after)."""
        if (deliver_at_ms is None) == (deliver_after_ms is None):
            raise ValueError("give exactly one of deliver_at_ms and deliver_after_ms")
        at = deliver_at_ms if deliver_at_ms is not None else self.clock() + (deliver_after_ms or 0)
        (res,) = await self.schedule([DelayRequest(topic, partition, batch, at, txn_id)])
        return res

    async def commit_txn(self, topic: str, partition: int, txn_id: str) -> Scheduled:
        res = await self.index.commit_txn(self.clock(), topic, partition, txn_id)
        self.notify_partition(topic, partition)
        self._wake(self.clock())
        return res

    async def abort_txn(self, topic: str, partition: int, txn_id: str) -> None:
        await self.index.abort_txn(topic, partition, txn_id)

    async def settle_txn(self, topic: str, partition: int, txn_id: str, commit: bool) -> None:
        """The transaction coordinator's partition hook; repeating it is harmless."""
        if commit:
            await self.commit_txn(topic, partition, txn_id)
        else:
            await self.abort_txn(topic, partition, txn_id)

    async def stats(self, topic: str, partition: int) -> DelayStats:
        return await self.index.stats(topic, partition)

    def scheduler(self, *, max_sleep: float = 1.0, lease: Lease = NO_LEASE) -> DelayScheduler:
        """A scheduler woken in-process whenever this service schedules something earlier; under
        the scheduler role's `lease` when there are several gateways."""
        s = DelayScheduler(self, max_sleep=max_sleep, lease=lease)
        self._schedulers.append(s)
        return s

    def _wake(self, at_ms: int) -> None:
        for s in self._schedulers:
            s.wake(at_ms)

    @staticmethod
    def _item(r: DelayRequest) -> DelayItem:
        h = parse_header(r.batch)
        if h.size != len(r.batch) or h.record_count < 1 or h.control:
            raise CorruptMessage("a delayed message is exactly one non-control record batch")
        return DelayItem(r.deliver_at_ms, bytes(r.batch), h.record_count, h.max_timestamp)


class DelayScheduler:
    """Moves due messages into the logs. Sleeps until the earliest delivery time over every
    partition, woken early by schedules in this process; `max_sleep` bounds how late it notices a
    schedule made by another gateway."""

    def __init__(self, service: DelayService, *, max_sleep: float = 1.0, lease: Lease = NO_LEASE) -> None:
        self.service = service
        self.index = service.index
        self.max_sleep = max_sleep
        self.lease = lease
        self.moved = 0
        self._wakeup = asyncio.Event()
        self._until_ms: int | None = None
        self._stopping = False

    def stop(self) -> None:
        """Ask `run` to return after its current step (the staged-shutdown path)."""
        self._stopping = True
        self._wakeup.set()

    def wake(self, at_ms: int) -> None:
        if self._until_ms is None or at_ms < self._until_ms:
            self._wakeup.set()

    async def step(self) -> int:
        """Move everything due now; returns how many messages moved."""
        total = 0
        while True:
            now = self.service.clock()
            parts = await self.index.due_partitions(now)
            if not parts:
                return total
            results = await self.index.move(now, parts, role_epoch=self.lease.epoch)
            busy = False
            for part, res in zip(parts, results, strict=True):
                if isinstance(res, NotAllowed):
                    log.warning("delay scheduler fenced by a newer holder of its role on %s-%d", *part)
                    self.lease.until = 0.0
                    return total
                if isinstance(res, Exception):
                    log.warning("delayed messages of %s-%d not moved: %s", *part, res)
                    continue
                total += self._moved(part, res)
                busy = busy or res.moved >= self.index.config.move_limit
            if not busy:
                return total

    def _moved(self, part: Part, res: Moved) -> int:
        if res.moved:
            self.moved += res.moved
            self.service.notify_partition(*part)
        return res.moved

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            with contextlib.suppress(ValueError):
                self.service._schedulers.remove(self)  # a role that moved on is woken no more

    async def _run(self) -> None:
        await self.index.resync()
        while not self._stopping and self.lease.held():
            self._wakeup.clear()
            try:
                await self.step()
                earliest = await self.index.earliest_due()
            except Exception as exc:
                log_failure(log, "delay scheduler", exc, "retrying")
                earliest = None
            self._until_ms = earliest
            timeout = self.max_sleep
            if earliest is not None:
                timeout = min(timeout, max(0.0, (earliest - self.service.clock()) / 1000))
            if timeout > 0:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel racing a wake-up
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wakeup.wait()
            self._until_ms = None
