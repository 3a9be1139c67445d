"""Metadata and DescribeCluster: this gateway is the one broker and leads every partition."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import error_message, kafka_error, topic_name_error

CLUSTER_ID = "redis-streams-gateway"
LEADER_EPOCH = 0  # one leader forever: epochs never change
NO_AUTHORIZED_OPERATIONS = -(2**31)


def broker(ctx: RequestContext) -> tuple[int, str, int]:
    """(node id, host, port) that clients should connect to."""
    cfg = ctx.services.config
    host, port = cfg.kafka_advertised
    return cfg.node_id, host, port or ctx.connection.local_port


def partition_entries(node: int, count: int) -> list[dict[str, Any]]:
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
        for p in range(count)
    ]


@handles(ApiKey.METADATA, 0, 13)
async def metadata(ctx: RequestContext, req: Any) -> Any:
    log = ctx.services.log
    node, host, port = broker(ctx)
    wanted = req.topics
    topics: list[dict[str, Any]] = []
    if wanted is None or (ctx.api_version == 0 and not wanted):
        infos = await log.list_topics()
        topics = [_topic(node, info.name, info.partitions) for info in infos]
    else:
        create = ctx.services.config.auto_create_topics and getattr(req, "allow_auto_topic_creation", True)
        for t in wanted:
            if t.name is None:
                # a name is nullable in the response only from v12
                name = None if ctx.api_version >= 12 else ""
                topics.append({"error_code": KafkaError.unknown_topic_id, "name": name, "topic_id": t.topic_id})
                continue
            bad_name = topic_name_error(t.name)
            if bad_name is not None:
                topics.append({"error_code": bad_name, "name": t.name})
                continue
            try:
                info = await log.topic(t.name, create=create)
            except Exception as exc:
                topics.append({"error_code": kafka_error(exc), "name": t.name})
                continue
            topics.append(_topic(node, info.name, info.partitions))
    cls = codec.response_class(ApiKey.METADATA, ctx.api_version)
    return codec.build(
        cls,
        {
            "throttle_time": 0,
            "brokers": [{"node_id": node, "host": host, "port": port, "rack": None}],
            "cluster_id": CLUSTER_ID,
            "controller_id": node,
            "topics": topics,
            "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        },
    )


def _topic(node: int, name: str, partitions: int) -> dict[str, Any]:
    return {
        "error_code": KafkaError.none,
        "name": name,
        "topic_id": None,
        "is_internal": False,
        "partitions": partition_entries(node, partitions),
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def describe_cluster(ctx: RequestContext, req: Any) -> Any:
    node, host, port = broker(ctx)
    cls = codec.response_class(ApiKey.DESCRIBE_CLUSTER, ctx.api_version)
    return codec.build(
        cls,
        {
            "throttle_time": 0,
            "error_code": KafkaError.none,
            "error_message": error_message(None),
            "endpoint_type": getattr(req, "endpoint_type", 1),
            "cluster_id": CLUSTER_ID,
            "controller_id": node,
            "brokers": [{"broker_id": node, "host": host, "port": port, "rack": None, "is_fenced": False}],
            "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        },
    )
