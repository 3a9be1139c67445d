"""The producer: records batched per partition into RecordBatch v2, sent idempotently.

Each partition has at most one batch in flight, so sequences never overtake each other; while it
is out, the next batch fills. A retriable failure resends the same bytes (the gateway's dedupe
makes that safe) until `send_timeout`; a batch that finally fails takes a fresh producer id with it,
so the sequences of later batches start clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import time
from collections import deque
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from gateway.client import chunks
from gateway.client.errors import ClientClosed, ConnectionLost
from gateway.client.message import EVENT_TIME_HEADER, MessageId
from gateway.errors import GatewayError, OutOfOrderSequence, Timeout
from gateway.formats.partitioner import partition_for_key
from gateway.formats.records import BatchBuilder, Compression
from gateway.pb import gateway_pb2 as pb

if TYPE_CHECKING:
    from gateway.client.client import Client
    from gateway.client.schema import Typed
    from gateway.client.transaction import Transaction

Headers = Mapping[str, bytes | str | None] | Iterable[tuple[str, bytes | str | None]]


def _to_bytes(v: bytes | str | None) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def _plain(v: object, what: str) -> bytes | str | None:
    if v is None or isinstance(v, bytes | str):
        return v
    raise TypeError(f"a {what} is bytes, str or None (on a producer with a schema for it, a value of the "
                    f"schema), not {type(v).__name__}")


class _Lane:
    """A transaction's records for one partition, batched apart from the producer's own; one batch
    in flight at a time, so the transaction's sequences never overtake each other."""

    def __init__(self) -> None:
        self.open: _Batch | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.ready: deque[_Batch] = deque()
        self.sender: asyncio.Task[None] | None = None


def _epoch_ms(at: datetime | int | None) -> int:
    if at is None:
        return 0
    ms = round(at.timestamp() * 1000) if isinstance(at, datetime) else int(at)
    return max(ms, 1)  # 0 means "now" on the wire; a time long past is delivered at once either way


def _millis(after: timedelta | float | None) -> int:
    if after is None:
        return 0
    seconds = after.total_seconds() if isinstance(after, timedelta) else float(after)
    return max(1, round(seconds * 1000))


class _Batch:
    """Records on their way to one partition, and the futures waiting for their ids."""

    def __init__(self, compression: Compression) -> None:
        self.builder = BatchBuilder(compression)
        self.futures: list[asyncio.Future[MessageId] | None] = []  # None: a message queued without one
        self.sequence = -1
        self.producer_id = -1
        self.wire: bytes = b""


def creation(topic: str, name: str, acks: pb.Acks, send_timeout: float, resume: int = 0) -> pb.Request:
    """The CreateProducer request of a producer (`resume`: the id it had, to keep its dedupe)."""
    return pb.Request(create_producer=pb.CreateProducer(
        topic=topic, producer_name=name, resume_producer_id=resume, acks=acks,
        replica_timeout_ms=int(send_timeout * 1000)))


class Producer:
    def __init__(
        self,
        client: Client,
        topic: str,
        *,
        handle: int,
        producer_id: int,
        partitions: int,
        name: str,
        batching: bool,
        linger_ms: float,
        batch_max_messages: int,
        batch_max_bytes: int,
        compression: Compression,
        send_timeout: float,
        acks: pb.Acks = pb.LEADER,
        chunk_bytes: int = 0,
        typed: Typed | None = None,
    ) -> None:
        """`chunk_bytes`: a plain message whose batch would be larger is sent in chunks below it; 0: never.
        `typed`: the schemas values and keys are serialized by (gateway.client.schema)."""
        self.client = client
        self._typed = typed
        self._chunk_bytes = chunk_bytes
        self._acks = acks
        self.topic = topic
        self.producer_name = name
        self.partitions = partitions
        self._handle = handle
        self._producer_id = producer_id
        self._batching = batching
        self._linger = linger_ms / 1000
        self._max_messages = batch_max_messages if batching else 1
        self._max_bytes = batch_max_bytes
        self._compression = compression
        self._send_timeout = send_timeout
        self._open: dict[int, _Batch] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._ready: dict[int, deque[_Batch]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._sequences: dict[int, int] = {}
        self._alone: set[asyncio.Future[MessageId]] = set()  # delayed sends, each alone
        self._lanes: dict[tuple[Transaction, int], _Lane] = {}
        self._round_robin = itertools.count()
        self._sticky = next(self._round_robin) % partitions
        self._closed = False
        self._in_watermark_set = False

    @property
    def producer_id(self) -> int:
        return self._producer_id

    async def send(
        self,
        value: object,
        key: object = None,
        headers: Headers | None = None,
        event_time: int | None = None,
        *,
        partition: int | None = None,
        txn: Transaction | None = None,
        deliver_at: datetime | int | None = None,
        deliver_after: timedelta | float | None = None,
    ) -> MessageId:
        """Send one message and return its id once the gateway has stored it.

        `txn`: the message counts only if the transaction commits (ExpiredTransactionError once it
        has ended or was fenced). `deliver_at` (datetime or epoch ms) or `deliver_after` (timedelta or
        seconds): subscriptions get the message at that time, not before; a time already past
        delivers it at once. A message sent with a delivery time has no offset until it is delivered:
        its id says offset -1 (as the Kafka face answers -1)."""
        return await self.send_async(value, key, headers, event_time, partition=partition, txn=txn,
                                     deliver_at=deliver_at, deliver_after=deliver_after)

    def send_async(
        self,
        value: object,
        key: object = None,
        headers: Headers | None = None,
        event_time: int | None = None,
        *,
        partition: int | None = None,
        txn: Transaction | None = None,
        deliver_at: datetime | int | None = None,
        deliver_after: timedelta | float | None = None,
    ) -> asyncio.Future[MessageId]:
        """Queue a message; the future resolves to its id. Many of these fill one batch (messages in
        a transaction or with a delivery time go alone, apart from the others)."""
        if deliver_at is not None and deliver_after is not None:
            raise ValueError("give deliver_at or deliver_after, not both")
        value, key = self._serialized(value, key)
        k, partition, hs = self._prepare(key, partition, headers, event_time, txn)
        if txn is not None and deliver_at is None and deliver_after is None:
            in_txn = self._send_in_txn(txn, partition, _to_bytes(value), k, hs, want_id=True)
            assert in_txn is not None
            return in_txn
        if deliver_at is not None or deliver_after is not None:
            delay = pb.Send(deliver_at_ms=_epoch_ms(deliver_at), deliver_after_ms=_millis(deliver_after))
            task = asyncio.ensure_future(self._send_alone(partition, _to_bytes(value), k, hs, txn, delay))
            self._alone.add(task)
            task.add_done_callback(self._alone.discard)
            return task
        v = _to_bytes(value)
        if self._chunk_bytes and v is not None and len(v) > (size := chunks.chunk_size(self._chunk_bytes, k, hs)):
            self._seal(partition)  # what waits goes first, in a batch of its own
            futs = []
            for piece, marks in chunks.split(v, size):
                futs.append(self._queue(partition, piece, k, [*hs, *marks]))
                self._seal(partition)
            return asyncio.ensure_future(self._chunked(futs))
        return self._queue(partition, v, k, hs)

    async def _chunked(self, futs: list[asyncio.Future[MessageId]]) -> MessageId:
        """A chunked message's id, once every chunk is stored: named by all their offsets."""
        ids = await asyncio.gather(*futs)
        last = ids[-1]
        return MessageId(last.topic, last.partition, last.offset, tuple(i.offset for i in ids))

    def _queue(self, partition: int, v: bytes | None, k: bytes | None,
               hs: list[tuple[str, bytes | None]]) -> asyncio.Future[MessageId]:
        """Add a plain message to the partition's open batch."""
        batch = self._open.get(partition)
        if batch is None:
            batch = self._open[partition] = _Batch(self._compression)
        batch.builder.append(v, k, hs)
        fut: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        batch.futures.append(fut)
        if len(batch.builder) >= self._max_messages or batch.builder.size_estimate >= self._max_bytes:
            self._seal(partition)
        elif partition not in self._timers:
            self._timers[partition] = asyncio.get_running_loop().call_later(self._linger, self._seal, partition)
        return fut

    def queue(
        self,
        value: object,
        key: object = None,
        headers: Headers | None = None,
        event_time: int | None = None,
        *,
        partition: int | None = None,
        txn: Transaction,
    ) -> None:
        """Queue a message of a transaction without a future for its id, for writers of many (the
        Spark sink): a failure fails the transaction's flush and commit. `await txn.flush()` from
        time to time bounds what waits in memory."""
        value, key = self._serialized(value, key)
        k, partition, hs = self._prepare(key, partition, headers, event_time, txn)
        self._send_in_txn(txn, partition, _to_bytes(value), k, hs, want_id=False)

    def _serialized(self, value: object, key: object) -> tuple[bytes | str | None, bytes | str | None]:
        """The value and key through the producer's schemas, where it has them (SchemaError when
        one does not match), else as given."""
        if self._typed is not None:
            value, key = self._typed.serialize(value, key)
        return _plain(value, "value"), _plain(key, "key")

    def _prepare(
        self, key: bytes | str | None, partition: int | None, headers: Headers | None, event_time: int | None,
        txn: Transaction | None,
    ) -> tuple[bytes | None, int, list[tuple[str, bytes | None]]]:
        """(key, partition, headers) of a message about to be queued."""
        if self._closed:
            raise ClientClosed("the producer is closed")
        k = _to_bytes(key)
        if partition is None:
            partition = partition_for_key(k, self.partitions) if k is not None else self._sticky
        elif not 0 <= partition < self.partitions:
            raise ValueError(f"{self.topic} has partitions 0..{self.partitions - 1}")
        items = headers.items() if isinstance(headers, Mapping) else (headers or ())
        hs = [(hk, _to_bytes(hv)) for hk, hv in items]
        if event_time is not None:
            hs.append((EVENT_TIME_HEADER, str(int(event_time)).encode()))
        if txn is not None:
            txn.check()
        return k, partition, hs

    async def _send_alone(
        self, partition: int, value: bytes | None, key: bytes | None, headers: list[tuple[str, bytes | None]],
        txn: Transaction | None, delay: pb.Send,
    ) -> MessageId:
        """A delayed message: a batch of its own without producer id (the gateway holds it outside the
        log), so it is never resent after a lost connection."""
        builder = BatchBuilder(self._compression)
        builder.append(value, key, headers)
        send = pb.Send(partition=partition, batch=builder.build(), txn_id=txn.txn_id if txn else "")
        send.MergeFrom(delay)

        def req() -> pb.Request:
            send.handle = self._handle
            return pb.Request(send=send)

        async def attempt() -> MessageId:
            resp = await self.client.request(req, timeout=self._send_timeout)
            return MessageId(self.topic, partition, int(resp.send_receipt.base_offset))

        return await (txn.run(attempt) if txn is not None else attempt())

    # -- transactional records: batched per transaction and partition -------------------------------

    def _send_in_txn(
        self, txn: Transaction, partition: int, value: bytes | None, key: bytes | None,
        headers: list[tuple[str, bytes | None]], *, want_id: bool,
    ) -> asyncio.Future[MessageId] | None:
        lane = self._lanes.get((txn, partition))
        if lane is None:
            lane = self._lanes[(txn, partition)] = _Lane()
            txn.enlist(self)
        if lane.open is None:
            lane.open = _Batch(self._compression)
        batch = lane.open
        batch.builder.append(value, key, headers)
        fut: asyncio.Future[MessageId] | None = None
        if want_id:
            fut = asyncio.get_running_loop().create_future()
            txn.track(fut)
        batch.futures.append(fut)
        if len(batch.builder) >= self._max_messages or batch.builder.size_estimate >= self._max_bytes:
            self._seal_lane(txn, partition)
        elif lane.timer is None:
            lane.timer = asyncio.get_running_loop().call_later(self._linger, self._seal_lane, txn, partition)
        return fut

    def _seal_lane(self, txn: Transaction, partition: int) -> None:
        lane = self._lanes.get((txn, partition))
        if lane is None or lane.open is None:
            return
        if lane.timer is not None:
            lane.timer.cancel()
            lane.timer = None
        lane.ready.append(lane.open)
        lane.open = None
        if lane.sender is None or lane.sender.done():
            lane.sender = asyncio.create_task(self._lane_loop(txn, partition, lane))

    async def _lane_loop(self, txn: Transaction, partition: int, lane: _Lane) -> None:
        while lane.ready:
            batch = lane.ready[0]
            try:
                base = await txn.call(functools.partial(self._send_txn_batch, txn, partition, batch))
            except Exception as exc:
                txn.fail(exc)
                self._settle(batch, partition, exc)
            else:
                self._settle(batch, partition, base)
            lane.ready.popleft()

    async def _send_txn_batch(self, txn: Transaction, partition: int, batch: _Batch) -> int:
        """Numbered once by the transaction (shared by its producers of the topic), then sent, and
        resent as the same bytes after a lost connection."""
        async with txn.lock(self.topic, partition):
            if not batch.wire:
                txn.check()
                b = batch.builder
                b.producer_id, b.producer_epoch, b.transactional = txn.producer_id, txn.producer_epoch, True
                b.base_sequence = txn.next_sequence(self.topic, partition, len(b))
                batch.wire = b.build()

            def req() -> pb.Request:
                send = pb.Send(handle=self._handle, partition=partition, batch=batch.wire, txn_id=txn.txn_id)
                return pb.Request(send=send)

            resp = await self.client.request(req, timeout=self._send_timeout)
            return int(resp.send_receipt.base_offset)

    async def flush_txn(self, txn: Transaction) -> None:
        """Send what this producer holds of the transaction and wait for it (its commit calls this)."""
        lanes = [(p, lane) for (t, p), lane in list(self._lanes.items()) if t is txn]
        for p, _ in lanes:
            self._seal_lane(txn, p)
        senders = [lane.sender for _, lane in lanes if lane.sender is not None]
        if senders:
            await asyncio.gather(*senders, return_exceptions=True)
        for p, lane in lanes:
            if lane.open is None and not lane.ready:
                self._lanes.pop((txn, p), None)

    def _seal(self, partition: int) -> None:
        """Close the partition's open batch and queue it for its sender."""
        timer = self._timers.pop(partition, None)
        if timer is not None:
            timer.cancel()
        batch = self._open.pop(partition, None)
        if batch is None:
            return
        if partition == self._sticky and self.partitions > 1:
            self._sticky = next(self._round_robin) % self.partitions
        self._ready.setdefault(partition, deque()).append(batch)
        task = self._senders.get(partition)
        if task is None or task.done():
            self._senders[partition] = asyncio.create_task(self._send_loop(partition))

    async def _send_loop(self, partition: int) -> None:
        queue = self._ready[partition]
        while queue:
            batch = queue[0]
            try:
                base = await self._deliver(partition, batch)
            except Exception as exc:
                self._settle(batch, partition, exc)
            else:
                self._settle(batch, partition, base)
            queue.popleft()

    def _settle(self, batch: _Batch, partition: int, outcome: int | Exception) -> None:
        """Each message's future: its id from the batch's base offset, or the batch's error."""
        for i, fut in enumerate(batch.futures):
            if fut is None or fut.done():
                continue
            if isinstance(outcome, Exception):
                fut.set_exception(outcome)
            else:
                fut.set_result(MessageId(self.topic, partition, outcome + i))

    async def _deliver(self, partition: int, batch: _Batch) -> int:
        deadline = time.monotonic() + self._send_timeout
        delay = 0.05
        last: GatewayError | None = None  # what to report if time runs out on a retry
        while True:
            if batch.producer_id != self._producer_id:  # first attempt, or the id was renewed
                self._number(partition, batch)
            remaining = deadline - time.monotonic()
            try:
                resp = await self.client.request(lambda: self._send_request(partition, batch),
                                                 timeout=max(0.01, remaining))
                return int(resp.send_receipt.base_offset)
            except OutOfOrderSequence:
                await self._renew()  # the gateway lost track of our sequence: start a clean one
            except ConnectionLost:
                if self.client._closing or not self.client._reconnect or time.monotonic() >= deadline:
                    raise
                # the same bytes go again once reconnected: the gateway recognises a stored batch
            except GatewayError as exc:
                if not exc.retriable or time.monotonic() + delay >= deadline:
                    await self._renew()
                    if isinstance(exc, Timeout) and last is not None:
                        raise last from exc
                    raise
                last = exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _send_request(self, partition: int, batch: _Batch) -> pb.Request:
        return pb.Request(send=pb.Send(handle=self._handle, partition=partition, batch=batch.wire))

    def _number(self, partition: int, batch: _Batch) -> None:
        seq = self._sequences.get(partition, 0)
        b = batch.builder
        b.producer_id, b.producer_epoch, b.base_sequence = self._producer_id, 0, seq
        batch.wire = b.build()
        batch.producer_id, batch.sequence = self._producer_id, seq
        self._sequences[partition] = (seq + len(b)) % 2147483648

    async def _renew(self) -> None:
        """A new producer id, so no later batch depends on the sequence of one that failed."""
        with contextlib.suppress(GatewayError):
            resp = await self.client.request(creation(self.topic, self.producer_name, self._acks, self._send_timeout))
            old = self._handle
            self._handle = resp.producer_created.handle
            self._producer_id = resp.producer_created.producer_id
            self._sequences.clear()
            with contextlib.suppress(GatewayError):
                await self.client.request(pb.Request(close_producer=pb.CloseProducer(handle=old)))

    # -- watermarks ------------------------------------------------------------------------------

    async def send_watermark(self, event_time: datetime | int, txn: Transaction | None = None) -> list[int]:
        """Assert that no message this producer sends from now on has an event time before
        `event_time` (a datetime, or epoch ms): W_SET into every partition of the topic, after what
        the producer sent before. The first one puts the producer (named by its producer name) into
        the topic's watermark set. With `txn` it counts only if the transaction commits. Returns the
        markers' offsets by partition."""
        ms = round(event_time.timestamp() * 1000) if isinstance(event_time, datetime) else int(event_time)
        offsets = await self._watermark(pb.SendWatermark(event_time_ms=ms), txn)
        self._in_watermark_set = True
        return offsets

    async def mark_idle(self, txn: Transaction | None = None) -> list[int]:
        """Take this producer out of the topic's watermark set (W_IDLE) until its next watermark, so
        it holds nobody back while it has nothing to send. Closing the producer does it too."""
        offsets = await self._watermark(pb.SendWatermark(idle=True), txn)
        self._in_watermark_set = False
        return offsets

    async def _watermark(self, marker: pb.SendWatermark, txn: Transaction | None) -> list[int]:
        if self._closed:
            raise ClientClosed("the producer is closed")
        if txn is not None:
            txn.check()
        await self.flush()  # a marker never goes before a message sent earlier
        if txn is not None:
            marker.txn_id = txn.txn_id

        def req() -> pb.Request:
            marker.handle = self._handle
            return pb.Request(send_watermark=marker)

        async def attempt() -> list[int]:
            resp = await self.client.request(req, timeout=self._send_timeout)
            return list(resp.watermark_receipt.offsets)

        if txn is not None:
            return await txn.run(attempt)
        deadline = time.monotonic() + self._send_timeout
        while True:
            try:
                return await attempt()
            except ConnectionLost:  # a marker sent twice says the same thing twice: harmless
                if not self.client.will_reconnect or time.monotonic() >= deadline:
                    raise

    async def _reattach(self) -> None:
        """On a new connection: the same producer id, so batches resent from before are deduplicated."""
        resp = await self.client._conn.request(
            creation(self.topic, self.producer_name, self._acks, self._send_timeout, resume=self._producer_id))
        self._handle = resp.producer_created.handle

    async def flush(self) -> None:
        """Send everything queued and wait until it is stored (or failed)."""
        for p in list(self._open):
            self._seal(p)
        for txn in {t for t, _ in self._lanes}:
            await self.flush_txn(txn)
        tasks: list[asyncio.Future[Any]] = [t for t in self._senders.values() if not t.done()]
        tasks += [t for t in self._alone if not t.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Flush, and leave the watermark set if this producer is in it."""
        if self._closed:
            return
        await self.flush()
        if self._in_watermark_set:
            with contextlib.suppress(GatewayError):
                await self.mark_idle()
        self._closed = True
        self.client._forget(self)
        if not self.client._conn.closed:
            with contextlib.suppress(GatewayError):
                await self.client.request(lambda: pb.Request(close_producer=pb.CloseProducer(handle=self._handle)))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
