"""KIP-714's client telemetry on the Kafka face: GetTelemetrySubscriptions (71), PushTelemetry (72)
and ListConfigResources (74, once ListClientMetricsResources, which KIP-1142 widened to every config
resource type), as Kafka 4.4's KafkaApis hands them to its ClientMetricsManager (`gateway.domain.client_metrics` holds the semantics); the
CLIENT_METRICS config resources themselves are `gateway.kafka.configs`'."""

from __future__ import annotations

import ast
import uuid
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.clock import now_ms
from gateway.domain.client_metrics import ACCEPTED_COMPRESSION, TELEMETRY_MAX_BYTES, ClientIdentity
from gateway.domain.security import CLUSTER_NAME, Operation, ResourceType
from gateway.kafka import codec
from gateway.kafka.api_versions import CLIENT_SOFTWARE
from gateway.kafka.dispatch import ApiKey, RequestContext, handles

RESOURCE_CLIENT_METRICS = 16
RESERVED = frozenset({uuid.UUID(int=0), uuid.UUID(int=1)})
"""Uuid.RESERVED: the zero id and the metadata topic's, which no client instance gets."""

_PUSH_ERRORS = {
    "terminated": KafkaError.invalid_request,
    "throttled": KafkaError.throttling_quota_exceeded,
    "unknown_subscription": KafkaError.unknown_subscription_id,
    "unsupported_compression": KafkaError.unsupported_compression_type,
    "too_large": KafkaError.telemetry_too_large,
    "invalid_record": KafkaError.invalid_record,
}
"""ClientMetricsManager.processPushTelemetryRequest's answers for what a push was refused for."""


def _identity(ctx: RequestContext) -> ClientIdentity:
    name, version = ctx.connection.extra.get(CLIENT_SOFTWARE, ("", ""))
    host = ctx.connection.host or ""
    try:  # the peer as asyncio gives it: (host, port) or IPv6's (host, port, flow, scope)
        port = int(ast.literal_eval(ctx.connection.peer)[1])
    except (ValueError, SyntaxError, TypeError, IndexError):
        port = 0
    return ClientIdentity(ctx.client_id or "", name, version, host, port)


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0)
async def get_telemetry_subscriptions(ctx: RequestContext, req: Any) -> Any:
    """A client sending the zero id is given one; one asking again before its push interval is
    THROTTLING_QUOTA_EXCEEDED (ClientMetricsManager.processGetTelemetrySubscriptionRequest)."""
    cls = codec.response_class(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0)
    instance = req.client_instance_id
    if instance is None or instance == uuid.UUID(int=0):
        instance = uuid.uuid4()
    sub, throttled = await ctx.services.client_metrics.get(instance, _identity(ctx), now_ms())
    if throttled:
        return codec.build(cls, {"throttle_time": 0, "error_code": KafkaError.throttling_quota_exceeded})
    return codec.build(cls, {
        "throttle_time": 0, "error_code": KafkaError.none, "client_instance_id": instance,
        "subscription_id": sub.subscription_id, "accepted_compression_types": [int(c) for c in ACCEPTED_COMPRESSION],
        "push_interval": sub.interval_ms, "telemetry_max_bytes": TELEMETRY_MAX_BYTES, "delta_temporality": True,
        "requested_metrics": sub.metrics,
    })


@handles(ApiKey.PUSH_TELEMETRY, 0, 0)
async def push_telemetry(ctx: RequestContext, req: Any) -> Any:
    """Checked as ClientMetricsManager.validatePushRequest does, then the metrics are exported."""
    cls = codec.response_class(ApiKey.PUSH_TELEMETRY, 0)
    instance = req.client_instance_id
    if instance is None or instance in RESERVED:
        return codec.build(cls, {"throttle_time": 0, "error_code": KafkaError.invalid_request})
    verdict = await ctx.services.client_metrics.push(
        instance, _identity(ctx), now_ms(), req.subscription_id, req.terminating, req.compression_type,
        bytes(req.metrics or b""))
    return codec.build(cls, {"throttle_time": 0, "error_code": _PUSH_ERRORS.get(verdict, KafkaError.none)})


RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_GROUP = 2, 4, 8, 32


@handles(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
async def list_config_resources(ctx: RequestContext, req: Any) -> Any:
    """v0 lists the client-metrics subscriptions alone; v1 the resources of the types asked for (none:
    every type), as Kafka 4.4 answers: groups with configs set, client-metrics subscriptions, each
    live gateway as a broker and a broker logger, topics, in that order (by type, highest first),
    each type's names sorted; an unknown type is UNSUPPORTED_VERSION. It takes DESCRIBE_CONFIGS on the
    cluster (CLUSTER_AUTHORIZATION_FAILED), as Kafka's KafkaApis asks (and franz-go's kfake mirrors)."""
    cls = codec.response_class(ApiKey.LIST_CONFIG_RESOURCES, ctx.api_version)
    if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE_CONFIGS):
        return codec.build(cls, {"throttle_time": 0, "error_code": KafkaError.cluster_authorization_failed,
                                 "config_resources": []})
    known = (RESOURCE_GROUP, RESOURCE_CLIENT_METRICS, RESOURCE_BROKER_LOGGER, RESOURCE_BROKER, RESOURCE_TOPIC)
    asked = set(getattr(req, "resource_types", ()) or ()) if ctx.api_version >= 1 else {RESOURCE_CLIENT_METRICS}
    if asked - set(known):
        return codec.build(cls, {"throttle_time": 0, "error_code": KafkaError.unsupported_version,
                                 "config_resources": []})
    out = []
    for kind in known:
        if asked and kind not in asked:
            continue
        out += [{"resource_name": n, "resource_type": kind} for n in sorted(await _names(ctx, kind))]
    return codec.build(cls, {"throttle_time": 0, "error_code": KafkaError.none, "config_resources": out})


async def _names(ctx: RequestContext, kind: int) -> list[str]:
    services = ctx.services
    if kind == RESOURCE_CLIENT_METRICS:
        return list((await services.client_metrics.subscriptions())[1])
    if kind == RESOURCE_TOPIC:
        return [t.name for t in await services.log.list_topics()]
    if kind in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        return [str(p.node_id) for p in services.registry.live()]
    return [g.group_id for g in await services.share.list_groups()  # the groups that hold configs
            if await services.share.configs(g.group_id, fresh=True)]
