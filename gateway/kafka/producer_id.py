"""InitProducerId for idempotent producers: a fresh id from Redis, epoch 0, every time.

Also when the request names the producer's id and epoch (KIP-360's bump, which librdkafka and the
Java client send after an unknown-producer or sequence error): Kafka 4.4's
`TransactionCoordinator.handleInitProducerId` "blindly" hands out a new id for a null
transactional id, so the producer's sequences start over under that one.

A transactional.id goes to the transaction keys (gateway.kafka.txn): a new epoch fences the older
producer and aborts its transaction. Ids come
from one Redis counter shared with the native face, so no two producers anywhere share one.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import CLUSTER_NAME, Operation, ResourceType
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import kafka_error
from gateway.kafka.txn import init_transactional


async def _may_write_idempotently(ctx: RequestContext) -> bool:
    """KafkaApis.handleInitProducerIdRequest (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on
    some topic (Authorizer.authorizeByResourceType)."""
    return await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE) or (
        await ctx.services.security.authorize_by_resource_type(
            ctx.connection.principal, ResourceType.TOPIC, Operation.WRITE, ctx.connection.host))


@handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx: RequestContext, req: Any) -> Any:
    cls = codec.response_class(ApiKey.INIT_PRODUCER_ID, ctx.api_version)
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if (pid == -1) != (epoch == -1):
        # an id without an epoch or an epoch without an id: Kafka's KafkaApis.handleInitProducerIdRequest
        # answers INVALID_REQUEST before asking any coordinator
        return codec.build(cls, {"error_code": KafkaError.invalid_request, "producer_id": -1, "producer_epoch": -1})
    if req.transactional_id is not None:
        return await init_transactional(ctx, req)
    if not await _may_write_idempotently(ctx):
        return codec.build(cls, {"error_code": KafkaError.cluster_authorization_failed, "producer_id": -1,
                                 "producer_epoch": -1})
    try:
        new = await ctx.services.log.allocate_producer_id()
    except Exception as exc:
        return codec.build(cls, {"error_code": kafka_error(exc), "producer_id": -1, "producer_epoch": -1})
    return codec.build(cls, {"error_code": KafkaError.none, "producer_id": new, "producer_epoch": 0})
