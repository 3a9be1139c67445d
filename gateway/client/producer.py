"""The producer: records batched per partition into RecordBatch v2, sent idempotently.

Each partition has at most one batch in flight, so sequences never overtake each other; while it
is out, the next batch fills. A retriable failure resends the same bytes (the gateway's dedupe
makes that safe) until `send_timeout`; a batch that finally fails takes a fresh producer id with it,
so the sequences of later batches start clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from gateway.client.errors import ClientClosed, ConnectionLost
from gateway.client.message import EVENT_TIME_HEADER, MessageId
from gateway.errors import GatewayError, OutOfOrderSequence, Timeout
from gateway.partitioner import partition_for_key
from gateway.pb import gateway_pb2 as pb
from gateway.records import BatchBuilder, Compression

if TYPE_CHECKING:
    from gateway.client.client import Client
    from gateway.client.transaction import Transaction

Headers = Mapping[str, bytes | str | None] | Iterable[tuple[str, bytes | str | None]]


def _to_bytes(v: bytes | str | None) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


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
        self.futures: list[asyncio.Future[MessageId]] = []
        self.sequence = -1
        self.producer_id = -1
        self.wire: bytes = b""


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
    ) -> None:
        self.client = client
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
        self._alone: set[asyncio.Future[MessageId]] = set()  # sends outside the batching: delayed, transactional
        self._round_robin = itertools.count()
        self._sticky = next(self._round_robin) % partitions
        self._closed = False

    @property
    def producer_id(self) -> int:
        return self._producer_id

    async def send(
        self,
        value: bytes | str | None,
        key: bytes | str | None = None,
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
        value: bytes | str | None,
        key: bytes | str | None = None,
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
        if self._closed:
            raise ClientClosed("the producer is closed")
        if deliver_at is not None and deliver_after is not None:
            raise ValueError("give deliver_at or deliver_after, not both")
        k = _to_bytes(key)
        if partition is None:
            partition = partition_for_key(k, self.partitions) if k is not None else self._sticky
        elif not 0 <= partition < self.partitions:
            raise ValueError(f"{self.topic} has partitions 0..{self.partitions - 1}")
        items = headers.items() if isinstance(headers, Mapping) else (headers or ())
        hs = [(hk, _to_bytes(hv)) for hk, hv in items]
        if event_time is not None:
            hs.append((EVENT_TIME_HEADER, str(int(event_time)).encode()))
        if txn is not None or deliver_at is not None or deliver_after is not None:
            if txn is not None:
                txn.check()
            delay = pb.Send(deliver_at_ms=_epoch_ms(deliver_at), deliver_after_ms=_millis(deliver_after))
            task = asyncio.ensure_future(self._send_alone(partition, _to_bytes(value), k, hs, txn, delay))
            self._alone.add(task)
            task.add_done_callback(self._alone.discard)
            return task
        batch = self._open.get(partition)
        if batch is None:
            batch = self._open[partition] = _Batch(self._compression)
        batch.builder.append(_to_bytes(value), k, hs)
        fut: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        batch.futures.append(fut)
        if len(batch.builder) >= self._max_messages or batch.builder.size_estimate >= self._max_bytes:
            self._seal(partition)
        elif partition not in self._timers:
            self._timers[partition] = asyncio.get_running_loop().call_later(self._linger, self._seal, partition)
        return fut

    async def _send_alone(
        self, partition: int, value: bytes | None, key: bytes | None, headers: list[tuple[str, bytes | None]],
        txn: Transaction | None, delay: pb.Send,
    ) -> MessageId:
        """A message in its own batch: a transactional one numbered by its transaction, one at a time
        per partition; a delayed one without producer id (the gateway holds it outside the log)."""
        delayed = delay.deliver_at_ms > 0 or delay.deliver_after_ms > 0
        builder = BatchBuilder(self._compression)
        builder.append(value, key, headers)

        async def attempt(wire: bytes) -> MessageId:
            def req() -> pb.Request:
                send = pb.Send(handle=self._handle, partition=partition, batch=wire, txn_id=txn.txn_id if txn else "")
                send.MergeFrom(delay)
                return pb.Request(send=send)

            deadline = time.monotonic() + self._send_timeout
            while True:
                try:
                    resp = await self.client.request(req, timeout=max(0.01, deadline - time.monotonic()))
                    return MessageId(self.topic, partition, int(resp.send_receipt.base_offset))
                except ConnectionLost:
                    # resending is safe for a transactional batch (deduplicated), not for a delayed one
                    if delayed or self.client._closing or not self.client._reconnect or time.monotonic() >= deadline:
                        raise

        if txn is None:
            return await attempt(builder.build())

        async def in_txn() -> MessageId:
            if delayed:
                return await attempt(builder.build())
            async with txn.lock(self.topic, partition):
                txn.check()
                builder.producer_id, builder.producer_epoch = txn.producer_id, txn.producer_epoch
                builder.transactional = True
                builder.base_sequence = txn.next_sequence(self.topic, partition, 1)
                return await attempt(builder.build())

        return await txn.run(in_txn)

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
                for fut in batch.futures:
                    if not fut.done():
                        fut.set_exception(exc)
            else:
                for i, fut in enumerate(batch.futures):
                    if not fut.done():
                        fut.set_result(MessageId(self.topic, partition, base + i))
            queue.popleft()

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
            resp = await self.client.request(
                pb.Request(create_producer=pb.CreateProducer(topic=self.topic, producer_name=self.producer_name))
            )
            old = self._handle
            self._handle = resp.producer_created.handle
            self._producer_id = resp.producer_created.producer_id
            self._sequences.clear()
            with contextlib.suppress(GatewayError):
                await self.client.request(pb.Request(close_producer=pb.CloseProducer(handle=old)))

    async def _reattach(self) -> None:
        """On a new connection: the same producer id, so batches resent from before are deduplicated."""
        resp = await self.client._conn.request(
            pb.Request(create_producer=pb.CreateProducer(
                topic=self.topic, producer_name=self.producer_name, resume_producer_id=self._producer_id))
        )
        self._handle = resp.producer_created.handle

    async def flush(self) -> None:
        """Send everything queued and wait until it is stored (or failed)."""
        for p in list(self._open):
            self._seal(p)
        tasks: list[asyncio.Future[Any]] = [t for t in self._senders.values() if not t.done()]
        tasks += [t for t in self._alone if not t.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        if self._closed:
            return
        await self.flush()
        self._closed = True
        self.client._forget(self)
        if not self.client._conn.closed:
            with contextlib.suppress(GatewayError):
                await self.client.request(lambda: pb.Request(close_producer=pb.CloseProducer(handle=self._handle)))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
