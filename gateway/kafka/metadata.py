"""Metadata and DescribeCluster: every live gateway is a broker (`gateway.domain.registry`), and the
partitions' leadership is spread over them. Any gateway serves any partition: leading is where
clients are told to go, so the load spreads and moves off a gateway that dies."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.registry import Peer
from gateway.domain.security import CLUSTER_NAME, Operation, ResourceType
from gateway.kafka import codec
from gateway.kafka.authz import authorized_operations, may_create_topic, may_describe_cluster
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import error_message, kafka_error, topic_name_error

CLUSTER_ID = "redis-streams-gateway"
LEADER_EPOCH = 0  # one leader forever: epochs never change


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


def partition_entries(leaders: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "error_code": KafkaError.none,
            "partition_index": p,
            "leader_id": node,
            "leader_epoch": LEADER_EPOCH,
            "replica_nodes": (node,),
            "isr_nodes": (node,),
            "offline_replicas": (),
        }
        for p, node in enumerate(leaders)
    ]


@handles(ApiKey.METADATA, 0, 13)
async def metadata(ctx: RequestContext, req: Any) -> Any:
    log = ctx.services.log
    live = brokers(ctx)
    wanted = req.topics
    topics: list[dict[str, Any]] = []
    if wanted is None or (ctx.api_version == 0 and not wanted):
        infos = await log.list_topics()  # only those the principal may describe
        topics = [await _topic(ctx, req, info) for info in infos
                  if await ctx.allowed(ResourceType.TOPIC, info.name, Operation.DESCRIBE)]
    else:
        create = ctx.services.config.auto_create_topics and getattr(req, "allow_auto_topic_creation", True)
        for t in wanted:
            if t.name is None and t.topic_id is not None:  # v12+: a topic by its id (the consumer protocol's)
                found = next((i for i in await log.list_topics() if i.topic_id == t.topic_id.hex), None)
                if found is not None and await ctx.allowed(ResourceType.TOPIC, found.name, Operation.DESCRIBE):
                    topics.append(await _topic(ctx, req, found))
                    continue
            if t.name is None:
                # a name is nullable in the response only from v12
                name = None if ctx.api_version >= 12 else ""
                topics.append({"error_code": KafkaError.unknown_topic_id, "name": name, "topic_id": t.topic_id})
                continue
            bad_name = topic_name_error(t.name)
            if bad_name is not None:
                topics.append({"error_code": bad_name, "name": t.name})
                continue
            if not await ctx.allowed(ResourceType.TOPIC, t.name, Operation.DESCRIBE):
                topics.append({"error_code": KafkaError.topic_authorization_failed, "name": t.name})
                continue
            try:
                info = await log.topic(t.name, create=create and await may_create_topic(ctx, t.name, auto=True))
            except Exception as exc:
                topics.append({"error_code": kafka_error(exc), "name": t.name})
                continue
            topics.append(await _topic(ctx, req, info))
    cls = codec.response_class(ApiKey.METADATA, ctx.api_version)
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


async def _topic(ctx: RequestContext, req: Any, info: Any) -> dict[str, Any]:
    """One topic's entry; `info` is the log's TopicInfo (its topic id hex, "" for a topic older than ids)."""
    name, partitions = info.name, info.partitions
    return {
        "error_code": KafkaError.none,
        "name": name,
        "topic_id": uuid.UUID(hex=info.topic_id) if info.topic_id else None,
        "is_internal": False,
        "partitions": partition_entries([p.node_id for p in ctx.services.registry.leaders(name, partitions)]),
        "topic_authorized_operations": await authorized_operations(
            ctx, ResourceType.TOPIC, name, getattr(req, "include_topic_authorized_operations", False)
        ),
    }


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def describe_cluster(ctx: RequestContext, req: Any) -> Any:
    live = brokers(ctx)
    cls = codec.response_class(ApiKey.DESCRIBE_CLUSTER, ctx.api_version)
    if not await may_describe_cluster(ctx):
        return codec.build(cls, {"error_code": KafkaError.cluster_authorization_failed, "cluster_id": CLUSTER_ID,
                                 "controller_id": -1, "brokers": [], "error_message": "not authorized"})
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
            "cluster_authorized_operations": await authorized_operations(
                ctx, ResourceType.CLUSTER, CLUSTER_NAME, req.include_cluster_authorized_operations
            ),
        },
    )
