"""The client: one connection to a gateway, from which producers and consumers are made.

When the connection drops, the client connects again in the background (unless `reconnect=False`)
and re-creates its producers (keeping their producer ids, so resent batches are still recognised
as duplicates) and consumers (whose unacknowledged messages the gateway delivers again). Requests
made meanwhile wait for the new connection, up to the operation timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import timedelta
from ssl import SSLContext
from typing import Any
from urllib.parse import urlsplit

from gateway.client import reader
from gateway.client.batch import BatchReceivePolicy
from gateway.client.chunks import ChunkPolicy
from gateway.client.connection import Connection, Credentials
from gateway.client.consumer import Consumer
from gateway.client.errors import ConnectionLost
from gateway.client.letters import MAX_RECONSUMETIMES, DeadLetterPolicy
from gateway.client.message import Message
from gateway.client.pattern import PatternConsumer
from gateway.client.producer import Producer, creation
from gateway.client.reader import PartitionInfo, StoredBatch
from gateway.client.registry import RegistryClient
from gateway.client.schema import Schema, Typed
from gateway.client.transaction import Transaction
from gateway.errors import ExpiredTransactionError, GatewayError, NotAllowed
from gateway.formats.records import Compression
from gateway.pb import gateway_pb2 as pb

log = logging.getLogger(__name__)

_MODES = {"exclusive": pb.EXCLUSIVE, "failover": pb.FAILOVER, "shared": pb.SHARED, "key_shared": pb.KEY_SHARED}
_POSITIONS = {"earliest": pb.EARLIEST, "latest": pb.LATEST}
DEFAULT_PORT = 6650


def parse_url(url: str) -> tuple[str, int]:
    """`gateway://host:port` (the port defaults to 6650)."""
    parts = urlsplit(url if "://" in url else f"gateway://{url}")
    if parts.scheme != "gateway" or not parts.hostname:
        raise ValueError(f"expected gateway://host:port, not {url!r}")
    return parts.hostname, parts.port or DEFAULT_PORT


class Client:
    def __init__(
        self, conn: Connection, host: str, port: int, *, timeout: float, client_name: str, reconnect: bool,
        transaction_key: str = "", incarnation: str = "", credentials: Credentials | None = None,
        ssl: SSLContext | None = None, registry: RegistryClient | None = None,
    ) -> None:
        self._conn = conn
        self.registry = registry  # the Schema Registry typed producers and consumers use
        self._credentials = credentials
        self._ssl = ssl
        self.transaction_key = transaction_key
        self.incarnation = incarnation
        self.epoch = conn.epoch  # of the transaction key; -1 without one
        self.fenced: NotAllowed | None = None  # set when a newer epoch took the transaction key
        self._host, self._port = host, port
        self._timeout = timeout
        self._client_name = client_name
        self._reconnect = reconnect
        self._children: set[Producer | Consumer] = set()
        self._ready = asyncio.Event()
        self._ready.set()
        self._closing = False
        self._reconnector: asyncio.Task[None] | None = None
        conn.on_lost = self._lost

    @classmethod
    async def connect(
        cls, url: str, *, operation_timeout: float = 30.0, client_name: str = "", reconnect: bool = True,
        transaction_key: str | None = None, epoch: int = -1, incarnation: str = "", username: str | None = None,
        password: str | None = None, token: str | None = None, ssl: SSLContext | None = None,
        schema_registry_url: str | None = None,
    ) -> Client:
        """Open a connection; `operation_timeout` bounds every request's wait for its answer.

        `transaction_key` (no '&'): this client becomes the key's one live holder, under a new epoch
        (`client.epoch`); the older holder's connection is closed and its transaction aborted. A
        reconnect presents the epoch given, and is refused (NotAllowed) once a newer one holds the key.
        `epoch`: the last epoch given to this task before, to resume it; -1 for a fresh start.
        `incarnation`: a name for this run of a task whose processes come and go (a Spark query run):
        each process of the key's current incarnation connects in its epoch, a new incarnation takes a
        new one, and a former incarnation is refused (NotAllowed): a zombie of an earlier run.
        `username` and `password`, or `token`: for a gateway with authentication on (refused ones
        raise AuthenticationFailed); the transaction key is then that user's own. `ssl`: a client
        context for a gateway listening with TLS (`ssl.create_default_context(cafile=...)`).
        `schema_registry_url`: the Schema Registry (the gateway's `--schema-registry-port`) that
        producers and consumers given a `schema` use, with the same credentials."""
        host, port = parse_url(url)
        key = transaction_key or ""
        if "&" in key:
            raise ValueError(f"a transaction key may not contain '&': {key!r}")
        if incarnation and not key:
            raise ValueError("an incarnation is one of a transaction key")
        creds = Credentials(username or "", password or "", token or "")
        conn = await Connection.open(host, port, timeout=operation_timeout, client_name=client_name,
                                     transaction_key=key, epoch=epoch, incarnation=incarnation, credentials=creds,
                                     ssl=ssl)
        registry = RegistryClient(schema_registry_url, username=creds.username, password=creds.password,
                                  token=creds.token, timeout=operation_timeout) if schema_registry_url else None
        return cls(conn, host, port, timeout=operation_timeout, client_name=client_name, reconnect=reconnect,
                   transaction_key=key, incarnation=incarnation, credentials=creds, ssl=ssl, registry=registry)

    # -- the connection -------------------------------------------------------------------------

    @property
    def operation_timeout(self) -> float:
        return self._timeout

    @property
    def will_reconnect(self) -> bool:
        """A lost connection is being (or will be) replaced: a request may be tried again."""
        return self._reconnect and not self._closing

    @property
    def reconnecting(self) -> bool:
        return self._reconnector is not None and not self._reconnector.done()

    async def request(self, build: pb.Request | Callable[[], pb.Request], timeout: float | None = None) -> pb.Response:
        """Send once connected; `build` is called after any reconnection, so it sees fresh ids."""
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), timeout or self._timeout)
            except TimeoutError:
                raise ConnectionLost(f"not connected to {self._host}:{self._port} again in time") from None
        if self.fenced is not None:
            raise self.fenced
        req = build() if callable(build) else build
        return await self._conn.request(req, timeout)

    async def _created(self, build: Callable[[], pb.Request]) -> pb.Response:
        """A producer's or consumer's creation, sent again while the gateway refuses it retriably
        (NotEnoughReplicas while a Redis replica reconnects, StorageUnavailable while Redis fails
        over), after a backoff from 0.1 s doubling to 2 s, until `operation_timeout` has passed since
        the first try; then the last refusal. Pulsar's client retries a producer's creation so
        (ProducerImpl: createProducerTimeout, its operation timeout), as Kafka's clients retry a
        RetriableException (retry.backoff.ms up to retry.backoff.max.ms). A lost connection is not
        retried here: the creation may have reached the gateway. Each try has the whole timeout for
        its answer (a refusal while Redis is away comes after the gateway's own connect attempt), so
        the refusal, not a cut-short wait, is what the caller sees last."""
        deadline, delay = time.monotonic() + self._timeout, 0.1
        while True:
            try:
                return await self.request(build)
            except GatewayError as exc:
                if not exc.retriable or isinstance(exc, ConnectionLost) or time.monotonic() + delay >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _lost(self, reason: GatewayError) -> None:
        if self._closing or not self._reconnect:
            return
        log.warning("connection to %s:%d lost (%s); reconnecting", self._host, self._port, reason)
        self._ready.clear()
        self._reconnector = asyncio.create_task(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        delay = 0.05
        while not self._closing:
            try:
                conn = await Connection.open(self._host, self._port, timeout=self._timeout,
                                             client_name=self._client_name, transaction_key=self.transaction_key,
                                             epoch=self.epoch, incarnation=self.incarnation,
                                             credentials=self._credentials, ssl=self._ssl)
            except NotAllowed as exc:
                if not self.transaction_key:
                    raise
                log.warning("%s; not reconnecting", exc)  # the gateway's message names the key
                self.fenced = exc
                self._closing = True
                self._ready.set()
                for child in list(self._children):
                    if isinstance(child, Consumer):
                        child.fail(exc)
                return
            except GatewayError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            self._conn = conn
            self.epoch = conn.epoch
            try:
                for child in list(self._children):
                    await child._reattach()
            except GatewayError as exc:  # e.g. the gateway has not noticed our old consumer leave yet
                log.info("re-attaching after reconnect failed (%s); trying again", exc)
                await conn.close()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            conn.on_lost = self._lost
            self._ready.set()
            if conn.closed:  # lost again before we were listening
                self._lost(ConnectionLost("the gateway closed the connection"))
            return

    # -- producers and consumers ----------------------------------------------------------------

    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        *,
        batching: bool = True,
        linger_ms: float = 5.0,
        batch_max_messages: int = 1000,
        batch_max_bytes: int = 512 * 1024,
        compression: Compression | str | None = None,
        send_timeout: float = 30.0,
        acks: str = "1",
        chunking_enabled: bool = False,
        chunk_max_message_size: int | None = None,
        schema: Schema | None = None,
        key_schema: Schema | None = None,
    ) -> Producer:
        """A producer on `topic` (created when the gateway auto-creates topics, else TopicNotFound).
        A retriable refusal of its creation (too few Redis replicas for a moment) is tried again
        within the client's `operation_timeout`, as Pulsar's client does.

        Messages wait up to `linger_ms` to share a batch; `batching=False` sends each alone.
        `acks="all"`: a send completes once the topic's `min.insync.replicas` - 1 Redis replicas hold
        it too (Kafka's acks=all); too few replicas fail it after `send_timeout` of retries.
        `chunking_enabled`: a message over the topic's max.message.bytes (or over
        `chunk_max_message_size`, when smaller) is sent in chunks of it, which consumers put together
        again (Pulsar's chunking); else the gateway refuses it (MessageTooLarge).
        `schema` (`AvroSchema`, `JsonSchema`, `ProtobufSchema`), `key_schema`: `send` takes values
        (keys) of it, serialized as Confluent's serializers do (gateway.client.schema); registered
        in the Schema Registry now (IncompatibleSchema when the subject refuses it).
        """
        if acks not in ("1", "all"):
            raise ValueError(f'acks is "1" or "all", not {acks!r}')
        wire = pb.ALL if acks == "all" else pb.LEADER
        typed = await Typed.bind(self.registry, topic, schema, key_schema, producing=True)
        resp = await self._created(lambda: creation(topic, producer_name or "", wire, send_timeout))
        created = resp.producer_created
        producer = Producer(
            self,
            topic,
            handle=created.handle,
            producer_id=created.producer_id,
            partitions=created.partitions,
            name=created.producer_name,
            batching=batching,
            linger_ms=linger_ms,
            batch_max_messages=batch_max_messages,
            batch_max_bytes=batch_max_bytes,
            compression=Compression.parse(compression),
            send_timeout=send_timeout,
            acks=wire,
            chunk_bytes=min(created.max_message_bytes, chunk_max_message_size or created.max_message_bytes)
            if chunking_enabled else 0,
            typed=typed,
        )
        self._children.add(producer)
        return producer

    async def subscribe(
        self,
        topic: str,
        subscription: str,
        mode: str = "exclusive",
        initial_position: str = "latest",
        *,
        consumer_name: str | None = None,
        receiver_queue_size: int = 1000,
        ack_timeout: float | None = None,
        negative_ack_delay: float = 1.0,
        on_watermark: Callable[[int | None], object] | None = None,
        dead_letter_policy: DeadLetterPolicy | None = None,
        retry_enable: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        expire_time_of_incomplete_chunked_message: float = 60.0,
        batch_receive_policy: BatchReceivePolicy | None = None,
        sticky_ranges: Sequence[tuple[int, int]] = (),
        schema: Schema | None = None,
        key_schema: Schema | None = None,
    ) -> Consumer:
        """A consumer of every partition of `topic` on `subscription`; a retriable refusal is tried
        again within `operation_timeout`, as `create_producer`'s.

        `mode`: exclusive (a second consumer gets ConsumerBusy), failover, shared, or key_shared
        (messages of one key go to one consumer at a time; give each consumer a `consumer_name`, which
        places it on the hash ring, as Pulsar's consumer name does).
        `initial_position` (earliest or latest) counts only when the subscription is created.
        `ack_timeout` (seconds): unacknowledged messages are delivered again after it.
        `negative_ack_delay` (seconds): how long a negatively acknowledged message waits.
        `on_watermark`: called with each change of the subscription's watermark, in order with the
        messages (see `Consumer.last_watermark` and `Consumer.watermarks()`).
        `dead_letter_policy`: the gateway moves a message redelivered more often to a dead-letter topic.
        `retry_enable`: the consumer also receives its retry-letter topic, where `reconsume_later`
        sends messages (with no policy given, Pulsar's: 16 reconsumes, then the dead-letter topic).
        Chunked messages (see `create_producer`) are put together again: at most
        `max_pending_chunked_message` incomplete ones are held (the oldest is then acknowledged with
        `auto_ack_oldest_chunked_message_on_queue_full`, else negatively acknowledged), and one
        incomplete for `expire_time_of_incomplete_chunked_message` seconds is acknowledged and dropped.
        `batch_receive_policy`: what `Consumer.batch_receive()` gathers (Pulsar's defaults otherwise).
        `sticky_ranges` (key_shared): the key hashes (0-65535, both ends included) this consumer takes,
        as Pulsar's sticky Key_Shared mode, instead of a place on the ring.
        `schema`, `key_schema`: values (keys) are read by the schema each record names, into the
        message's `decoded_value` (`decoded_key`), as Confluent's deserializers read them.
        """
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}")
        if initial_position not in _POSITIONS:
            raise ValueError("initial_position must be 'earliest' or 'latest'")
        subscribe = pb.Subscribe(
            topic=topic,
            subscription=subscription,
            mode=_MODES[mode],
            initial_position=_POSITIONS[initial_position],
            consumer_name=consumer_name or "",
            ack_timeout_ms=int((ack_timeout or 0) * 1000),
            sticky_ranges=[pb.KeyHashRange(start=a, end=b) for a, b in sticky_ranges],
        )
        if retry_enable and dead_letter_policy is None:
            dead_letter_policy = DeadLetterPolicy(MAX_RECONSUMETIMES)
        if dead_letter_policy is not None:
            subscribe.dead_letter.CopyFrom(dead_letter_policy.resolved(topic, subscription))
        typed = await Typed.bind(self.registry, topic, schema, key_schema, producing=False)

        async def open_one(subscribe: pb.Subscribe) -> Consumer:
            resp = await self._created(lambda: pb.Request(subscribe=subscribe))
            consumer = Consumer(
                self,
                subscribe,
                consumer_id=resp.subscribed.consumer_id,
                partitions=resp.subscribed.partitions,
                mode=mode,
                receiver_queue_size=max(1, receiver_queue_size),
                negative_ack_delay=negative_ack_delay,
                batch_receive_policy=batch_receive_policy,
                watermark=resp.subscribed.watermark_ms if resp.subscribed.HasField("watermark_ms") else None,
                on_watermark=on_watermark,
                chunks=ChunkPolicy(max_pending_chunked_message, auto_ack_oldest_chunked_message_on_queue_full,
                                   expire_time_of_incomplete_chunked_message),
                typed=typed,
            )
            consumer.start()
            self._children.add(consumer)
            return consumer

        consumer = await open_one(subscribe)
        if retry_enable:
            retry = pb.Subscribe()
            retry.CopyFrom(subscribe)
            retry.topic, retry.initial_position = subscribe.dead_letter.retry_letter_topic, pb.EARLIEST
            try:
                consumer.receive_retries(await open_one(retry))
            except BaseException:
                await consumer.close()
                raise
        return consumer

    async def subscribe_pattern(
        self,
        pattern: str | re.Pattern[str],
        subscription: str,
        mode: str = "exclusive",
        initial_position: str = "latest",
        *,
        pattern_auto_discovery_period: float = 60.0,
        **options: Any,
    ) -> PatternConsumer:
        """A consumer of every topic whose whole name matches `pattern` (RE2 syntax), on
        `subscription`: Pulsar's topicsPattern. Topics created later are found within
        `pattern_auto_discovery_period` seconds and read from their earliest message;
        `initial_position` is for those matching now. `options` are `subscribe`'s."""
        regex = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
        consumer = PatternConsumer(
            regex, subscription, lambda: self.list_topics(regex),
            lambda topic, position: self.subscribe(topic, subscription, mode, position, **options),
            pattern_auto_discovery_period, alive=lambda: not self._closing,
        )
        try:
            await consumer.start(initial_position)
        except BaseException:
            await consumer.close()
            raise
        return consumer

    async def list_topics(self, pattern: str = "") -> list[str]:
        """The topics whose whole name matches `pattern` (RE2 syntax; "": all) that this client may
        describe, sorted."""
        resp = await self.request(pb.Request(list_topics=pb.ListTopics(pattern=pattern)))
        return list(resp.topics.names)

    async def new_transaction(
        self, timeout: float | timedelta | None = None, *, group_key: str = "", group_commit_id: int = 0
    ) -> Transaction:
        """Open a transaction; `timeout` (seconds or timedelta; None: the gateway's default) after
        which the gateway aborts it. Over the gateway's maximum: InvalidConfig. With a transaction
        key, it is the key's one open transaction (ConcurrentTransactions while another is open).

        `group_key`: the transaction is meant for `commit_transactions` by the holder of that
        transaction key with commit id `group_commit_id` (a task's part of a distributed job); that
        key's commit with this id or a later one that leaves it out aborts it."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if seconds is not None and seconds <= 0:
            raise ValueError("a transaction timeout must be positive")
        req = pb.NewTransaction(timeout_ms=round(seconds * 1000) if seconds is not None else 0,
                                group_key=group_key, group_commit_id=group_commit_id)
        epoch = self.epoch if self.transaction_key else -1
        try:
            resp = await self.request(pb.Request(new_transaction=req))
        except NotAllowed as exc:
            if self.fenced is not None:
                raise ExpiredTransactionError(str(exc)) from exc  # the gateway's message names the key
            raise
        return Transaction(self, resp.transaction_created, epoch)

    # -- range reads: the reader keeps its positions -------------------------------------------------

    async def list_partitions(self, topic: str) -> list[PartitionInfo]:
        """The topic's partitions with their log start, high watermark and last stable offset."""
        return await reader.list_partitions(self, topic)

    def read_range(
        self, topic: str, partition: int, start: int, end: int = -1, *, max_bytes: int = reader.DEFAULT_MAX_BYTES
    ) -> AsyncIterator[Message]:
        """The committed messages of offsets [start, end) of one partition, READ_COMMITTED, with no
        position kept by the gateway (end -1: up to the last stable offset). Reading the same range
        again gives the same messages, as long as retention has not removed them (OffsetOutOfRange)."""
        return reader.read_range(self, topic, partition, start, end, max_bytes=max_bytes)

    def read_batches(
        self, topic: str, partition: int, start: int, end: int = -1, *, max_bytes: int = reader.DEFAULT_MAX_BYTES
    ) -> AsyncIterator[StoredBatch]:
        """As `read_range`, but the stored batches undecoded, for readers that decode in bulk; the first
        and last may hold records outside the range."""
        return reader.read_batches(self, topic, partition, start, end, max_bytes=max_bytes)

    async def watermark(self, topic: str, offsets: dict[int, int]) -> int | None:
        """The broker watermark (epoch ms) of a stretch of `topic` read up to `offsets` (partition ->
        next offset): the minimum over those partitions of the watermark at each offset, read-committed
        (an offset past the last stable offset counts as it). None when no producer is in the set."""
        req = pb.GetWatermark(
            topic=topic, positions=[pb.PartitionOffset(partition=p, offset=o) for p, o in sorted(offsets.items())]
        )
        resp = await self.request(pb.Request(get_watermark=req))
        return resp.watermark.watermark_ms if resp.watermark.HasField("watermark_ms") else None

    async def commit_transactions(self, txns: Iterable[Transaction | str], *, commit_id: int | None = None) -> bool:
        """Commit transactions, opened here or by other clients (the tasks of a distributed job), at one
        point of no return: all become visible, or none. Each must be open (ExpiredTransactionError
        otherwise, and nothing is committed). With a transaction key, the commit is fenced by this
        client's epoch; a `commit_id` at or below the key's last one is a retry of a commit made
        before: nothing more becomes visible, the open transactions given are aborted, and the
        answer is False."""
        given = list(txns)
        ids = [t.txn_id if isinstance(t, Transaction) else t for t in given]
        req = pb.CommitTransactions(txn_ids=ids, commit_id=commit_id)
        resp = await self.request(pb.Request(commit_transactions=req))
        for t in given:
            if isinstance(t, Transaction):
                t.state = "ABORTED" if resp.transactions_committed.duplicate else "COMMITTED"
        return not resp.transactions_committed.duplicate

    async def abort_transactions(self, txn_ids: Iterable[str]) -> None:
        """Abort transactions by id, opened here or by other clients; harmless for aborted ones."""
        await asyncio.gather(*(
            self.request(pb.Request(end_transaction=pb.EndTransaction(txn_id=t, commit=False))) for t in txn_ids
        ))

    def _forget(self, child: Producer | Consumer) -> None:
        self._children.discard(child)

    async def close(self) -> None:
        """Flush producers, close consumers, then the connection."""
        if self.reconnecting:  # give up on it: waiting requests go on to fail at once
            await self._stop_reconnecting()
        for child in list(self._children):
            with contextlib.suppress(GatewayError):
                await child.close()
        await self._stop_reconnecting()
        await self._conn.close()
        if self.registry is not None:
            await self.registry.close()

    async def _stop_reconnecting(self) -> None:
        self._closing = True
        if self._reconnector is not None:
            self._reconnector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconnector
        self._ready.set()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
