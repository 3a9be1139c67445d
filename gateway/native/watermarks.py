"""Watermarks: a producer's SendWatermark (in order with its sends) and GetWatermark."""

from __future__ import annotations

import logging

from gateway.domain.security import Operation, ResourceType
from gateway.errors import GatewayError
from gateway.native.dispatch import Session, handles, handles_in_order
from gateway.native.transactions import expired_errors
from gateway.pb import gateway_pb2 as pb

log = logging.getLogger(__name__)


@handles_in_order("send_watermark")
async def send_watermark(s: Session, reqs: list[pb.Request]) -> list[pb.Response | Exception]:
    """Each in turn: a watermark goes into the log after every send before it, so it never
    overtakes a message its producer sent earlier."""
    answers: list[pb.Response | Exception] = []
    for req in reqs:
        try:
            answers.append(await _send_watermark(s, req.send_watermark))
        except Exception as exc:
            if not isinstance(exc, GatewayError):
                log.exception("native watermark failed")
            answers.append(exc)
    return answers


async def _send_watermark(s: Session, r: pb.SendWatermark) -> pb.Response:
    """W_SET, or W_IDLE, of the producer into every partition of its topic."""
    p = s.producer(r.handle)
    event_time = None if r.idle else r.event_time_ms
    watermarks = s.services.watermark
    if not r.txn_id:
        offsets = await watermarks.send(p.topic, p.name, event_time)
    else:
        txn = await s.txns.get(r.txn_id)
        info = await s.services.log.topic(p.topic, create=False)
        await s.txns.add_partitions(r.txn_id, [(info.name, part) for part in range(info.partitions)])
        with expired_errors(r.txn_id):
            offsets = await watermarks.send(p.topic, p.name, event_time, txn_id=txn.txn_id,
                                            producer_id=txn.producer_id, producer_epoch=txn.producer_epoch)
    return pb.Response(watermark_receipt=pb.WatermarkReceipt(offsets=offsets))


@handles("get_watermark")
async def get_watermark(s: Session, req: pb.Request) -> pb.Response:
    r = req.get_watermark
    await s.authorize(ResourceType.TOPIC, r.topic, Operation.DESCRIBE)
    value = pb.WatermarkValue()
    if r.positions:
        wm = await s.services.watermark.watermark(r.topic, {p.partition: p.offset for p in r.positions})
        if wm is not None:
            value.watermark_ms = wm
    return pb.Response(watermark=value)
