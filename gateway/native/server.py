"""The native listener: one `Connection` per client, turning frames into domain-service calls.

Requests are answered in the order they are handled. `Send`s go through one queue per connection
and are appended in arrival order, as many per Redis round trip as have arrived, so a producer can
pipeline batches without its sequences ever overtaking each other. A request id of 0 asks for no
answer (flow permits). A malformed frame gets an error and the connection carries on; a frame over
`max_frame_bytes` gets an error and the connection is closed, as the stream cannot be trusted past it.

What one connection can make the gateway hold is bounded: sends waiting for their append take at
most `connection_buffer_bytes` (past it the connection is not read until they are answered), every
answer and delivery is written out (`drain`) before the next, deliveries follow the consumer's
permits, and a connection silent for `idle_timeout` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from gateway.domain.producers import ProducerService
from gateway.domain.security import FAILED_AUTHENTICATION_DELAY, USER_PREFIX, Operation, ResourceType
from gateway.domain.services import Services
from gateway.domain.subscriptions import Consumer, Delivery, Mode, SubscriptionService
from gateway.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    ErrorCode,
    GatewayError,
    InvalidRequest,
    NotAllowed,
    SubscriptionNotFound,
)
from gateway.formats.frames import (
    PROTOCOL_VERSION,
    FrameTooLarge,
    OutgoingEntry,
    frame,
    messages_frame,
    parse,
    range_frame,
    read_frame,
)
from gateway.formats.records import parse_header
from gateway.native.transactions import TxnSession, as_expired, expired_errors
from gateway.net import TcpListener, server_ssl_context
from gateway.pb import gateway_pb2 as pb

log = logging.getLogger(__name__)

_MODES = {pb.EXCLUSIVE: Mode.EXCLUSIVE, pb.FAILOVER: Mode.FAILOVER, pb.SHARED: Mode.SHARED}
_SEND_BATCH = 256  # sends appended per round trip at most
_ORDERED = ("send", "send_watermark")  # requests that go through the send queue, in arrival order
_BEFORE_CONNECT = ("connect", "ping")  # all that is served before authentication, when it is on
_RANGE_BYTES = 1 << 20  # a range read's answer when the reader names no size


class NativeServer(TcpListener):
    """The listener plus the services its connections share."""

    def __init__(self, services: Services) -> None:
        cfg = services.config
        super().__init__("native", self._connection, max_connections=cfg.max_connections, keepalive=cfg.tcp_keepalive)
        self.services = services
        self.subscriptions = SubscriptionService.open(
            services.log, services.store, services.config.node_id, watermarks=services.watermark
        )
        self.producers = ProducerService(services.log, services.store)
        self.subscriptions.txn_state = self._txn_state
        services.txn.settlers.append(self.subscriptions.settle_txn)
        self._live: set[Connection] = set()

    async def _txn_state(self, txn_id: str) -> str | None:
        info = await self.services.txn.describe(txn_id)
        return info.state if info is not None else None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(self, reader, writer)
        self._live.add(conn)
        try:
            await conn.serve()
        finally:
            self._live.discard(conn)

    async def close(self, grace: float = 5.0) -> None:
        """Connections stop reading, answer what they have, then close; `grace` bounds the wait."""
        for conn in list(self._live):
            conn.reader.feed_eof()
        await super().close(grace)
        await self.subscriptions.close()
        with contextlib.suppress(ValueError):
            self.services.txn.settlers.remove(self.subscriptions.settle_txn)


async def start_native_server(services: Services, host: str, port: int) -> NativeServer:
    server = NativeServer(services)
    cfg = services.config
    await server.start(host, port, server_ssl_context(cfg.tls_cert_file, cfg.tls_key_file))
    return server


class _Producer:
    def __init__(self, topic: str, producer_id: int, partitions: int, name: str) -> None:
        self.topic = topic
        self.producer_id = producer_id
        self.partitions = partitions
        self.name = name  # its identity in the topic's watermark set


Handler = Callable[["Connection", pb.Request], Awaitable[pb.Response | None]]


class Connection:
    """One client's session: its producers and consumers, which die with it."""

    def __init__(self, server: NativeServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.services = server.services
        self.subs = server.subscriptions
        self.reader = reader
        self.writer = writer
        self.producers: dict[int, _Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._next_handle = 1
        self._sends: asyncio.Queue[tuple[pb.Request, int]] = asyncio.Queue()
        self.queued_bytes = 0  # of the frames in `_sends`
        self._room = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self.txns = TxnSession(self.services)
        self.principal: str | None = None  # who authenticated (Connect); None before, or with authentication off
        self.closing = False  # set by a handler: close once its answer is written

    # -- the loop -------------------------------------------------------------------------------

    async def serve(self) -> None:
        sender = self._sender = asyncio.create_task(self._send_loop())
        cfg = self.services.config
        try:
            while True:
                try:
                    async with asyncio.timeout(cfg.idle_timeout or None):
                        payload = await read_frame(self.reader, cfg.max_frame_bytes)
                except FrameTooLarge as exc:
                    await self._write([self._error(0, exc)])
                    return
                except TimeoutError:
                    log.info("native client %s sent nothing for %.0f s; closing",
                             self.writer.get_extra_info("peername"), cfg.idle_timeout)
                    return
                try:
                    req = parse(pb.Request(), payload)
                except InvalidRequest as exc:
                    await self._write([self._error(0, exc)])
                    continue
                assert isinstance(req, pb.Request)
                kind = req.WhichOneof("body")
                if self.principal is None and self.services.security.enabled and kind not in _BEFORE_CONNECT:
                    await self._write([self._error(req.request_id, AuthenticationFailed("Connect with credentials first"))])
                    return
                if kind in _ORDERED:
                    await self._queue_send(req, len(payload))
                else:
                    await self._handle(req)
                if self.closing:
                    await asyncio.sleep(FAILED_AUTHENTICATION_DELAY)
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._sends.join(), 1.0)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
            for consumer in list(self.consumers.values()):
                with contextlib.suppress(Exception):
                    await self.subs.unsubscribe_consumer(consumer)
            self.consumers.clear()
            self.txns.disconnected()

    async def _queue_send(self, req: pb.Request, size: int) -> None:
        """Queue a send for the send loop; while the queue holds its byte budget, stop reading."""
        budget = self.services.config.connection_buffer_bytes
        while self.queued_bytes and self.queued_bytes + size > budget:
            if self._sender is None or self._sender.done():
                raise ConnectionError("the connection can no longer be written to")
            self._room.clear()
            await self._room.wait()
        self.queued_bytes += size
        self._sends.put_nowait((req, size))

    async def _handle(self, req: pb.Request) -> None:
        kind = req.WhichOneof("body")
        handler = _HANDLERS.get(kind or "")
        try:
            if handler is None:
                raise InvalidRequest("unknown request type")
            resp = await handler(self, req)
        except Exception as exc:
            if not isinstance(exc, GatewayError):
                log.exception("native %s request failed", kind)
            resp = self._error_response(exc)
        if resp is not None and req.request_id:
            resp.request_id = req.request_id
            await self._write([frame(resp)])

    async def _write(self, chunks: list[bytes | memoryview]) -> None:
        self.writer.writelines(chunks)
        await self.writer.drain()

    @staticmethod
    def _error_response(exc: BaseException) -> pb.Response:
        code = exc.code if isinstance(exc, GatewayError) else ErrorCode.UNKNOWN
        return pb.Response(error=pb.Error(code=int(code), message=str(exc)))

    @classmethod
    def _error(cls, request_id: int, exc: BaseException) -> bytes:
        resp = cls._error_response(exc)
        resp.request_id = request_id
        return frame(resp)

    # -- produce --------------------------------------------------------------------------------

    async def _send_loop(self) -> None:
        while True:
            queued = [await self._sends.get()]
            while not self._sends.empty() and len(queued) < _SEND_BATCH:
                queued.append(self._sends.get_nowait())
            try:
                out = await self._sends_in_order([req for req, _ in queued])
                await self._write(out)
            except ConnectionError:
                return
            finally:
                self.queued_bytes -= sum(size for _, size in queued)
                self._room.set()
                for _ in queued:
                    self._sends.task_done()

    async def _sends_in_order(self, reqs: list[pb.Request]) -> list[bytes | memoryview]:
        """Answers to sends and watermarks in arrival order: a watermark goes into the log after
        every send before it, so it never overtakes a message its producer sent earlier."""
        out: list[bytes | memoryview] = []
        run: list[pb.Request] = []
        for req in reqs:
            if req.WhichOneof("body") == "send":
                run.append(req)
                continue
            if run:
                out += await self._send_all(run)
                run = []
            try:
                resp = await self._send_watermark(req.send_watermark)
            except Exception as exc:
                if not isinstance(exc, GatewayError):
                    log.exception("native watermark failed")
                out.append(self._error(req.request_id, exc))
            else:
                resp.request_id = req.request_id
                out.append(frame(resp))
        if run:
            out += await self._send_all(run)
        return out

    async def _send_watermark(self, r: pb.SendWatermark) -> pb.Response:
        """W_SET, or W_IDLE, of the producer into every partition of its topic."""
        producer = self.producers.get(r.handle)
        if producer is None:
            raise NotAllowed(f"no producer {r.handle} on this connection")
        event_time = None if r.idle else r.event_time_ms
        watermarks = self.services.watermark
        if not r.txn_id:
            offsets = await watermarks.send(producer.topic, producer.name, event_time)
        else:
            txn = await self.txns.get(r.txn_id)
            info = await self.services.log.topic(producer.topic, create=False)
            await self.txns.add_partitions(r.txn_id, [(info.name, p) for p in range(info.partitions)])
            with expired_errors(r.txn_id):
                offsets = await watermarks.send(producer.topic, producer.name, event_time, txn_id=txn.txn_id,
                                                producer_id=txn.producer_id, producer_epoch=txn.producer_epoch)
        return pb.Response(watermark_receipt=pb.WatermarkReceipt(offsets=offsets))

    async def _send_all(self, reqs: list[pb.Request]) -> list[bytes | memoryview]:
        """Answers to `reqs`, in order: one append round trip for the batches that go to the log now,
        after each transaction has taken in its partitions; delayed messages to the delay index."""
        answers: dict[int, pb.Response | Exception] = {}
        checked: dict[int, tuple[str, int, bytes | memoryview]] = {}
        by_txn: dict[str, list[int]] = {}
        for i, req in enumerate(reqs):
            try:
                checked[i] = await self._checked_send(req.send)
            except GatewayError as exc:
                answers[i] = exc
                continue
            if req.send.txn_id:
                by_txn.setdefault(req.send.txn_id, []).append(i)
        for txn_id, idx in by_txn.items():
            try:
                await self.txns.add_partitions(txn_id, sorted({checked[i][:2] for i in idx}))
            except GatewayError as exc:
                for i in idx:
                    answers[i] = exc
                    del checked[i]
        now = [i for i in checked if not _delayed(reqs[i].send)]
        for i in checked:
            if _delayed(reqs[i].send):
                answers[i] = await self._send_delayed(reqs[i].send, checked[i])
        if now:
            try:
                results = [p.result for p in await self.services.log.append([checked[i] for i in now])]
            except Exception as exc:
                results = [exc] * len(now)
            for i, res in zip(now, results, strict=True):
                if isinstance(res, Exception):
                    txn_id = reqs[i].send.txn_id
                    answers[i] = as_expired(txn_id, res) if txn_id and isinstance(res, GatewayError) else res
                else:
                    receipt = pb.SendReceipt(base_offset=res.base_offset, duplicate=res.duplicate)
                    answers[i] = pb.Response(send_receipt=receipt)
        out: list[bytes | memoryview] = []
        for i, req in enumerate(reqs):
            ans = answers[i]
            if isinstance(ans, Exception):
                out.append(self._error(req.request_id, ans))
            else:
                ans.request_id = req.request_id
                out.append(frame(ans))
        return out

    async def _send_delayed(self, send: pb.Send, item: tuple[str, int, bytes | memoryview]) -> pb.Response | Exception:
        """A held message has no offset yet: its receipt says -1 and `delayed`, as the Kafka face answers -1."""
        topic, partition, batch = item
        try:
            res = await self.services.delay.send(
                topic, partition, bytes(batch),
                deliver_at_ms=send.deliver_at_ms if send.deliver_at_ms > 0 else None,
                deliver_after_ms=send.deliver_after_ms if send.deliver_at_ms <= 0 else None,
                txn_id=send.txn_id or None,
            )
        except Exception as exc:
            return exc
        held = res.held > 0 or bool(send.txn_id)
        return pb.Response(send_receipt=pb.SendReceipt(base_offset=-1, delayed=held))

    async def _checked_send(self, send: pb.Send) -> tuple[str, int, bytes | memoryview]:
        producer = self.producers.get(send.handle)
        if producer is None:
            raise NotAllowed(f"no producer {send.handle} on this connection")
        if send.partition >= producer.partitions:
            raise InvalidRequest(f"{producer.topic} has no partition {send.partition}")
        h = parse_header(send.batch, verify_crc=False)
        if h.control:
            raise InvalidRequest("a control batch cannot be sent")
        if _delayed(send):
            if h.record_count != 1 or h.producer_id != -1 or h.transactional:
                raise InvalidRequest("a delayed message is one record in a batch without producer id")
        elif send.txn_id:
            txn = await self.txns.get(send.txn_id)
            if h.producer_id != txn.producer_id or not h.transactional:
                raise InvalidRequest("a transactional batch carries its transaction's producer id and flag")
        elif h.producer_id != producer.producer_id or h.transactional:
            raise InvalidRequest("the batch must carry this producer's id and not be transactional")
        return producer.topic, send.partition, send.batch

    async def _authorize(self, resource: ResourceType, name: str, operation: Operation) -> None:
        if not await self.services.security.authorize(self.principal, resource, name, operation):
            raise AuthorizationFailed(f"{self.principal} may not {operation} {resource} {name!r}")

    async def _create_producer(self, req: pb.Request) -> pb.Response:
        r = req.create_producer
        await self._authorize(ResourceType.TOPIC, r.topic, Operation.WRITE)
        pid, info = await self.server.producers.register(r.topic, r.resume_producer_id)
        handle = self._next_handle
        self._next_handle += 1
        name = r.producer_name or f"producer-{pid}"
        self.producers[handle] = _Producer(info.name, pid, info.partitions, name)
        created = pb.ProducerCreated(handle=handle, producer_id=pid, partitions=info.partitions, producer_name=name)
        return pb.Response(producer_created=created)

    async def _close_producer(self, req: pb.Request) -> pb.Response:
        self.producers.pop(req.close_producer.handle, None)
        return pb.Response(success=pb.Success())

    # -- consume --------------------------------------------------------------------------------

    async def deliver(self, consumer_id: int, deliveries: list[Delivery]) -> None:
        entries = [
            OutgoingEntry(d.partition, d.entry.base_offset, d.entry.batch, d.skip(), d.redelivery_count)
            for d in deliveries
        ]
        await self._write(messages_frame(consumer_id, entries))

    async def reset(self, consumer_id: int) -> None:
        await self._write([frame(pb.Response(consumer_reset=pb.ConsumerReset(consumer_id=consumer_id)))])

    async def watermark(self, consumer_id: int, watermark: int | None) -> None:
        update = pb.WatermarkUpdate(consumer_id=consumer_id)
        if watermark is not None:
            update.watermark_ms = watermark
        await self._write([frame(pb.Response(watermark_update=update))])

    def _consumer(self, consumer_id: int) -> Consumer:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            raise SubscriptionNotFound(f"no consumer {consumer_id} on this connection")
        return consumer

    async def _subscribe(self, req: pb.Request) -> pb.Response:
        r = req.subscribe
        await self._authorize(ResourceType.TOPIC, r.topic, Operation.READ)
        await self._authorize(ResourceType.GROUP, r.subscription, Operation.READ)
        consumer = await self.subs.subscribe(
            r.topic,
            r.subscription,
            self,
            mode=_MODES.get(r.mode, Mode.EXCLUSIVE),
            initial_position="earliest" if r.initial_position == pb.EARLIEST else "latest",
            consumer_name=r.consumer_name,
            ack_timeout=r.ack_timeout_ms / 1000,
        )
        self.consumers[consumer.id] = consumer
        sub = consumer.subscription
        assert sub is not None
        subscribed = pb.Subscribed(consumer_id=consumer.id, partitions=sub.partitions)
        if sub.watermark_sent is not None:  # read last, with no wait before the answer goes out
            subscribed.watermark_ms = sub.watermark_sent
        return pb.Response(subscribed=subscribed)

    async def _flow(self, req: pb.Request) -> pb.Response:
        self.subs.flow(self._consumer(req.flow.consumer_id), req.flow.permits)
        return pb.Response(success=pb.Success())

    async def _ack(self, req: pb.Request) -> pb.Response:
        r = req.ack
        individual: dict[int, list[int]] = {}
        for po in r.individual:
            individual.setdefault(po.partition, []).extend(po.offsets)
        cumulative = {po.partition: max(po.offsets) for po in r.cumulative if po.offsets}
        consumer = self._consumer(r.consumer_id)
        if r.txn_id:
            sub = consumer.subscription
            assert sub is not None
            members = [(sub.topic, p, sub.name) for p in sorted(set(individual) | set(cumulative))]
            await self.txns.add_subscriptions(r.txn_id, members)
        await self.subs.acknowledge(consumer, individual, cumulative, r.txn_id or None)
        return pb.Response(success=pb.Success())

    async def _nack(self, req: pb.Request) -> pb.Response:
        offsets: dict[int, list[int]] = {}
        for po in req.nack.offsets:
            offsets.setdefault(po.partition, []).extend(po.offsets)
        self.subs.negative_acknowledge(self._consumer(req.nack.consumer_id), offsets)
        return pb.Response(success=pb.Success())

    async def _seek(self, req: pb.Request) -> pb.Response:
        r = req.seek
        consumer = self._consumer(r.consumer_id)
        target = r.WhichOneof("target")
        if target == "timestamp_ms":
            await self.subs.seek_time(consumer, r.timestamp_ms)
        elif target in ("offset", "earliest", "latest"):
            offset = r.offset if target == "offset" else (-1 if target == "earliest" else -2)
            partition = None if r.all_partitions or target != "offset" else r.partition
            await self.subs.seek_offset(consumer, offset, partition)
        else:
            raise InvalidRequest("seek needs an offset, a timestamp, earliest or latest")
        return pb.Response(success=pb.Success())

    async def _close_consumer(self, req: pb.Request) -> pb.Response:
        consumer = self.consumers.pop(req.close_consumer.consumer_id, None)
        if consumer is not None:
            await self.subs.unsubscribe_consumer(consumer)
        return pb.Response(success=pb.Success())

    async def _unsubscribe(self, req: pb.Request) -> pb.Response:
        consumer = self._consumer(req.unsubscribe.consumer_id)
        await self.subs.delete_subscription(consumer)
        self.consumers.pop(consumer.id, None)
        return pb.Response(success=pb.Success())

    # -- range reads: positions kept by the reader --------------------------------------------------

    async def _list_partitions(self, req: pb.Request) -> pb.Response:
        await self._authorize(ResourceType.TOPIC, req.list_partitions.topic, Operation.DESCRIBE)
        bounds = await self.services.log.partition_bounds(req.list_partitions.topic)
        infos = [
            pb.PartitionInfo(partition=b.partition, log_start=b.log_start, high_watermark=b.high_watermark,
                             last_stable_offset=b.last_stable_offset)
            for b in bounds
        ]
        return pb.Response(partitions=pb.Partitions(partitions=infos))

    async def _read_range(self, req: pb.Request) -> None:
        """Answered here, as chunks: the batches go to the socket uncopied."""
        r = req.read_range
        await self._authorize(ResourceType.TOPIC, r.topic, Operation.READ)
        if r.start < 0 or (r.end >= 0 and r.end < r.start):
            raise InvalidRequest(f"no offset range [{r.start}, {r.end})")
        max_bytes = min(r.max_bytes or _RANGE_BYTES, self.services.config.max_frame_bytes // 2)
        got = await self.services.log.read_range(r.topic, r.partition, r.start, r.end, max_bytes)
        entries = [OutgoingEntry(r.partition, e.base_offset, e.batch) for e in got.entries]
        if req.request_id:
            await self._write(range_frame(req.request_id, entries, got.next_offset, got.last_stable_offset))

    # -- session --------------------------------------------------------------------------------

    async def _connect(self, req: pb.Request) -> pb.Response:
        r = req.connect
        epoch = 0
        if r.incarnation and not r.transaction_key:
            raise InvalidRequest("an incarnation is one of a transaction key")
        security = self.services.security
        if security.enabled and self.principal is None:
            self.closing = True  # unless this succeeds
            if r.token:
                self.principal = await security.check_token(r.token)
            elif r.username:
                self.principal = await security.check_password(r.username, r.password)
            else:
                raise AuthenticationFailed("this gateway wants a user name and password, or a token")
            self.closing = False
            self.txns.owner = self.principal.removeprefix(USER_PREFIX)
        if r.transaction_key:
            if self.txns.key:
                raise NotAllowed("this connection holds a transaction key already")
            epoch = await self.txns.connect(r.transaction_key, r.epoch, self._fenced, r.incarnation)
        cfg = self.services.config
        connected = pb.Connected(
            protocol_version=PROTOCOL_VERSION, max_frame_bytes=cfg.max_frame_bytes, epoch=epoch,
            idle_timeout_ms=int(cfg.idle_timeout * 1000), principal=self.principal or "",
        )
        return pb.Response(connected=connected)

    def _fenced(self) -> None:
        """A newer epoch took our transaction key: say so, and close at once."""
        self.txns.fenced = True
        exc = NotAllowed(f"transaction key {self.txns.key!r}: epoch {self.txns.epoch} was fenced by a newer one")
        with contextlib.suppress(Exception):
            self.writer.write(self._error(0, exc))
        self.reader.feed_eof()
        self.writer.close()

    async def _new_transaction(self, req: pb.Request) -> pb.Response:
        r = req.new_transaction
        txn = await self.txns.begin(r.timeout_ms, r.group_key, r.group_commit_id)
        created = pb.TransactionCreated(
            txn_id=txn.txn_id, producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
            timeout_ms=txn.timeout_ms,
        )
        return pb.Response(transaction_created=created)

    async def _end_transaction(self, req: pb.Request) -> pb.Response:
        r = req.end_transaction
        await self.txns.end(r.txn_id, r.commit)
        return pb.Response(success=pb.Success())

    async def _get_watermark(self, req: pb.Request) -> pb.Response:
        r = req.get_watermark
        await self._authorize(ResourceType.TOPIC, r.topic, Operation.DESCRIBE)
        value = pb.WatermarkValue()
        if r.positions:
            wm = await self.services.watermark.watermark(r.topic, {p.partition: p.offset for p in r.positions})
            if wm is not None:
                value.watermark_ms = wm
        return pb.Response(watermark=value)

    async def _commit_transactions(self, req: pb.Request) -> pb.Response:
        r = req.commit_transactions
        if not r.txn_ids:
            raise InvalidRequest("no transactions to commit")
        commit_id = r.commit_id if r.HasField("commit_id") else None
        committed = await self.txns.commit_group(list(r.txn_ids), commit_id)
        return pb.Response(transactions_committed=pb.TransactionsCommitted(duplicate=not committed))

    async def _ping(self, req: pb.Request) -> pb.Response:
        return pb.Response(pong=pb.Pong())


_HANDLERS: dict[str, Handler] = {
    "connect": Connection._connect,
    "ping": Connection._ping,
    "create_producer": Connection._create_producer,
    "close_producer": Connection._close_producer,
    "subscribe": Connection._subscribe,
    "flow": Connection._flow,
    "ack": Connection._ack,
    "nack": Connection._nack,
    "seek": Connection._seek,
    "close_consumer": Connection._close_consumer,
    "unsubscribe": Connection._unsubscribe,
    "new_transaction": Connection._new_transaction,
    "end_transaction": Connection._end_transaction,
    "list_partitions": Connection._list_partitions,
    "read_range": Connection._read_range,
    "commit_transactions": Connection._commit_transactions,
    "get_watermark": Connection._get_watermark,
}


def _delayed(send: pb.Send) -> bool:
    return send.deliver_at_ms > 0 or send.deliver_after_ms > 0
