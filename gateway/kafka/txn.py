"""Kafka's transaction APIs over the coordinator: thin translations, errors mapped as clients act on them.

EndTxn returns once every marker is written and what the transaction held settled; the outcome is
recorded just after, and the producer's next request about its transaction waits for that here, so
its next transaction never meets CONCURRENT_TRANSACTIONS from this one.
"""

from __future__ import annotations

import asyncio
import struct
from datetime import UTC, datetime, timedelta
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.clock import now_ms
from gateway.domain.log import PartitionProducer
from gateway.domain.producer_txn import (
    CommittedOffset,
    InvalidProducerIdMapping,
    ProducerState,
    UnknownMember,
)
from gateway.domain.security import CLUSTER_NAME, Operation, ResourceType
from gateway.domain.txn import InvalidTransactionTimeout
from gateway.errors import AuthorizationFailed, ErrorCode, GatewayError
from gateway.kafka import codec, wire
from gateway.kafka.dispatch import ApiKey, Encoded, RequestContext, handles
from gateway.kafka.errors import REPLICAS_SHORT, kafka_error

# KIP-890 part 2: the request versions from which a producer speaks transactions V2
TXN_V2_END_TXN = 5
TXN_V2_TXN_OFFSET_COMMIT = 5

# KIP-588: from these versions on, a fenced producer is told PRODUCER_FENCED, before that INVALID_PRODUCER_EPOCH
_FENCED_SINCE: dict[int, int] = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
    ApiKey.TXN_OFFSET_COMMIT: 3,
}


def txn_error(ctx: RequestContext, exc: BaseException) -> KafkaError:
    """Replicas short, or Redis away (a primary failing over), is COORDINATOR_NOT_AVAILABLE, as Kafka's
    transaction coordinator answers when it cannot write its log (appendTransactionToLog): clients
    find the coordinator again and retry, where KAFKA_STORAGE_ERROR would end an EndTxn."""
    if isinstance(exc, InvalidProducerIdMapping):
        return KafkaError.invalid_producer_id_mapping
    if isinstance(exc, InvalidTransactionTimeout):
        return KafkaError.invalid_transaction_timeout
    if isinstance(exc, UnknownMember):
        return KafkaError[exc.kind]
    if isinstance(exc, AuthorizationFailed):
        return KafkaError.transactional_id_authorization_failed
    if isinstance(exc, GatewayError) and exc.code == ErrorCode.PRODUCER_FENCED:
        if ctx.api_version < _FENCED_SINCE.get(ctx.api_key, 0):
            return KafkaError.invalid_producer_epoch
        return KafkaError.producer_fenced
    if isinstance(exc, GatewayError) and (exc.code in REPLICAS_SHORT or exc.code == ErrorCode.STORAGE_UNAVAILABLE):
        return KafkaError.coordinator_not_available
    return kafka_error(exc)


async def _may_write(ctx: RequestContext, transactional_id: str) -> bool:
    return await ctx.allowed(ResourceType.TRANSACTIONAL_ID, transactional_id, Operation.WRITE)


async def init_transactional(ctx: RequestContext, req: Any) -> Any:
    """InitProducerId with a transactional.id (called by the InitProducerId handler). One that reached
    this gateway before the transactional.id's epoch was last handed out is refused
    CONCURRENT_TRANSACTIONS, which the producer retries: it is a request its producer gave up on and
    sent again elsewhere, answered first, and held up on its way to Redis it would fence that
    producer (Kafka's one coordinator runs a resend after the request it replaces; listed in
    docs/kafka-differences.md)."""
    arrived = now_ms()
    cls = codec.response_class(ApiKey.INIT_PRODUCER_ID, ctx.api_version)
    if not await _may_write(ctx, req.transactional_id):
        return codec.build(cls, {"error_code": KafkaError.transactional_id_authorization_failed,
                                 "producer_id": -1, "producer_epoch": -1})
    timeout_ms = int(req.transaction_timeout.total_seconds() * 1000)
    if timeout_ms <= 0:
        # Kafka's TransactionCoordinator.validateTransactionTimeoutMs refuses <= 0 (the native face's
        # "none given" is not a Kafka client's to ask)
        return codec.build(cls, {"error_code": KafkaError.invalid_transaction_timeout,
                                 "producer_id": -1, "producer_epoch": -1})
    try:
        pid, epoch = await ctx.services.txn_producers.init(
            req.transactional_id, timeout_ms, getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1),
            arrived_ms=arrived)
    except Exception as exc:
        return codec.build(cls, {"error_code": txn_error(ctx, exc), "producer_id": -1, "producer_epoch": -1})
    return codec.build(cls, {"error_code": KafkaError.none, "producer_id": pid, "producer_epoch": epoch})


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def add_partitions_to_txn(ctx: RequestContext, req: Any) -> Any:
    if ctx.api_version <= 3:
        results = await _add_one(ctx, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                 req.v3_and_below_producer_epoch, False, req.v3_and_below_topics)
        errors = {code for _, parts in results for _, code in parts if code != KafkaError.none}
        return Encoded([encode_add_partitions_response(ctx.api_version, results)], errors, throttle_at=0)
    cls = codec.response_class(ApiKey.ADD_PARTITIONS_TO_TXN, ctx.api_version)
    by_txn = []
    for t in req.transactions:
        results = await _add_one(ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.verify_only, t.topics)
        by_txn.append({"transactional_id": t.transactional_id, "topic_results": _as_dicts(results)})
    return codec.build(cls, {"error_code": KafkaError.none, "results_by_transaction": by_txn})


TopicResults = list[tuple[str, list[tuple[int, KafkaError]]]]
"""Per topic of a request, in its order: (name, (partition, error code) in the request's order)."""


def encode_add_partitions_response(version: int, results: TopicResults) -> bytes:
    """The body of an AddPartitionsToTxn response v0-3 (the transactional producer's, once per
    transaction): hand-written, as kio's generic writer took about as long as the rest of the
    request here; checked byte for byte against kio's in the tests."""
    flexible = version >= 3
    tags = wire.NO_TAGS if flexible else b""
    out = [wire.I32.pack(0), wire.array_len(len(results), flexible)]  # throttle_time_ms first: throttle_at 0
    for name, parts in results:
        out += (wire.string(name, flexible), wire.array_len(len(parts), flexible))
        out += (_PARTITION_RESULT.pack(p, code) + tags for p, code in parts)
        out.append(tags)
    out.append(tags)
    return b"".join(out)


_PARTITION_RESULT = struct.Struct(">ih")


def _as_dicts(results: TopicResults) -> list[dict[str, Any]]:
    return [{"name": name, "results_by_partition": [{"partition_index": p, "partition_error_code": code}
                                                    for p, code in parts]}
            for name, parts in results]


async def _add_one(
    ctx: RequestContext, tid: str, pid: int, epoch: int, verify_only: bool, topics: Any
) -> TopicResults:
    arrived = now_ms()  # one that came before the producer's last transaction was decided was meant for it
    wanted: list[tuple[str, int]] = [(t.name, p) for t in topics for p in t.partitions]
    errors: dict[tuple[str, int], KafkaError] = {}
    txn_allowed = await _may_write(ctx, tid)
    to_check: list[tuple[str, int]] = []
    for topic, partition in wanted:
        if not txn_allowed:
            errors[(topic, partition)] = KafkaError.transactional_id_authorization_failed
        elif not await ctx.allowed(ResourceType.TOPIC, topic, Operation.WRITE):
            errors[(topic, partition)] = KafkaError.topic_authorization_failed
        else:
            to_check.append((topic, partition))
    # each topic's description once (as last seen, if it has the partitions wanted), all side by side
    highest: dict[str, int] = {}
    for t, p in to_check:
        highest[t] = max(p, highest.get(t, 0))
    names = sorted(highest)
    infos = dict(zip(names, await _described(ctx, [(t, highest[t]) for t in names]), strict=True))
    for topic, partition in to_check:
        info = infos[topic]
        if isinstance(info, Exception):
            errors[(topic, partition)] = kafka_error(info)
        elif isinstance(info, BaseException):
            raise info
        elif not 0 <= partition < info.partitions:
            errors[(topic, partition)] = KafkaError.unknown_topic_or_partition
    good = [p for p in wanted if p not in errors]
    tp = ctx.services.txn_producers
    try:
        if verify_only:
            inside = await tp.verify_partitions(tid, pid, epoch, good)
            errors.update({p: KafkaError.invalid_txn_state for p, ok in inside.items() if not ok})
        elif errors:
            # Kafka adds nothing when any partition is bad; the good ones are told why
            errors.update({p: KafkaError.operation_not_attempted for p in good})
        else:
            # a client's AddPartitionsToTxn is transactions V1's: its Produce is verified (KIP-890 part 1)
            await tp.add_partitions(tid, pid, epoch, good, verified=True, arrived_ms=arrived)
    except Exception as exc:
        code = txn_error(ctx, exc)
        errors.update({p: code for p in good})
    return [(t.name, [(p, errors.get((t.name, p), KafkaError.none)) for p in t.partitions]) for t in topics]


async def _described(ctx: RequestContext, wanted: list[tuple[str, int]]) -> list[Any]:
    """Each (topic, highest partition wanted)'s `known_topic`, or the exception it raised, in order:
    several side by side, a transaction's usual one awaited as it is (a gather would make it a task,
    a cost on every transaction's AddPartitionsToTxn)."""
    if len(wanted) != 1:
        return await asyncio.gather(*(ctx.services.log.known_topic(t, partition=p) for t, p in wanted),
                                    return_exceptions=True)
    (topic, partition), = wanted
    try:
        return [await ctx.services.log.known_topic(topic, partition=partition)]
    except Exception as exc:
        return [exc]


@handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx: RequestContext, req: Any) -> Any:
    """One that reached this gateway before the producer's last transaction was decided, with none
    open now, was meant for that one: refused CONCURRENT_TRANSACTIONS (`TxnStore.join`)."""
    arrived = now_ms()
    cls = codec.response_class(ApiKey.ADD_OFFSETS_TO_TXN, ctx.api_version)
    if not await _may_write(ctx, req.transactional_id):
        return codec.build(cls, {"error_code": KafkaError.transactional_id_authorization_failed})
    if not await ctx.allowed(ResourceType.GROUP, req.group_id, Operation.READ):
        return codec.build(cls, {"error_code": KafkaError.group_authorization_failed})
    try:
        await ctx.services.txn_producers.add_offsets(req.transactional_id, req.producer_id, req.producer_epoch,
                                                  req.group_id, arrived_ms=arrived)
    except Exception as exc:
        return codec.build(cls, {"error_code": txn_error(ctx, exc)})
    return codec.build(cls, {"error_code": KafkaError.none})


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def txn_offset_commit(ctx: RequestContext, req: Any) -> Any:
    """From v5 (transactions V2, KIP-890 part 2) the producer sends no AddOffsetsToTxn: the group
    is added to its transaction here, before the offsets are staged, as Kafka's coordinator adds it
    (TransactionCoordinator through the group coordinator's verification)."""
    cls = codec.response_class(ApiKey.TXN_OFFSET_COMMIT, ctx.api_version)
    now = now_ms()
    offsets = {
        (t.name, p.partition_index): CommittedOffset(
            p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata or "", now
        )
        for t in req.topics
        for p in t.partitions
    }
    code = KafkaError.none
    denied: set[str] = set()
    if not await _may_write(ctx, req.transactional_id):
        code = KafkaError.transactional_id_authorization_failed
    elif not await ctx.allowed(ResourceType.GROUP, req.group_id, Operation.READ):
        code = KafkaError.group_authorization_failed
    else:
        denied = {t for t, _ in offsets if not await ctx.allowed(ResourceType.TOPIC, t, Operation.READ)}
        offsets = {k: v for k, v in offsets.items() if k[0] not in denied}
    if code == KafkaError.none and offsets:
        try:
            if ctx.api_version >= TXN_V2_TXN_OFFSET_COMMIT:
                await ctx.services.txn_producers.add_offsets(req.transactional_id, req.producer_id,
                                                             req.producer_epoch, req.group_id, arrived_ms=now)
            await ctx.services.txn_producers.commit_offsets(
                req.transactional_id, req.producer_id, req.producer_epoch, req.group_id, offsets,
                generation=getattr(req, "generation_id", -1), member_id=getattr(req, "member_id", "") or "",
                instance_id=getattr(req, "group_instance_id", None),
                # V1's: one older than the transaction it finds meant one before (V2's is fenced by
                # the epoch each end moves on, and may have opened this one just now)
                arrived_ms=now if ctx.api_version < TXN_V2_TXN_OFFSET_COMMIT else None,
            )
        except Exception as exc:
            code = txn_error(ctx, exc)
    return codec.build(cls, {"topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": KafkaError.topic_authorization_failed if t.name in denied else code}
            for p in t.partitions
        ]}
        for t in req.topics
    ]})


@handles(ApiKey.END_TXN, 0, 5)
async def end_txn(ctx: RequestContext, req: Any) -> Any:
    """From v5 the producer speaks transactions V2 (KIP-890; TransactionVersion.transactionVersionForEndTxn):
    its epoch moves on at every end, and the answer carries the producer id and epoch it goes on
    with (-1 on an error, the schema's defaults). Before v5 (V1) an EndTxn names no transaction: one
    that reached this gateway before the producer's current transaction opened was meant for an
    earlier one, held up on its way to Redis, and is refused CONCURRENT_TRANSACTIONS, which the
    producer retries (Kafka's V1 coordinator ends the current one: KIP-890's reason for V2; listed in
    docs/kafka-differences.md)."""
    arrived = now_ms()
    code, pid, epoch = KafkaError.none, -1, -1
    if not await _may_write(ctx, req.transactional_id):
        code = KafkaError.transactional_id_authorization_failed
    else:
        try:
            _, (pid, epoch) = await ctx.services.txn_producers.end(
                req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed),
                bump=ctx.api_version >= TXN_V2_END_TXN, arrived_ms=arrived)
        except Exception as exc:
            code, pid, epoch = txn_error(ctx, exc), -1, -1
    return Encoded([encode_end_txn_response(ctx.api_version, code, pid, epoch)],
                   () if code == KafkaError.none else (code,), throttle_at=0)


def encode_end_txn_response(version: int, code: KafkaError, producer_id: int, producer_epoch: int) -> bytes:
    """The body of an EndTxn response (once per transaction): hand-written, as kio's generic build
    and writer cost more than the rest of the answer; checked byte for byte against kio's in the
    tests. throttle_time_ms first, error_code; v3+ flexible; v5+ the producer id and epoch."""
    body = _END_TXN.pack(0, code)
    if version >= TXN_V2_END_TXN:
        body += _PRODUCER.pack(producer_id, producer_epoch)
    return body + wire.NO_TAGS if version >= 3 else body


_END_TXN = struct.Struct(">ih")
_PRODUCER = struct.Struct(">qh")


def _describe(state: ProducerState) -> dict[str, Any]:
    txn = state.txn
    ongoing = txn is not None and txn.state not in ("COMMITTED", "ABORTED")
    topics: dict[str, list[int]] = {}
    if ongoing and txn is not None:
        for t, p in txn.partitions:
            topics.setdefault(t, []).append(p)
    return {
        "error_code": KafkaError.none,
        "transactional_id": state.transactional_id,
        "transaction_state": state.kafka_state,
        "transaction_timeout": timedelta(milliseconds=state.timeout_ms),
        "transaction_start_time": datetime.fromtimestamp(txn.start_ms / 1000, UTC) if ongoing and txn
        else datetime.fromtimestamp(0, UTC),
        "producer_id": state.producer_id,
        "producer_epoch": state.producer_epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in sorted(topics.items())],
    }


@handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx: RequestContext, req: Any) -> Any:
    cls = codec.response_class(ApiKey.DESCRIBE_TRANSACTIONS, ctx.api_version)
    states = []
    for tid in req.transactional_ids:
        if not await ctx.allowed(ResourceType.TRANSACTIONAL_ID, tid, Operation.DESCRIBE):
            # KafkaApis.handleDescribeTransactionsRequest: the error and the schema's defaults
            states.append({"error_code": KafkaError.transactional_id_authorization_failed, "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout": timedelta(0),
                           "transaction_start_time": datetime.fromtimestamp(0, UTC),
                           "producer_id": 0, "producer_epoch": 0, "topics": []})
            continue
        try:
            states.append(_describe(await ctx.services.txn_producers.describe(tid)))
        except Exception as exc:
            states.append({"error_code": txn_error(ctx, exc), "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout": timedelta(0),
                           "transaction_start_time": datetime.fromtimestamp(0, UTC),
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
    return codec.build(cls, {"transaction_states": states})


@handles(ApiKey.LIST_TRANSACTIONS, 0, 1)
async def list_transactions(ctx: RequestContext, req: Any) -> Any:
    cls = codec.response_class(ApiKey.LIST_TRANSACTIONS, ctx.api_version)
    known = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"}
    wanted = set(req.state_filters)
    pids = set(req.producer_id_filters)
    min_age = int(getattr(req, "duration_filter", -1))
    out = []
    now = now_ms()
    for state in await ctx.services.txn_producers.list():
        if wanted and state.kafka_state not in wanted:
            continue
        if pids and state.producer_id not in pids:
            continue
        if min_age >= 0 and (state.txn is None or now - state.txn.start_ms < min_age):
            continue
        if not await ctx.allowed(ResourceType.TRANSACTIONAL_ID, state.transactional_id, Operation.DESCRIBE):
            continue
        out.append({"transactional_id": state.transactional_id, "producer_id": state.producer_id,
                    "transaction_state": state.kafka_state})
    return codec.build(cls, {"error_code": KafkaError.none,
                             "unknown_state_filters": sorted(wanted - known), "transaction_states": out})


@handles(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx: RequestContext, req: Any) -> Any:
    """The producers each partition keeps sequences for (kafka-transactions describe-producers, and
    find-hanging and abort, which look for open transactions through it)."""
    cls = codec.response_class(ApiKey.DESCRIBE_PRODUCERS, ctx.api_version)
    topics = []
    for t in req.topics:
        allowed = await ctx.allowed(ResourceType.TOPIC, t.name, Operation.READ)
        partitions = []
        for p in t.partition_indexes:
            try:
                if not allowed:
                    raise AuthorizationFailed(f"not allowed to read topic {t.name!r}")
                states = await ctx.services.log.producer_states(t.name, p)
                partitions.append({"partition_index": p, "error_code": KafkaError.none, "error_message": None,
                                   "active_producers": [_producer(s) for s in states]})
            except Exception as exc:
                code = KafkaError.topic_authorization_failed if isinstance(exc, AuthorizationFailed) else kafka_error(exc)
                partitions.append({"partition_index": p, "error_code": code, "error_message": None,
                                   "active_producers": []})
        topics.append({"name": t.name, "partitions": partitions})
    return codec.build(cls, {"throttle_time": 0, "topics": topics})


def _producer(state: PartitionProducer) -> dict[str, Any]:
    # the coordinator epoch of the last marker: the gateway's coordinator has no epochs (-1, none)
    return {"producer_id": state.producer_id, "producer_epoch": state.producer_epoch,
            "last_sequence": state.last_sequence, "last_timestamp": state.last_timestamp, "coordinator_epoch": -1,
            "current_txn_start_offset": state.txn_start_offset}


@handles(ApiKey.WRITE_TXN_MARKERS, 1, 1)
async def write_txn_markers(ctx: RequestContext, req: Any) -> Any:
    """Markers written on an operator's word (the Admin client's abortTransaction, which
    `kafka-transactions abort` sends for a hanging transaction); Kafka's brokers send it to each other."""
    cls = codec.response_class(ApiKey.WRITE_TXN_MARKERS, ctx.api_version)
    allowed = await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.CLUSTER_ACTION)
    results = []
    for m in req.markers:
        topics = []
        for t in m.topics:
            partitions = []
            for p in t.partition_indexes:
                try:
                    if not allowed:
                        raise AuthorizationFailed("not allowed to write transaction markers")
                    await ctx.services.txn.write_markers([(t.name, p)], m.producer_id, m.producer_epoch,
                                                         m.transaction_result)
                    code = KafkaError.none
                except AuthorizationFailed:
                    code = KafkaError.cluster_authorization_failed
                except Exception as exc:
                    code = kafka_error(exc)
                partitions.append({"partition_index": p, "error_code": code})
            topics.append({"name": t.name, "partitions": partitions})
        results.append({"producer_id": m.producer_id, "topics": topics})
    return codec.build(cls, {"markers": results})
