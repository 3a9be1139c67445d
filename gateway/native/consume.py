"""Consumers of subscriptions: Subscribe, Flow, Ack, Nack, Seek, CloseConsumer and Unsubscribe,
and the frames the subscription service pushes to them (deliveries, resets, watermarks)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway import telemetry
from gateway.domain.security import Operation, ResourceType
from gateway.domain.subscriptions import Delivery, Mode
from gateway.errors import InvalidRequest
from gateway.formats.frames import OutgoingEntry, frame, messages_frame
from gateway.native import letters
from gateway.native.dispatch import Chunks, Session, handles
from gateway.pb import gateway_pb2 as pb

_MODES = {pb.EXCLUSIVE: Mode.EXCLUSIVE, pb.FAILOVER: Mode.FAILOVER, pb.SHARED: Mode.SHARED,
          pb.KEY_SHARED: Mode.KEY_SHARED}


class ConsumerFrames:
    """The connection as a `ConsumerSink`: what the service hands a consumer, written as frames."""

    def __init__(self, write: Callable[[Chunks], Awaitable[None]], topic: str) -> None:
        self.write = write
        self.topic = topic

    async def deliver(self, consumer_id: int, deliveries: list[Delivery]) -> None:
        # parts of one batch for one consumer (a Key_Shared batch split by key) go out as one
        merged: dict[tuple[int, int, int], tuple[Delivery, set[int]]] = {}
        for d in deliveries:
            k = (d.partition, d.entry.base_offset, d.redelivery_count)
            if k in merged:
                merged[k][1].update(d.offsets)
            else:
                merged[k] = (d, set(d.offsets))
        entries = [
            OutgoingEntry(d.partition, d.entry.base_offset, d.entry.batch, d.skip(offsets), d.redelivery_count)
            for d, offsets in merged.values()
        ]
        telemetry.fetched("native", self.topic, sum(len(d.entry.batch) for d, _ in merged.values()))
        await self.write(messages_frame(consumer_id, entries))

    async def reset(self, consumer_id: int) -> None:
        await self.write([frame(pb.Response(consumer_reset=pb.ConsumerReset(consumer_id=consumer_id)))])

    async def watermark(self, consumer_id: int, watermark: int | None) -> None:
        update = pb.WatermarkUpdate(consumer_id=consumer_id)
        if watermark is not None:
            update.watermark_ms = watermark
        await self.write([frame(pb.Response(watermark_update=update))])


@handles("subscribe")
async def subscribe(s: Session, req: pb.Request) -> pb.Response:
    r = req.subscribe
    await s.authorize(ResourceType.TOPIC, r.topic, Operation.READ)
    await s.authorize(ResourceType.GROUP, r.subscription, Operation.READ)
    policy = await letters.authorize(s, r)
    consumer = await s.subscriptions.subscribe(
        r.topic,
        r.subscription,
        ConsumerFrames(s.write, r.topic),
        mode=_MODES.get(r.mode, Mode.EXCLUSIVE),
        initial_position="earliest" if r.initial_position == pb.EARLIEST else "latest",
        consumer_name=r.consumer_name,
        ack_timeout=r.ack_timeout_ms / 1000,
        sticky_ranges=tuple((h.start, h.end) for h in r.sticky_ranges),
    )
    s.consumers[consumer.id] = consumer
    letters.attach(s, consumer, policy)
    sub = consumer.subscription
    assert sub is not None
    subscribed = pb.Subscribed(consumer_id=consumer.id, partitions=sub.partitions)
    if sub.watermark_sent is not None:  # read last, with no wait before the answer goes out
        subscribed.watermark_ms = sub.watermark_sent
    return pb.Response(subscribed=subscribed)


@handles("flow")
async def flow(s: Session, req: pb.Request) -> pb.Response:
    s.subscriptions.flow(s.consumer(req.flow.consumer_id), req.flow.permits)
    return pb.Response(success=pb.Success())


@handles("ack")
async def ack(s: Session, req: pb.Request) -> pb.Response:
    r = req.ack
    individual: dict[int, list[int]] = {}
    for po in r.individual:
        individual.setdefault(po.partition, []).extend(po.offsets)
    cumulative = {po.partition: max(po.offsets) for po in r.cumulative if po.offsets}
    consumer = s.consumer(r.consumer_id)
    if r.txn_id:
        sub = consumer.subscription
        assert sub is not None
        members = [(sub.topic, p, sub.name) for p in sorted(set(individual) | set(cumulative))]
        await s.txns.add_subscriptions(r.txn_id, members)
    await s.subscriptions.acknowledge(consumer, individual, cumulative, r.txn_id or None)
    return pb.Response(success=pb.Success())


@handles("nack")
async def nack(s: Session, req: pb.Request) -> pb.Response:
    offsets: dict[int, list[int]] = {}
    for po in req.nack.offsets:
        offsets.setdefault(po.partition, []).extend(po.offsets)
    s.subscriptions.negative_acknowledge(s.consumer(req.nack.consumer_id), offsets)
    return pb.Response(success=pb.Success())


@handles("seek")
async def seek(s: Session, req: pb.Request) -> pb.Response:
    r = req.seek
    consumer = s.consumer(r.consumer_id)
    target = r.WhichOneof("target")
    if target == "timestamp_ms":
        await s.subscriptions.seek_time(consumer, r.timestamp_ms)
    elif target in ("offset", "earliest", "latest"):
        offset = r.offset if target == "offset" else (-1 if target == "earliest" else -2)
        partition = None if r.all_partitions or target != "offset" else r.partition
        await s.subscriptions.seek_offset(consumer, offset, partition)
    else:
        raise InvalidRequest("seek needs an offset, a timestamp, earliest or latest")
    return pb.Response(success=pb.Success())


@handles("close_consumer")
async def close_consumer(s: Session, req: pb.Request) -> pb.Response:
    consumer = s.consumers.pop(req.close_consumer.consumer_id, None)
    if consumer is not None:
        await s.subscriptions.unsubscribe_consumer(consumer)
    return pb.Response(success=pb.Success())


@handles("unsubscribe")
async def unsubscribe(s: Session, req: pb.Request) -> pb.Response:
    consumer = s.consumer(req.unsubscribe.consumer_id)
    await s.subscriptions.delete_subscription(consumer)
    s.consumers.pop(consumer.id, None)
    return pb.Response(success=pb.Success())
