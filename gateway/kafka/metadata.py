"""Metadata and DescribeCluster: every live gateway is a broker (`gateway.domain.registry`), and the
partitions' leadership is spread over them. Any gateway serves any partition: leading is where
clients are told to go, so the load spreads and moves off a gateway that dies."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.registry import Peer, Registry
from gateway.domain.security import CLUSTER_NAME, Operation, ResourceType
from gateway.errors import TopicNotFound
from gateway.kafka import codec
from gateway.kafka.authz import authorized_operations, may_create_topic, may_describe_cluster
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import error_message, kafka_error, topic_name_error

CLUSTER_ID = "redis-streams-gateway"
LEADER_EPOCH = 0  # every gateway serves one log: no leader can be stale (docs/kafka-differences.md)


def broker(ctx: RequestContext) -> tuple[int, str, int]:
    """(node id, host, port) of this gateway, where clients should connect to it."""
    cfg = ctx.services.config
    host, port = cfg.kafka_advertised
    return cfg.node_id, host, port or ctx.connection.local_port


def peer_address(ctx: RequestContext, peer: Peer) -> tuple[int, str, int]:
    """(node id, host, port) of a live gateway, this one included."""
    if peer.node_id == ctx.services.config.node_id:
        return broker(ctx)
    return peer.node_id, peer.host, peer.kafka_port


def brokers(ctx: RequestContext) -> list[tuple[int, str, int]]:
    """Every live gateway that clients can reach, by node id."""
    return [peer_address(ctx, p) for p in ctx.services.registry.live()]


def partition_entries(registry: Registry, topic: str, partitions: int) -> list[dict[str, Any]]:
    """Each partition's replicas and ISR are the gateways that serve it, which is every live one (the
    leader first): the replication factor a topic was created with copies nothing here (Redis keeps
    the data), so they say who answers for the partition, never how many copies exist. A partition a
    reassignment placed lists the replicas it named instead, so `kafka-reassign-partitions --verify`
    finds them; its ISR are the live ones, the others offline (as Kafka lists a dead broker's)."""
    alive = [p.node_id for p in registry.live()]
    entries = []
    for p, leader in enumerate(registry.leaders(topic, partitions)):
        node = leader.node_id
        placed = registry.replicas(topic, p)
        replicas = (node, *(n for n in alive if n != node)) if placed is None else placed
        entries.append({
            "error_code": KafkaError.none,
            "partition_index": p,
            "leader_id": node,
            "leader_epoch": LEADER_EPOCH,
            "replica_nodes": replicas,
            "isr_nodes": replicas if placed is None else tuple(n for n in placed if n in alive),
            "offline_replicas": () if placed is None else tuple(n for n in placed if n not in alive),
        })
    return entries


@handles(ApiKey.METADATA, 0, 13)
async def metadata(ctx: RequestContext, req: Any) -> Any:
    """As Kafka 4.4's KafkaApis.handleTopicMetadataRequest: topics named by id (v12+) are looked up by
    id alone, any names beside them ignored; before v12 an id or a null name fails the whole request.
    Every topic answered but those the principal may not describe, and ids no topic has, says what
    the principal may do on it when asked (an unknown or invalid name too)."""
    cls = codec.response_class(ApiKey.METADATA, ctx.api_version)
    wanted = req.topics
    ids = [t.topic_id for t in wanted or () if getattr(t, "topic_id", None) is not None and t.topic_id.int]
    if wanted is not None and ctx.api_version < 12 and (ids or any(t.name is None for t in wanted)):
        return codec.build(cls, {"throttle_time": 0, "brokers": [], "topics": [
            {"error_code": KafkaError.invalid_request, "name": t.name or "", "topic_id": t.topic_id, "partitions": []}
            for t in wanted]})
    log = ctx.services.log
    live = brokers(ctx)
    if wanted is None or wanted:
        await ctx.services.registry.reload()  # a reassignment just made elsewhere shows at once
    topics: list[dict[str, Any]] = []
    if wanted is None or (ctx.api_version == 0 and not wanted):
        infos = await log.list_topics()  # only those the principal may describe
        topics = [await _topic(ctx, req, info.name, info.partitions, info.topic_id) for info in infos
                  if await ctx.allowed(ResourceType.TOPIC, info.name, Operation.DESCRIBE)]
    elif ids:
        found = [await _topic_by_id(ctx, req, i) for i in dict.fromkeys(ids)]
        topics = sorted(found, key=lambda t: (t["error_code"] != KafkaError.unknown_topic_id,
                                              t["error_code"] == KafkaError.topic_authorization_failed))
    else:
        # as KafkaApis.handleTopicMetadataRequest: the topics answered come first, then those the
        # principal may describe but not create, then those it may not describe
        create = ctx.services.config.auto_create_topics and getattr(req, "allow_auto_topic_creation", True)
        not_created: list[dict[str, Any]] = []
        not_described: list[dict[str, Any]] = []
        for t in wanted:
            if t.name is None:
                topics.append(await _topic_by_id(ctx, req, t.topic_id))
                continue
            if not await ctx.allowed(ResourceType.TOPIC, t.name, Operation.DESCRIBE):
                not_described.append({"error_code": KafkaError.topic_authorization_failed, "name": t.name})
                continue
            bad_name = topic_name_error(t.name)
            entry: dict[str, Any]
            if bad_name is not None:
                entry = {"error_code": bad_name, "name": t.name}
            else:
                may_create = create and await may_create_topic(ctx, t.name)
                try:
                    info = await log.topic(t.name, create=may_create)
                except TopicNotFound:
                    if create and not may_create:
                        not_created.append({"error_code": KafkaError.topic_authorization_failed, "name": t.name})
                        continue
                    entry = {"error_code": KafkaError.unknown_topic_or_partition, "name": t.name}
                except Exception as exc:
                    entry = {"error_code": kafka_error(exc), "name": t.name}
                else:
                    topics.append(await _topic(ctx, req, info.name, info.partitions, info.topic_id))
                    continue
            # described as an existing topic is, its authorized operations included
            entry["topic_authorized_operations"] = await authorized_operations(
                ctx, ResourceType.TOPIC, t.name, getattr(req, "include_topic_authorized_operations", False))
            topics.append(entry)
        topics += not_created + not_described
    return codec.build(
        cls,
        {
            "throttle_time": 0,
            "brokers": [{"node_id": n, "host": h, "port": p, "rack": None} for n, h, p in live],
            "cluster_id": CLUSTER_ID,
            "controller_id": live[0][0],
            "topics": topics,
            "cluster_authorized_operations": await authorized_operations(
                ctx, ResourceType.CLUSTER, CLUSTER_NAME, getattr(req, "include_cluster_authorized_operations", False)
            ),
        },
    )


async def _topic_by_id(ctx: RequestContext, req: Any, topic_id: uuid.UUID | None) -> dict[str, Any]:
    """A topic asked for by id (v12+, KIP-516): UNKNOWN_TOPIC_ID with no name for an id no topic
    has, and no name either for one the principal may not describe (the id itself is not secret);
    never created."""
    info = None if topic_id is None else await ctx.services.log.topic_by_id(topic_id.hex)
    if info is None:
        return {"error_code": KafkaError.unknown_topic_id, "name": None, "topic_id": topic_id}
    if not await ctx.allowed(ResourceType.TOPIC, info.name, Operation.DESCRIBE):
        return {"error_code": KafkaError.topic_authorization_failed, "name": None, "topic_id": topic_id}
    return await _topic(ctx, req, info.name, info.partitions, info.topic_id)


def topic_uuid(topic_id: str) -> uuid.UUID | None:
    """A topic's id (hex) as the wire carries it; None, the zero id, for none."""
    return uuid.UUID(hex=topic_id) if topic_id else None


async def _topic(ctx: RequestContext, req: Any, name: str, partitions: int, topic_id: str) -> dict[str, Any]:
    return {
        "error_code": KafkaError.none,
        "name": name,
        "topic_id": topic_uuid(topic_id),
        "is_internal": False,
        "partitions": partition_entries(ctx.services.registry, name, partitions),
        "topic_authorized_operations": await authorized_operations(
            ctx, ResourceType.TOPIC, name, getattr(req, "include_topic_authorized_operations", False)
        ),
    }


BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2  # DescribeClusterRequest's EndpointType


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def describe_cluster(ctx: RequestContext, req: Any) -> Any:
    """A gateway serves brokers' endpoints only: asked for controllers' it answers
    MISMATCHED_ENDPOINT_TYPE, for an unknown type UNSUPPORTED_ENDPOINT_TYPE, nothing else set (as
    Kafka's AuthHelper.computeDescribeClusterResponse answers on a broker). It needs no ACL."""
    live = brokers(ctx)
    cls = codec.response_class(ApiKey.DESCRIBE_CLUSTER, ctx.api_version)
    wanted = getattr(req, "endpoint_type", BROKER_ENDPOINTS)
    if wanted != BROKER_ENDPOINTS:
        error = (KafkaError.mismatched_endpoint_type if wanted == CONTROLLER_ENDPOINTS
                 else KafkaError.unsupported_endpoint_type)
        return codec.build(cls, {"error_code": error, "error_message": f"endpoint type {wanted} is not served",
                                 "endpoint_type": BROKER_ENDPOINTS, "controller_id": -1, "brokers": []})
    # anyone is answered; the cluster's authorized operations, when asked, are 0 to one who may not
    # describe the cluster (AuthHelper.computeDescribeClusterResponse)
    asked = req.include_cluster_authorized_operations
    operations = (await authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME, asked)
                  if not asked or await may_describe_cluster(ctx) else 0)
    return codec.build(
        cls,
        {
            "throttle_time": 0,
            "error_code": KafkaError.none,
            "error_message": error_message(None),
            "endpoint_type": getattr(req, "endpoint_type", 1),
            "cluster_id": CLUSTER_ID,
            "controller_id": live[0][0],
            "brokers": [{"broker_id": n, "host": h, "port": p, "rack": None, "is_fenced": False} for n, h, p in live],
            "cluster_authorized_operations": operations,
        },
    )
