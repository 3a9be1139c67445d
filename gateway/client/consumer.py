"""The consumer: prefetches under flow-control permits and splits pushed batches into messages.

The gateway sends whole stored batches with the offsets to skip (acked already, or not part of this
delivery); splitting them is the client's work. Permits are granted again once half the receiver
queue has been taken, as Pulsar does. Acknowledgements made at the same moment share one request.

The subscription's watermark comes in order with the messages: a change waits in the receive queue
behind the messages sent before it, and becomes `last_watermark` once they have been received. A
message with an event time before the watermark sent ahead of it is `late`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from gateway.client.batch import BatchReceivePolicy
from gateway.client.chunks import Assembler, ChunkPolicy
from gateway.client.errors import ClientClosed, SchemaError
from gateway.client.message import Message, MessageId, decode_batch
from gateway.errors import GatewayError, NotAllowed, Timeout
from gateway.pb import gateway_pb2 as pb

if TYPE_CHECKING:
    from gateway.client.client import Client
    from gateway.client.schema import Typed
    from gateway.client.transaction import Transaction

log = logging.getLogger(__name__)

Position = Message | MessageId


def _id(m: Position) -> MessageId:
    return m.message_id if isinstance(m, Message) else m


class _AckGroup:
    """Acks gathered until the next turn of the event loop, sent as one request."""

    def __init__(self) -> None:
        self.individual: dict[int, list[int]] = {}
        self.cumulative: dict[int, int] = {}
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen even if nobody waits


@dataclass(frozen=True)
class _Watermark:
    """A watermark change waiting in the receive queue behind the messages sent before it."""

    value: int | None


_CLOSED = object()


class _Stale(Exception):
    """A negative acknowledgement of a message received before the consumer subscribed again."""


async def next_ready(sources: Callable[[], list[Consumer]], arrived: asyncio.Event,
                     closed: Callable[[], GatewayError | None], deadline: float | None) -> Consumer | None:
    """The first of `sources` (asked again after each wait) that holds a queued message, the
    consumers sharing `arrived`; None once the loop's clock passes `deadline` with none."""
    loop = asyncio.get_running_loop()
    while True:
        for c in sources():
            if c._queue:
                return c
        exc = closed()
        if exc is not None:
            raise exc
        arrived.clear()
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            return None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(arrived.wait(), remaining)


async def receive_first(sources: Callable[[], list[Consumer]], arrived: asyncio.Event,
                        closed: Callable[[], GatewayError | None], timeout: float | None) -> Message:
    """The next message of the first of `sources` that holds one; Timeout when none arrives within
    `timeout` seconds."""
    deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
    source = await next_ready(sources, arrived, closed, deadline)
    if source is None:
        raise Timeout(f"no message within {timeout}s")
    return await source.typed(source._take())


class Consumer:
    def __init__(
        self,
        client: Client,
        subscribe: pb.Subscribe,
        *,
        consumer_id: int,
        partitions: int,
        mode: str,
        receiver_queue_size: int,
        negative_ack_delay: float,
        batch_receive_policy: BatchReceivePolicy | None = None,
        watermark: int | None = None,
        on_watermark: Callable[[int | None], object] | None = None,
        chunks: ChunkPolicy | None = None,
        typed: Typed | None = None,
    ) -> None:
        self.client = client
        self._typed = typed
        self.topic = subscribe.topic
        self.subscription = subscribe.subscription
        self._subscribe = subscribe
        self.mode = mode
        self.partitions = partitions
        self._id = consumer_id
        self._queue_size = receiver_queue_size
        self._nack_delay = negative_ack_delay
        self._batch_policy = batch_receive_policy or BatchReceivePolicy()
        self._queue: deque[Message | _Watermark] = deque()  # a message first, whenever not empty
        self.last_watermark: int | None = watermark
        """The subscription's watermark (epoch ms) as of the messages received so far; None while no
        producer is in its set."""
        self._sent_watermark = watermark  # the latest the gateway sent, ahead of what is queued
        self._on_watermark = on_watermark
        self._watermark_queues: set[asyncio.Queue[object]] = set()
        self._arrived = asyncio.Event()
        self._taken = 0
        self._closed: GatewayError | None = None
        self._acks: _AckGroup | None = None
        self._nack_timers: set[asyncio.TimerHandle] = set()
        self._retry: Consumer | None = None  # the retry-letter topic's consumer, received from here too
        self._epoch = 0  # how often it subscribed again (`_reattach`): Pulsar's consumer epoch (PIP-84)
        chunks = chunks or ChunkPolicy()
        self._chunks = Assembler(chunks.max_pending, chunks.auto_ack_oldest, chunks.expire, self._give_up)

    # -- pushed by the connection ---------------------------------------------------------------

    def start(self) -> None:
        self.client._conn.add_receiver(self._id, self)
        self._grant(self._queue_size)

    def on_messages(self, messages: pb.Messages) -> None:
        for e in messages.entries:
            try:
                self._queue.extend(self._split(e))
            except (GatewayError, ValueError) as exc:  # one bad batch must not take the connection down
                log.error("undecodable batch at %s-%d@%d: %s", self.topic, e.partition, e.base_offset, exc)
        self._arrived.set()

    def _split(self, e: pb.EntryBatch) -> list[Message]:
        skip = {e.base_offset + s for s in e.skip}
        decoded = decode_batch(self.topic, e.partition, e.base_offset, e.batch, skip, e.redelivery_count,
                               watermark=self._sent_watermark, consumer_epoch=self._epoch)
        out = [m for m in map(self._chunks.add, decoded) if m is not None]
        # chunks held for their message leave the queue's room to others, as Pulsar's consumer
        # frees their permits: a message of more chunks than the queue holds still comes whole
        self._taken_permits(len(decoded) - len(out))
        return out

    def _give_up(self, msg: Message, ack: bool) -> None:
        """An incomplete chunked message the assembler will not hold."""
        if self._closed is None:
            asyncio.ensure_future(self._quietly(self.acknowledge(msg) if ack else self.negative_acknowledge(msg)))

    async def _quietly(self, step: Awaitable[None]) -> None:
        with contextlib.suppress(GatewayError):
            await step

    def on_watermark(self, update: pb.WatermarkUpdate) -> None:
        value = update.watermark_ms if update.HasField("watermark_ms") else None
        self._sent_watermark = value
        if self._queue:
            self._queue.append(_Watermark(value))
        else:
            self._apply_watermark(value)

    def _apply_watermark(self, value: int | None) -> None:
        self.last_watermark = value
        for q in self._watermark_queues:
            q.put_nowait(value)
        if self._on_watermark is not None:
            try:
                self._on_watermark(value)
            except Exception:
                log.exception("the on_watermark callback of %s/%s failed", self.topic, self.subscription)

    def _reached_watermarks(self) -> None:
        """Apply the watermark changes no message is queued ahead of any more."""
        while self._queue:
            head = self._queue[0]
            if not isinstance(head, _Watermark):
                return
            self._queue.popleft()
            self._apply_watermark(head.value)

    def _restart_queue(self, watermark: int | None) -> None:
        """Prefetched messages are dropped: the watermark is what the gateway sent last."""
        self._queue.clear()
        self._chunks.clear()
        self._taken = 0
        self._sent_watermark = watermark
        if watermark != self.last_watermark:
            self._apply_watermark(watermark)

    def on_reset(self) -> None:
        """The subscription moved: what is prefetched is stale, and the gateway forgot our permits."""
        self._restart_queue(self._sent_watermark)
        self._grant(self._queue_size)

    def on_closed(self, exc: GatewayError) -> None:
        if self.client.reconnecting:
            return  # `_reattach` follows on the new connection
        self.fail(exc)

    def fail(self, exc: GatewayError) -> None:
        """No more messages: `receive` raises `exc` once the queue is empty."""
        self._closed = exc
        self._arrived.set()
        for q in self._watermark_queues:
            q.put_nowait(_CLOSED)

    async def _reattach(self) -> None:
        """On a new connection: subscribe again; what was prefetched comes again from the gateway."""
        resp = await self.client._conn.request(pb.Request(subscribe=self._subscribe))
        self._epoch += 1
        self._id = resp.subscribed.consumer_id
        s = resp.subscribed
        self._restart_queue(s.watermark_ms if s.HasField("watermark_ms") else None)
        self.start()

    def _grant(self, permits: int) -> None:
        self.client._conn.send_nowait(pb.Request(flow=pb.Flow(consumer_id=self._id, permits=permits)))

    # -- the application's side -----------------------------------------------------------------

    def receive_retries(self, retry: Consumer) -> None:
        """`retry`, the consumer of this one's retry-letter topic, is received from here: its
        messages come out of `receive` after this one's queued messages."""
        retry.share_arrivals(self._arrived)
        self._retry = retry

    def share_arrivals(self, arrived: asyncio.Event) -> None:
        """Set `arrived` when messages arrive, for a receiver of several consumers (`receive_first`)."""
        self._arrived = arrived

    def _owner(self, mid: MessageId) -> Consumer:
        """The consumer a message came from: this one, or its retry-letter topic's."""
        return self._retry if self._retry is not None and mid.topic == self._retry.topic else self

    def _sources(self) -> list[Consumer]:
        """Where this consumer's messages come from: itself, then its retry-letter topic's consumer."""
        return [self] if self._retry is None else [self, self._retry]

    async def receive(self, timeout: float | None = None) -> Message:
        """The next message; raises Timeout when none arrives within `timeout` seconds."""
        return await receive_first(self._sources, self._arrived, lambda: self._closed, timeout)

    async def batch_receive(self, policy: BatchReceivePolicy | None = None) -> list[Message]:
        """The messages that arrive until the policy's count or size is reached or its timeout passes
        (Pulsar's `batchReceive`); `policy` defaults to the one given to `subscribe`. Each is
        acknowledged as `receive`'s are. Once closed, what is queued comes out before the error."""
        policy = policy or self._batch_policy
        loop = asyncio.get_running_loop()
        deadline = loop.time() + policy.timeout if policy.timeout > 0 else None
        out: list[Message] = []
        size = 0
        while not policy.full(len(out), size):
            try:
                source = await next_ready(self._sources, self._arrived, lambda: self._closed, deadline)
            except GatewayError:
                if out:
                    break
                raise
            if source is None:
                break
            head = source._queue[0]
            assert isinstance(head, Message)
            if not policy.room(len(out), size, len(head.value or b"")):
                break
            out.append(source._take())
            size += len(head.value or b"")
        return await self._typed_batch(out)

    async def typed(self, msg: Message) -> Message:
        """`msg` read through the consumer's schemas (gateway.client.schema), where it has them."""
        return msg if self._typed is None else await self._typed.deserialize(msg)

    async def _typed_batch(self, messages: list[Message]) -> list[Message]:
        """`messages`, each read through the schemas of the consumer it came from; SchemaError holding
        all of them (those read, read) when one is not a value of its schema."""
        out: list[Message] = []
        failed: SchemaError | None = None
        for m in messages:
            try:
                out.append(await self._owner(m.message_id).typed(m))
            except SchemaError as exc:
                failed = failed or exc
                out.append(m)
        if failed is not None:
            raise SchemaError(str(failed), out)
        return out

    def _take(self) -> Message:
        """The queued message at the head, taken by the application: permits flow back as it goes."""
        msg = self._queue.popleft()
        assert isinstance(msg, Message)  # never a watermark at the head
        self._reached_watermarks()
        self._taken_permits(1)
        return msg

    def _taken_permits(self, n: int) -> None:
        """`n` messages the gateway sent are out of the queue: permits again once half of it is."""
        if n <= 0:
            return
        self._taken += n
        if self._taken >= max(1, self._queue_size // 2):
            self._grant(self._taken)
            self._taken = 0

    async def watermarks(self) -> AsyncIterator[int | None]:
        """The watermark now, then each change, in order with the messages: a change comes once every
        message sent before it has been received. Ends when the consumer closes."""
        q: asyncio.Queue[object] = asyncio.Queue()
        self._watermark_queues.add(q)
        try:
            if self._closed is not None:
                return
            yield self.last_watermark
            while (value := await q.get()) is not _CLOSED:
                assert value is None or isinstance(value, int)
                yield value
        finally:
            self._watermark_queues.discard(q)

    def _check_open(self) -> None:
        if self._closed is not None:
            raise self._closed

    async def acknowledge(self, message: Position, txn: Transaction | None = None) -> None:
        """Acknowledge one message; returns once the gateway has recorded it durably.

        With `txn`, the message is locked for the transaction (PENDING_ACK): acked when it commits,
        delivered again when it aborts. TransactionConflict when another transaction holds it (or it
        was acked already): abort then."""
        mid = _id(message)
        if self._owner(mid) is not self:
            return await self._owner(mid).acknowledge(message, txn)
        if txn is not None:
            await self._txn_ack(txn, pb.PartitionOffsets(partition=mid.partition, offsets=mid.chunks or [mid.offset]),
                                False)
            return
        group = self._ack_group()
        group.individual.setdefault(mid.partition, []).extend(mid.chunks or [mid.offset])
        await asyncio.shield(group.done)

    async def acknowledge_cumulative(self, message: Position, txn: Transaction | None = None) -> None:
        """Acknowledge this message and every earlier one of its partition (not on shared or key_shared ones);
        with `txn`, pending until the transaction ends, as `acknowledge`."""
        if self.mode in ("shared", "key_shared"):
            raise NotAllowed(f"cumulative acknowledgement is not allowed on a {self.mode} subscription")
        mid = _id(message)
        if self._owner(mid) is not self:
            return await self._owner(mid).acknowledge_cumulative(message, txn)
        if txn is not None:
            await self._txn_ack(txn, pb.PartitionOffsets(partition=mid.partition, offsets=[mid.offset]), True)
            return
        group = self._ack_group()
        group.cumulative[mid.partition] = max(group.cumulative.get(mid.partition, -1), mid.offset)
        await asyncio.shield(group.done)

    async def _txn_ack(self, txn: Transaction, offsets: pb.PartitionOffsets, cumulative: bool) -> None:
        txn.check()
        self._check_open()

        def req() -> pb.Request:
            ack = pb.Ack(consumer_id=self._id, txn_id=txn.txn_id)
            (ack.cumulative if cumulative else ack.individual).append(offsets)
            return pb.Request(ack=ack)

        await txn.run(lambda: self.client.request(req))

    def _ack_group(self) -> _AckGroup:
        self._check_open()
        if self._acks is None:
            self._acks = _AckGroup()
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._flush_acks()))
        return self._acks

    async def _flush_acks(self) -> None:
        group, self._acks = self._acks, None
        if group is None:
            return
        try:
            await self.client.request(lambda: self._ack_request(group))
        except GatewayError as exc:
            group.done.set_exception(exc)
        else:
            self._drop_acked(group)
            group.done.set_result(None)

    def _drop_acked(self, group: _AckGroup) -> None:
        """Queued messages the acknowledgement just recorded are not handed out: a reconnection while
        it waited subscribed again, and the gateway delivered them again before it was applied
        (soak sentinel:277937572). Pulsar's consumer drops a delivery of a message whose ack it
        holds (ConsumerImpl.messageReceived, AcknowledgmentsGroupingTracker.isDuplicate); an ack
        answered OK means the message never comes again (README "Guarantees")."""
        individual = {p: set(offs) for p, offs in group.individual.items()}

        def acked(m: Message | _Watermark) -> bool:
            if not isinstance(m, Message):
                return False
            mid = m.message_id
            return mid.offset <= group.cumulative.get(mid.partition, -1) or mid.offset in individual.get(mid.partition, ())

        dropped = sum(map(acked, self._queue))
        if dropped:
            self._queue = deque(m for m in self._queue if not acked(m))
            self._reached_watermarks()
            self._taken_permits(dropped)

    def _ack_request(self, group: _AckGroup) -> pb.Request:
        return pb.Request(
            ack=pb.Ack(
                consumer_id=self._id,
                individual=[pb.PartitionOffsets(partition=p, offsets=o) for p, o in group.individual.items()],
                cumulative=[pb.PartitionOffsets(partition=p, offsets=[o]) for p, o in group.cumulative.items()],
            )
        )

    async def negative_acknowledge(self, message: Position) -> None:
        """Ask for the message again after the consumer's negative-ack delay. Not sent for a message
        received before the consumer subscribed again (after a reconnect), nor once it has: the
        gateway delivers it again anyway, and the nack, which names an offset, would take that new
        delivery away (Pulsar's consumer epoch, PIP-84, drops such stale redelivery requests)."""
        self._check_open()
        mid = _id(message)
        if self._owner(mid) is not self:
            return await self._owner(mid).negative_acknowledge(message)
        epoch = message.consumer_epoch if isinstance(message, Message) else self._epoch

        def req() -> pb.Request:
            if self._epoch != epoch:
                raise _Stale()
            offsets = [pb.PartitionOffsets(partition=mid.partition, offsets=mid.chunks or [mid.offset])]
            return pb.Request(nack=pb.Nack(consumer_id=self._id, offsets=offsets))

        if self._nack_delay <= 0:
            with contextlib.suppress(_Stale):
                await self.client.request(req)
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._nack_timers.discard(handle)
            if self._closed is None:
                asyncio.ensure_future(self._send_quietly(req))

        handle = loop.call_later(self._nack_delay, fire)
        self._nack_timers.add(handle)

    async def reconsume_later(self, message: Position, delay: float | timedelta = 0.0) -> None:
        """Pulsar's reconsumeLater: the gateway sends the message to the retry-letter topic, delivered
        again after `delay` (seconds or timedelta) with its RECONSUMETIMES property one higher, or,
        past the policy's max_redeliver_count, to the dead-letter topic; and acknowledges it, all
        at once. Needs `retry_enable` (or a dead-letter policy) at subscribe."""
        self._check_open()
        mid = _id(message)
        if mid.chunks:
            raise NotAllowed("a chunked message cannot be reconsumed later: acknowledge or negatively acknowledge it")
        owner = self._owner(mid)
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if seconds < 0:
            raise ValueError("a reconsume delay cannot be negative")

        def req() -> pb.Request:
            return pb.Request(reconsume_later=pb.ReconsumeLater(
                consumer_id=owner._id, partition=mid.partition, offset=mid.offset, delay_ms=round(seconds * 1000)))

        await self.client.request(req)

    async def _send_quietly(self, req: Callable[[], pb.Request]) -> None:
        with contextlib.suppress(GatewayError, _Stale):
            await self.client.request(req)

    async def seek(
        self,
        position: Position | int | str | None = None,
        *,
        timestamp: int | datetime | None = None,
        partition: int | None = None,
    ) -> None:
        """Move the subscription: to a message id (its partition), an offset (every partition unless
        `partition` is given), "earliest"/"latest", or a `timestamp` (epoch ms or datetime).
        Prefetched messages are dropped; delivery restarts from the new position."""
        self._check_open()
        seek = pb.Seek()
        if timestamp is not None:
            seek.timestamp_ms = int(timestamp.timestamp() * 1000) if isinstance(timestamp, datetime) else timestamp
        elif isinstance(position, Message | MessageId):
            mid = _id(position)
            seek.offset, seek.partition = mid.offset, mid.partition
        elif isinstance(position, int):
            seek.offset = position
            if partition is None:
                seek.all_partitions = True
            else:
                seek.partition = partition
        elif position == "earliest":
            seek.earliest = True
        elif position == "latest":
            seek.latest = True
        else:
            raise ValueError("seek to a MessageId, an offset, 'earliest', 'latest' or a timestamp")
        def req() -> pb.Request:
            seek.consumer_id = self._id
            return pb.Request(seek=seek)

        await self.client.request(req)

    async def unsubscribe(self) -> None:
        """Close this consumer and delete the subscription (NotAllowed while others are attached)."""
        self._check_open()
        if self._acks is not None:
            await self._flush_acks()
        await self.client.request(lambda: pb.Request(unsubscribe=pb.Unsubscribe(consumer_id=self._id)))
        self._closed_locally()
        if self._retry is not None:
            await self._retry.unsubscribe()

    async def close(self) -> None:
        """Leave the subscription; messages not acknowledged go to its other consumers."""
        if self._retry is not None:
            await self._retry.close()
        if self._closed is not None:
            return
        if self._acks is not None:
            await self._flush_acks()
        self._closed_locally()
        if not self.client._conn.closed:
            with contextlib.suppress(GatewayError):
                await self.client.request(lambda: pb.Request(close_consumer=pb.CloseConsumer(consumer_id=self._id)))

    def _closed_locally(self) -> None:
        for h in self._nack_timers:
            h.cancel()
        self._closed = ClientClosed("the consumer is closed")
        for q in self._watermark_queues:
            q.put_nowait(_CLOSED)
        self.client._forget(self)
        self.client._conn.remove_receiver(self._id)

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
