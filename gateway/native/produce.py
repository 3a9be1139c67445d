"""Producers: CreateProducer, CloseProducer and Send.

Sends come in runs, in arrival order: the batches that go to the log now take one append round
trip, after each transaction has taken in its partitions; delayed messages go to the delay index.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gateway import telemetry
from gateway.domain.log import Produced
from gateway.domain.security import Operation, ResourceType
from gateway.errors import GatewayError, InvalidRequest
from gateway.formats.records import parse_header
from gateway.native.dispatch import Session, handles, handles_in_order
from gateway.native.transactions import as_expired
from gateway.pb import gateway_pb2 as pb


@dataclass
class Producer:
    """A producer of this connection, by its handle."""

    topic: str
    producer_id: int
    partitions: int
    name: str  # its identity in the topic's watermark set
    acks: int = 1  # Kafka's: -1 (all) waits for the topic's min.insync.replicas - 1 Redis replicas
    replica_timeout_ms: int = 30_000  # how long, at most


@handles("create_producer")
async def create_producer(s: Session, req: pb.Request) -> pb.Response:
    r = req.create_producer
    await s.authorize(ResourceType.TOPIC, r.topic, Operation.WRITE)
    pid, info = await s.producer_ids.register(r.topic, r.resume_producer_id)
    handle = s.new_handle()
    name = r.producer_name or f"producer-{pid}"
    s.producers[handle] = Producer(info.name, pid, info.partitions, name, -1 if r.acks == pb.ALL else 1,
                                   r.replica_timeout_ms or 30_000)
    limit = int((await s.services.log.topic_config(info.name))["max.message.bytes"])
    created = pb.ProducerCreated(handle=handle, producer_id=pid, partitions=info.partitions, producer_name=name,
                                 max_message_bytes=limit)
    return pb.Response(producer_created=created)


@handles("close_producer")
async def close_producer(s: Session, req: pb.Request) -> pb.Response:
    s.producers.pop(req.close_producer.handle, None)
    return pb.Response(success=pb.Success())


@handles_in_order("send")
async def send(s: Session, reqs: list[pb.Request]) -> list[pb.Response | Exception]:
    """Answers to `reqs`, in order."""
    answers: dict[int, pb.Response | Exception] = {}
    checked: dict[int, tuple[str, int, bytes | memoryview]] = {}
    by_txn: dict[str, list[int]] = {}
    for i, req in enumerate(reqs):
        try:
            checked[i] = await _checked(s, req.send)
        except GatewayError as exc:
            answers[i] = exc
            continue
        if req.send.txn_id:
            by_txn.setdefault(req.send.txn_id, []).append(i)
    for txn_id, idx in by_txn.items():
        try:
            await s.txns.add_partitions(txn_id, sorted({checked[i][:2] for i in idx}))
        except GatewayError as exc:
            for i in idx:
                answers[i] = exc
                del checked[i]
    now = [i for i in checked if not _delayed(reqs[i].send)]
    for i in checked:
        if _delayed(reqs[i].send):
            answers[i] = await _send_delayed(s, reqs[i].send, checked[i])
    # a producer's acks is fixed: its sends stay in one run, in order (the shortest timeout of a run)
    modes = {i: s.producer(reqs[i].send.handle) for i in now}
    runs = {a: run for a in (1, -1) if (run := [i for i in now if modes[i].acks == a])}
    appended = await asyncio.gather(*(
        _append(s, [checked[i] for i in run], a, min(modes[i].replica_timeout_ms for i in run))
        for a, run in runs.items()))
    for run, results in zip(runs.values(), appended, strict=True):
        for i, res in zip(run, (p.result for p in results), strict=True):
            if isinstance(res, Exception):
                txn_id = reqs[i].send.txn_id
                answers[i] = as_expired(txn_id, res) if txn_id and isinstance(res, GatewayError) else res
            else:
                if not res.duplicate:
                    telemetry.produced("native", checked[i][0], len(checked[i][2]))
                receipt = pb.SendReceipt(base_offset=res.base_offset, duplicate=res.duplicate)
                answers[i] = pb.Response(send_receipt=receipt)
    return [answers[i] for i in range(len(reqs))]


async def _append(
    s: Session, items: list[tuple[str, int, bytes | memoryview]], acks: int, timeout_ms: int
) -> list[Produced]:
    """Each item's fate. Sends that wait for replicas go on the ordered connections, where Redis's
    WAIT counts them (`LogStore.append`)."""
    try:
        sent = (lambda: None) if acks == -1 else None
        return await s.services.log.append(items, sent=sent, acks=acks, timeout_ms=timeout_ms)
    except Exception as exc:
        return [Produced(topic, partition, exc) for topic, partition, _ in items]


async def _send_delayed(s: Session, send: pb.Send, item: tuple[str, int, bytes | memoryview]) -> pb.Response | Exception:
    """A held message has no offset yet: its receipt says -1 and `delayed`, as the Kafka face answers -1."""
    topic, partition, batch = item
    try:
        res = await s.services.delay.send(
            topic, partition, bytes(batch),
            deliver_at_ms=send.deliver_at_ms if send.deliver_at_ms > 0 else None,
            deliver_after_ms=send.deliver_after_ms if send.deliver_at_ms <= 0 else None,
            txn_id=send.txn_id or None,
        )
    except Exception as exc:
        return exc
    held = res.held > 0 or bool(send.txn_id)
    return pb.Response(send_receipt=pb.SendReceipt(base_offset=-1, delayed=held))


async def _checked(s: Session, send: pb.Send) -> tuple[str, int, bytes | memoryview]:
    """Where the batch goes, once it is known to be one this producer (or its transaction) may send."""
    p = s.producer(send.handle)
    if send.partition >= p.partitions:
        raise InvalidRequest(f"{p.topic} has no partition {send.partition}")
    h = parse_header(send.batch, verify_crc=False)
    if h.control:
        raise InvalidRequest("a control batch cannot be sent")
    if _delayed(send):
        if h.record_count != 1 or h.producer_id != -1 or h.transactional:
            raise InvalidRequest("a delayed message is one record in a batch without producer id")
    elif send.txn_id:
        txn = await s.txns.get(send.txn_id)
        if h.producer_id != txn.producer_id or not h.transactional:
            raise InvalidRequest("a transactional batch carries its transaction's producer id and flag")
    elif h.producer_id != p.producer_id or h.transactional:
        raise InvalidRequest("the batch must carry this producer's id and not be transactional")
    return p.topic, send.partition, send.batch


def _delayed(send: pb.Send) -> bool:
    return send.deliver_at_ms > 0 or send.deliver_after_ms > 0
