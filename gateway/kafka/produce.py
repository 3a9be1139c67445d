"""Produce: record batches go to the log as the client sent them, never decoded here.

acks=0 gets no response at all; acks=1 is answered once Redis has the batches; acks=-1 (all) on a
topic with min.insync.replicas N also waits for N-1 Redis replicas to hold them (Redis's WAIT),
answering NOT_ENOUGH_REPLICAS (nothing written) as Kafka's leader does
(ReplicaManager/Partition.appendRecordsToLeader), and REQUEST_TIMED_OUT, with the offsets the
batch took, when they do not confirm it within the request's `timeout_ms`, as Kafka's
DelayedProduce expires; never later, whatever Redis does meanwhile. The response is hand-encoded (the hot path).
A batch refused for bad records names them in `record_errors` from v8 (KIP-467), with the refusal's
text as `error_message`, as ReplicaManager answers a RecordValidationException.

From v13 topics are named by id (KIP-516): each id is looked up afresh, one read per topic of the
request, so records never go to a topic made again under the name of the one the producer meant;
an id no topic has is UNKNOWN_TOPIC_ID on its partitions, as Kafka 4.2's KafkaApis answers, and
the response names topics by the ids asked for.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode as KafkaError

from gateway import telemetry
from gateway.domain.log import Produced
from gateway.domain.quotas import PRODUCE, REQUEST
from gateway.domain.security import Operation, ResourceType
from gateway.errors import GatewayError, InvalidRecord, InvalidTxnState, ReplicationTimedOut
from gateway.formats.records import ATTR_TRANSACTIONAL, HEADER, HEADER_SIZE
from gateway.kafka.client_quotas import counts_time, recorded, request_time, throttle
from gateway.kafka.dispatch import ApiKey, Encoded, RequestContext, handles
from gateway.kafka.errors import error_message, kafka_error
from gateway.kafka.produce_request import MAX_VERSION, MIN_VERSION, TOPIC_IDS_FROM, ProduceRequest
from gateway.kafka.txn import txn_error
from gateway.kafka.wire import I16, I32, I64, NO_TAGS, array_len, string, topic_key

log = logging.getLogger(__name__)

# Errors Kafka's ReplicaManager.appendToLocalLog answers with log start offset -1; for any other
# refusal of a partition's batch by its log (a sequence or epoch out of order, bad records, too few
# replicas) it answers the partition's log start offset (`processFailedRecord`).
BEFORE_THE_LOG = frozenset({
    KafkaError.unknown_topic_or_partition, KafkaError.not_leader_or_follower, KafkaError.message_too_large,
    KafkaError.record_list_too_large, KafkaError.corrupt_message, KafkaError.kafka_storage_error,
})

# a produce is answered by this share of its timeout_ms at the latest (the store gives up on its
# appends before: `LogStore.append`), of MIN_TIMEOUT_MS when it asks for less (acks=0 and 1 send any)
ANSWER_BY = 0.95
MIN_TIMEOUT_MS = 1_000
TXN_V2_PRODUCE = 12  # KIP-890 part 2: from this version a transactional producer speaks transactions V2
ABORTABLE_FROM = 11  # KIP-890: from this version a producer is told TRANSACTION_ABORTABLE, and aborts


@dataclass(frozen=True)
class PartitionResult:
    index: int
    error: KafkaError = KafkaError.none
    base_offset: int = -1
    log_start: int = -1
    message: str | None = None
    log_append_time: int = -1  # on LogAppendTime topics, the time the batches were stamped with
    record_errors: tuple[tuple[int, str], ...] = ()  # v8+ (KIP-467): the bad records of a refused batch


def _transactional(req: ProduceRequest) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of some partition is
    transactional (its header's attributes, at byte 21, of a magic 2 batch)."""
    return any(p.records is not None and len(p.records) >= 23 and p.records[16] == 2
               and I16.unpack_from(p.records, 21)[0] & ATTR_TRANSACTIONAL
               for t in req.topic_data for p in t.partition_data)


@handles(ApiKey.PRODUCE, MIN_VERSION, MAX_VERSION)  # the versions the hand-written reader reads
async def produce(ctx: RequestContext, req: ProduceRequest) -> Encoded | None:
    """The produce, answered within its `timeout_ms` whatever Redis does: the store gives up on an
    append by then (REQUEST_TIMED_OUT, or the connection closed on a reply it never had), and a
    read before any write that Redis, stopped or cut off, leaves unanswered (a Produce v13's topic
    id, looked up afresh) is cancelled at `ANSWER_BY` of it and the connection closed, as when
    Redis is found away (nothing sent, so nothing written later either). Left to time the request
    out itself, librdkafka bumps its idempotent epoch once its records' message.timeout.ms runs out,
    and sends again as new what may be stored (tests/jepsen soak sentinel:461914276)."""
    task = asyncio.current_task()
    assert task is not None
    writing: list[bool] = []  # [True] once Redis may be written to: no cancelling then
    expired: list[bool] = []

    def expire() -> None:
        if not writing:
            expired.append(True)
            task.cancel()

    deadline = task.get_loop().call_later(max(req.timeout_ms, MIN_TIMEOUT_MS) * ANSWER_BY / 1000, expire)
    try:
        return await _produce(ctx, req, writing)
    except asyncio.CancelledError:
        if not expired or task.uncancel():
            raise
        log.info("kafka client %s: Redis did not answer its produce's reads within %d ms; closing",
                 ctx.connection.peer, req.timeout_ms)
        ctx.connection.close = True
        return None
    finally:
        deadline.cancel()


async def _produce(ctx: RequestContext, req: ProduceRequest, writing: list[bool]) -> Encoded | None:
    items: list[tuple[str, int, bytes | memoryview]] = []
    results: dict[tuple[str, int], PartitionResult] = {}
    order: list[tuple[str | uuid.UUID | None, str, list[int]]] = []  # as the response names it, name
    tid = req.transactional_id
    # KafkaApis.handleProduceRequest: transactional records need WRITE on the request's transactional
    # id, which they must name; other records need none, whatever id the request names
    txn_denied = _transactional(req) and (
        tid is None or not await ctx.allowed(ResourceType.TRANSACTIONAL_ID, tid, Operation.WRITE))
    for n, topic in enumerate(req.topic_data):
        if ctx.api_version >= TOPIC_IDS_FROM:
            info = None if topic.topic_id is None else await ctx.services.log.topic_by_id(topic.topic_id.hex,
                                                                                         fresh=True)
            name = f"\0{n}" if info is None else info.name  # an id no topic has: a key no topic name can be
            order.append((topic.topic_id, name, [p.index for p in topic.partition_data]))
            if info is None:
                results.update({(name, p.index): PartitionResult(p.index, KafkaError.unknown_topic_id)
                                for p in topic.partition_data})
                continue
        else:
            name = topic.name
            order.append((name, name, [p.index for p in topic.partition_data]))
        denied = (KafkaError.transactional_id_authorization_failed if txn_denied
                  else None if await ctx.allowed(ResourceType.TOPIC, name, Operation.WRITE)
                  else KafkaError.topic_authorization_failed)
        for p in topic.partition_data:
            if denied is not None:
                results[(name, p.index)] = PartitionResult(p.index, denied)
            elif req.acks not in (0, 1, -1):
                results[(name, p.index)] = PartitionResult(p.index, KafkaError.invalid_required_acks)
            elif p.records is None:
                results[(name, p.index)] = PartitionResult(p.index, KafkaError.corrupt_message)
            else:
                items.append((name, p.index, p.records))
    writing.append(True)  # from here on Redis may be written to
    if ctx.api_version >= TXN_V2_PRODUCE and tid is not None and not txn_denied:
        items = await _add_to_txn(ctx, tid, items, results)
    delayed = {t for t in {t for t, _, _ in items} if await ctx.services.log.delayed_topic(t)}
    if delayed:
        items = await _hold_delayed(ctx, req, items, delayed, results)
    if items:
        try:
            # before v12 a transactional batch opens only a transaction its coordinator is adding the
            # partition to (KIP-890 part 1, on by default in Kafka 4.4: transaction.partition.verification.enable)
            appended = await ctx.services.log.append(items, sent=ctx.sent, acks=req.acks,
                                                      timeout_ms=req.timeout_ms,
                                                      verify_txn=ctx.api_version < TXN_V2_PRODUCE)
        except GatewayError as exc:  # the whole round trip failed (Redis away): every partition says so
            appended = [Produced(t, p, exc) for t, p, _ in items]
        if any(isinstance(d.result, GatewayError) and d.result.storage_failed for d in appended):
            # as from a leader gone mid-request: the connection closes, so the client retries its
            # in-flight produces in order, each maybe stored. An answer would let its next pipelined
            # produce, sent to the new primary, overtake this one (OUT_OF_ORDER_SEQUENCE_NUMBER), and
            # librdkafka then bumps its epoch and sends stored records again as new: duplicates
            # (tests/jepsen's primary-paused). So too when Redis was away before the append (a
            # topic's configs unread): answered KAFKA_STORAGE_ERROR, its next produce, read next, may
            # reach Redis back and be refused out of order, and that epoch bump renumbers what the
            # producer holds for every partition, records another gateway's dropped connection left
            # maybe stored among them (rdkafka_request.c, rd_kafka_handle_idempotent_Produce_error:
            # "skipped sequence numbers"; the soak's cluster:946129829). A refusal (an evicting
            # maxmemory-policy, a full Redis, too few replicas) is answered, as Kafka answers its own
            log.info("kafka client %s: Redis failed under its produce; closing (%s)", ctx.connection.peer,
                     "; ".join(_outcome(d, blob) for (_, _, blob), d in zip(items, appended, strict=True)))
            ctx.connection.close = True
            return None
        refused = [(d.topic, d.partition) for d in appended if isinstance(d.result, Exception)
                   and not isinstance(d.result, ReplicationTimedOut) and kafka_error(d.result) not in BEFORE_THE_LOG]
        starts: dict[tuple[str, int], tuple[int, int] | None] = {}
        if refused:
            try:
                starts = dict(zip(refused, await ctx.services.log.bounds_many(refused), strict=True))
            except GatewayError:
                pass  # Redis away: the start offsets stay unknown (-1)
        if tid is not None and any(isinstance(d.result, InvalidTxnState) for d in appended):
            appended = await _unverified(ctx, tid, items, appended)
        for (_, _, blob), done in zip(items, appended, strict=True):
            r = done.result
            if isinstance(r, ReplicationTimedOut):  # the append's own answer, its error REQUEST_TIMED_OUT
                res = PartitionResult(done.partition, kafka_error(r), r.base_offset, r.log_start,
                                      log_append_time=done.log_append_time)
            elif isinstance(r, Exception):
                bounds = starts.get((done.topic, done.partition))
                code = kafka_error(r)
                if code == KafkaError.invalid_txn_state and ctx.api_version >= ABORTABLE_FROM:
                    code = KafkaError.transaction_abortable  # KIP-890: what a v11 client aborts on
                res = PartitionResult(done.partition, code, message=error_message(r),
                                      log_start=bounds[0] if bounds else -1,
                                      record_errors=tuple(r.record_errors) if isinstance(r, InvalidRecord) else ())
            else:
                res = PartitionResult(done.partition, base_offset=r.base_offset, log_start=r.log_start,
                                      log_append_time=done.log_append_time)
                if not r.duplicate:
                    telemetry.produced("kafka", done.topic, len(blob))
            results[(done.topic, done.partition)] = res
            # an idempotent batch refused or found stored is rare and telling: said at INFO
            telling = res.error or not isinstance(r, Exception) and r.duplicate
            level = logging.INFO if telling and _idempotent(blob) else logging.DEBUG
            if log.isEnabledFor(level):
                log.log(level, "kafka client %s: %s", ctx.connection.peer, _outcome(done, blob, res.error))
    # KafkaApis.handleProduceRequest: the request's size, and its time unless acks=0
    bandwidth = await recorded(ctx, PRODUCE, ctx.size)
    timed = await request_time(ctx) if req.acks and counts_time(ctx) else 0
    throttle_ms = throttle(ctx, (REQUEST, timed), (PRODUCE, bandwidth))
    if req.acks == 0:
        return None
    topics = [(key, [results[(name, i)] for i in parts]) for key, name, parts in order]
    errors = {r.error for r in results.values()} - {KafkaError.none}
    return Encoded(encode_produce_response(ctx.api_version, topics, throttle_ms), errors)


def _idempotent(blob: bytes | memoryview) -> bool:
    """Whether the blob's first batch names a producer id (its header's, unchecked)."""
    return len(blob) >= HEADER_SIZE and HEADER.unpack_from(blob)[9] >= 0


def _outcome(done: Produced, blob: bytes | memoryview, code: KafkaError = KafkaError.none) -> str:
    """One partition's produce and what became of it, with the producer id, epoch and sequences of its
    first batch: what tells, from the gateway's log alone, whether an idempotent batch stored twice
    came back as a retry found stored, or after an answer that said it was not, which librdkafka may
    follow with a new epoch that renumbers what it holds (tests/jepsen's soak, cluster:1039740058)."""
    r = done.result
    got = (f"answered {code.name.upper()}: {r}" if code else f"failed, unanswered: {r}" if isinstance(r, Exception)
           else f"answered as the duplicate of offset {r.base_offset}" if r.duplicate
           else f"stored at offset {r.base_offset}")
    if len(blob) < HEADER_SIZE:
        return f"{done.topic}-{done.partition} {got}"
    *_, pid, epoch, seq, count = HEADER.unpack_from(blob)  # unchecked: it only names the batch
    return f"{done.topic}-{done.partition} pid {pid} epoch {epoch} seq {seq}..{seq + count - 1} {got}"


def _txn_header(blob: bytes | memoryview) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional batch (its 61-byte header), else None."""
    if len(blob) < 61 or blob[16] != 2 or not I16.unpack_from(blob, 21)[0] & ATTR_TRANSACTIONAL:
        return None
    return I64.unpack_from(blob, 43)[0], I16.unpack_from(blob, 51)[0]


async def _unverified(
    ctx: RequestContext, tid: str, items: list[tuple[str, int, bytes | memoryview]], appended: list[Produced],
) -> list[Produced]:
    """The batches the partition refused for opening a transaction its coordinator does not add
    the partition to (V1's verification), each with the coordinator's reason, as Kafka's leader
    answers from its verification: an epoch the producer's has moved past is INVALID_PRODUCER_EPOCH,
    else INVALID_TXN_STATE (Produce v11: TRANSACTION_ABORTABLE)."""
    out = []
    for (_, _, blob), done in zip(items, appended, strict=True):
        header = _txn_header(blob)
        if isinstance(done.result, InvalidTxnState) and header is not None:
            try:
                why: Exception = await ctx.services.txn_producers.late_write_error(tid, *header)
            except GatewayError as exc:
                why = exc
            done = replace(done, result=why)
        out.append(done)
    return out


async def _add_to_txn(
    ctx: RequestContext,
    tid: str,
    items: list[tuple[str, int, bytes | memoryview]],
    results: dict[tuple[str, int], PartitionResult],
) -> list[tuple[str, int, bytes | memoryview]]:
    """Transactions V2 (KIP-890 part 2): Produce v12+ adds its transactional partitions to the
    producer's transaction itself, before they are appended, as Kafka's leader has its coordinator
    add them (ReplicaManager.appendRecords through AddPartitionsToTxnManager). A producer whose epoch
    the transaction's end moved past, or whose transactional.id another took, is refused
    INVALID_PRODUCER_EPOCH, as AddPartitionsToTxnManager turns PRODUCER_FENCED into for Produce; the
    late write of an aborted transaction is fenced so (the hanging-transaction defence). The
    coordinator's other answers pass as ReplicaManager passes them under TV2: CONCURRENT_TRANSACTIONS
    as it is, a coordinator not available as NOT_ENOUGH_REPLICAS (retried without a metadata refresh)."""
    wanted = [(t, p, h) for t, p, blob in items if (h := _txn_header(blob)) is not None]
    if not wanted:
        return items
    pid, epoch = wanted[0][2]
    try:
        await ctx.services.txn_producers.add_partitions(tid, pid, epoch, [(t, p) for t, p, _ in wanted])
        return items
    except GatewayError as exc:
        error = {KafkaError.producer_fenced: KafkaError.invalid_producer_epoch,
                 KafkaError.coordinator_not_available: KafkaError.not_enough_replicas}.get(
            code := txn_error(ctx, exc), code)
    refused = {(t, p) for t, p, _ in wanted}
    for t, p in refused:
        results[(t, p)] = PartitionResult(p, error)
    return [i for i in items if (i[0], i[1]) not in refused]


async def _hold_delayed(
    ctx: RequestContext,
    req: ProduceRequest,
    items: list[tuple[str, int, bytes | memoryview]],
    delayed: set[str],
    results: dict[tuple[str, int], PartitionResult],
) -> list[tuple[str, int, bytes | memoryview]]:
    """On delay-enabled topics, records with a delay header wait in the delayed index; the rest of
    each batch is appended now. A partition whose records were all held answers offset -1: they get
    their offsets when they are delivered."""
    txn_id = await _current_txn(ctx, req.transactional_id)
    now: list[tuple[str, int, bytes | memoryview]] = []
    for topic, partition, blob in items:
        if topic not in delayed:
            now.append((topic, partition, blob))
            continue
        try:
            rest, _ = await ctx.services.delay.accept(topic, partition, blob, txn_id)
        except GatewayError as exc:
            results[(topic, partition)] = PartitionResult(partition, kafka_error(exc), message=error_message(exc))
            continue
        if rest is None:
            results[(topic, partition)] = PartitionResult(partition, base_offset=-1)
        else:
            now.append((topic, partition, rest))
    return now


async def _current_txn(ctx: RequestContext, transactional_id: str | None) -> str | None:
    """The open transaction of a transactional producer, whose delayed records wait for its commit."""
    if transactional_id is None:
        return None
    state = await ctx.services.fence.get("", transactional_id)
    return state.txn if state is not None and state.txn else None


def encode_produce_response(
    version: int, topics: list[tuple[str | uuid.UUID | None, list[PartitionResult]]], throttle_ms: int = 0
) -> list[bytes | memoryview]:
    """ProduceResponse v3-v13 body, equal to kio's encoding of the same values; a topic is its
    name, or from v13 its id."""
    flex = version >= 9
    out = bytearray(array_len(len(topics), flex))
    for key, parts in topics:
        out += topic_key(key, version >= TOPIC_IDS_FROM, flex)
        out += array_len(len(parts), flex)
        for p in parts:
            out += I32.pack(p.index) + I16.pack(p.error) + I64.pack(p.base_offset) + I64.pack(p.log_append_time)
            if version >= 5:
                out += I64.pack(p.log_start)
            if version >= 8:
                out += array_len(len(p.record_errors), flex)
                for index, message in p.record_errors:
                    out += I32.pack(index) + string(message, flex)
                    if flex:
                        out += NO_TAGS
                out += string(p.message, flex)
            if flex:
                out += NO_TAGS
        if flex:
            out += NO_TAGS
    out += I32.pack(throttle_ms)
    if flex:
        out += NO_TAGS
    return [bytes(out)]
