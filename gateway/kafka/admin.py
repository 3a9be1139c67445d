"""Topic admin: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords (leadership moves are
`gateway.kafka.leadership`'s)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import Operation, ResourceType
from gateway.errors import (
    AuthorizationFailed,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    TopicExists,
    TopicNotFound,
)
from gateway.kafka import codec
from gateway.kafka.authz import may_create_topic
from gateway.kafka.client_quotas import THROTTLED, MutationQuota
from gateway.kafka.configs import CREATE_ORDER, topic_config_entries
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import error_message, kafka_error, topic_name_error, topic_name_message
from gateway.kafka.metadata import topic_uuid

DEFAULT_REPLICATION_FACTOR = 1  # what -1 stands for; Redis, not the gateways, replicates (configs.REPLICATION_DOC)


class Refused(Exception):
    """A topic Kafka refuses to create, with the error it answers."""

    def __init__(self, error: KafkaError, message: str) -> None:
        super().__init__(message)
        self.error = error


def _replication(ctx: RequestContext, t: Any) -> tuple[int | None, int]:
    """(partitions a manual assignment gives, else None; the replication factor to report). The
    equivalent Kafka cluster has a broker per live gateway (each lists every live gateway as a
    partition's replicas): a factor up to their number is accepted, and any assignment naming live
    gateways, with Kafka's checks of their form and its answer to a factor more brokers than there
    are could not reach (ReplicationControlManager.createTopic, StripedReplicaPlacer)."""
    assignment = KafkaError.invalid_replica_assignment
    live = {p.node_id for p in ctx.services.registry.live()} | {ctx.services.config.node_id}
    if not t.assignments:
        if t.replication_factor == 0 or t.replication_factor < -1:
            raise Refused(KafkaError.invalid_replication_factor,
                          "Replication factor must be larger than 0, or -1 to use the default value.")
        factor = DEFAULT_REPLICATION_FACTOR if t.replication_factor == -1 else t.replication_factor
        if factor > len(live):
            raise Refused(KafkaError.invalid_replication_factor, f"Unable to replicate the partition {factor} "
                          f"time(s): The target replication factor of {factor} cannot be reached because only "
                          f"{len(live)} broker(s) are registered.")
        return None, factor
    if t.num_partitions != -1 or t.replication_factor != -1:
        raise Refused(KafkaError.invalid_request, "A manual partition assignment was specified, but numPartitions "
                      "or replicationFactor was not set to -1.")
    indexes = sorted(a.partition_index for a in t.assignments)
    if indexes != list(range(len(indexes))):
        raise Refused(assignment, "partitions should be a consecutive 0-based integer sequence")
    for a in t.assignments:
        if not a.broker_ids:
            raise Refused(assignment, "The manual partition assignment includes an empty replica list.")
        if len(set(a.broker_ids)) != len(a.broker_ids):
            raise Refused(assignment, f"The manual partition assignment of partition {a.partition_index} "
                          "includes a broker more than once.")
        for b in a.broker_ids:
            if b not in live:
                raise Refused(assignment, f"The manual partition assignment includes broker {b}, but no such "
                              "broker is registered.")
    return len(indexes), len(t.assignments[0].broker_ids)


@handles(ApiKey.CREATE_TOPICS, 2, 7)
async def create_topics(ctx: RequestContext, req: Any) -> Any:
    """As Kafka's ControllerApis.createTopics and ReplicationControlManager: a name given twice is
    answered once, INVALID_REQUEST, and a config with a null value is INVALID_CONFIG."""
    log = ctx.services.log
    results = []
    quota = MutationQuota(ctx, strict_since=6)
    named = Counter(t.name for t in req.topics)
    answered: set[str] = set()
    for t in req.topics:
        configs = {c.name: c.value for c in t.configs}
        res: dict[str, Any] = {"name": t.name, "topic_id": None, "error_code": KafkaError.none,
                               "error_message": None, "num_partitions": -1, "replication_factor": -1}
        if t.name in answered:
            continue
        answered.add(t.name)
        try:
            bad_name = topic_name_error(t.name)
            nulls = [name for name, value in configs.items() if value is None]
            if named[t.name] > 1:
                res.update(error_code=KafkaError.invalid_request, error_message="Duplicate topic name.")
            elif nulls:
                res.update(error_code=KafkaError.invalid_config,
                           error_message=f"Null value not supported for topic configs: {', '.join(nulls)}")
            elif not await may_create_topic(ctx, t.name):
                res.update(error_code=KafkaError.topic_authorization_failed, error_message="not authorized")
            elif bad_name is not None:
                res.update(error_code=bad_name, error_message=topic_name_message(t.name))
            elif t.num_partitions == 0 or t.num_partitions < -1:
                res.update(error_code=KafkaError.invalid_partitions,
                           error_message="Number of partitions was set to an invalid non-positive value.")
            else:
                assigned, factor = _replication(ctx, t)
                partitions = assigned or (log.default_partitions if t.num_partitions == -1 else t.num_partitions)
                if not await quota.take(partitions):  # ReplicationControlManager.createTopic
                    res.update(error_code=KafkaError.throttling_quota_exceeded, error_message=THROTTLED)
                elif req.validate_only:
                    info_config = await log.checked_config(configs)
                    if await _exists(ctx, t.name):
                        res.update(error_code=KafkaError.topic_already_exists, error_message=_exists_message(t.name))
                else:
                    info = await log.create_topic(t.name, partitions, configs)
                    partitions, info_config = info.partitions, info.config
                    res.update(topic_id=topic_uuid(info.topic_id))
                created = res["error_code"] == KafkaError.none
                if created and not await ctx.allowed(ResourceType.TOPIC, t.name, Operation.DESCRIBE_CONFIGS):
                    # ReplicationControlManager.createTopic describes a new topic only to one who may
                    # describe its configs
                    res.update(topic_config_error_code=KafkaError.topic_authorization_failed, configs=[])
                elif created:
                    res.update(num_partitions=partitions, replication_factor=factor,
                               configs=topic_config_entries(info_config, await log.broker_defaults(), CREATE_ORDER))
        except Refused as exc:
            res.update(error_code=exc.error, error_message=str(exc))
        except TopicExists:
            res.update(error_code=KafkaError.topic_already_exists, error_message=_exists_message(t.name))
        except (NotEnoughReplicas, NotEnoughReplicasAfterAppend) as exc:
            # Kafka's controller answers REQUEST_TIMED_OUT when it cannot commit the topic's records to
            # its quorum in time (ControllerApis.createTopics): Redis's replicas are that quorum here
            res.update(error_code=KafkaError.request_timed_out, error_message=error_message(exc))
        except Exception as exc:
            res.update(error_code=kafka_error(exc), error_message=error_message(exc))
        results.append(res)
    return codec.build(codec.response_class(ApiKey.CREATE_TOPICS, ctx.api_version),
                       {"throttle_time": quota.throttle_ms, "topics": results})


def _exists_message(name: str) -> str:
    return f"Topic '{name}' already exists."


async def _exists(ctx: RequestContext, name: str) -> bool:
    try:
        await ctx.services.log.topic(name, create=False)
        return True
    except Exception:
        return False


@handles(ApiKey.DELETE_TOPICS, 1, 6)
async def delete_topics(ctx: RequestContext, req: Any) -> Any:
    """From v6 a topic may be named by id (KIP-516); Kafka 4.2's `handleDeleteTopicsRequest` is
    followed: a name and an id both is INVALID_REQUEST, an id no topic has UNKNOWN_TOPIC_ID, and a
    topic the principal may not describe is not named back. A delete by id deletes that
    incarnation only, never a topic created under its name since."""
    wanted = [(name, None) for name in req.topic_names] if ctx.api_version < 6 else [
        (t.name, t.topic_id) for t in req.topics]
    quota = MutationQuota(ctx, strict_since=5)
    results = [await _delete_topic(ctx, name, topic_id, quota) for name, topic_id in wanted]
    return codec.build(codec.response_class(ApiKey.DELETE_TOPICS, ctx.api_version),
                       {"throttle_time": quota.throttle_ms, "responses": results})


async def _delete_topic(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None,
                        quota: MutationQuota) -> dict[str, Any]:
    log = ctx.services.log
    if name is not None and topic_id is not None:
        return {"name": name, "topic_id": topic_id, "error_code": KafkaError.invalid_request,
                "error_message": "You may not specify both topic name and topic id."}
    by_id = name is None
    if name is None:
        info = None if topic_id is None else await log.topic_by_id(topic_id.hex, fresh=True)
        if info is None:
            return {"name": None, "topic_id": topic_id, "error_code": KafkaError.unknown_topic_id}
        if not await ctx.allowed(ResourceType.TOPIC, info.name, Operation.DESCRIBE):
            return {"name": None, "topic_id": topic_id, "error_code": KafkaError.topic_authorization_failed}
        name = info.name
    try:
        # ControllerApis.deleteTopics: one who may not describe a topic learns nothing of it, one who
        # may learns that it does not exist, before being refused the delete
        if not by_id and not await ctx.allowed(ResourceType.TOPIC, name, Operation.DESCRIBE):
            raise AuthorizationFailed(f"not allowed to describe {name!r}")
        info = await log.topic(name, create=False)
        if topic_id is None:
            topic_id = topic_uuid(info.topic_id)
        if not await ctx.allowed(ResourceType.TOPIC, name, Operation.DELETE):
            raise AuthorizationFailed(f"not allowed to delete {name!r}")
        if not await quota.take(info.partitions):  # ReplicationControlManager.deleteTopic
            return {"name": name, "topic_id": topic_id, "error_code": KafkaError.throttling_quota_exceeded,
                    "error_message": THROTTLED}
        await log.delete_topic(name, topic_id.hex if topic_id is not None else "")
        return {"name": name, "topic_id": topic_id, "error_code": KafkaError.none}
    except Exception as exc:
        if by_id and isinstance(exc, TopicNotFound):  # deleted (maybe made again) since it was looked up
            return {"name": None, "topic_id": topic_id, "error_code": KafkaError.unknown_topic_id}
        # Kafka names no missing topic in its message (the client says what the code means)
        message = None if isinstance(exc, TopicNotFound) else error_message(exc)
        return {"name": name, "topic_id": topic_id, "error_code": kafka_error(exc), "error_message": message}


@handles(ApiKey.CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx: RequestContext, req: Any) -> Any:
    log = ctx.services.log
    results = []
    quota = MutationQuota(ctx, strict_since=3)
    for t in req.topics:
        try:
            if not await ctx.allowed(ResourceType.TOPIC, t.name, Operation.ALTER):
                raise AuthorizationFailed(f"not allowed to alter {t.name!r}")
            info = await log.topic(t.name, create=False)
            if t.count <= info.partitions:
                results.append({"name": t.name, "error_code": KafkaError.invalid_partitions, "error_message": (
                    f"Topic already has {info.partitions} partition(s)." if t.count == info.partitions else
                    f"The topic {t.name} currently has {info.partitions} partition(s); {t.count} would not be an "
                    "increase.")})
                continue
            if not await quota.take(t.count - info.partitions):  # ReplicationControlManager.createPartitions
                results.append({"name": t.name, "error_code": KafkaError.throttling_quota_exceeded,
                                "error_message": THROTTLED})
                continue
            if not req.validate_only:
                await log.add_partitions(t.name, t.count)
            results.append({"name": t.name, "error_code": KafkaError.none, "error_message": None})
        except Exception as exc:
            results.append({"name": t.name, "error_code": kafka_error(exc), "error_message": error_message(exc)})
    return codec.build(codec.response_class(ApiKey.CREATE_PARTITIONS, ctx.api_version),
                       {"throttle_time": quota.throttle_ms, "results": results})


@handles(ApiKey.DELETE_RECORDS, 0, 2)
async def delete_records(ctx: RequestContext, req: Any) -> Any:
    log = ctx.services.log
    topics = []
    for t in req.topics:
        parts = []
        allowed = await ctx.allowed(ResourceType.TOPIC, t.name, Operation.DELETE)
        for p in t.partitions:
            try:
                if not allowed:
                    raise AuthorizationFailed(f"not allowed to delete records of {t.name!r}")
                await log.check_partition(t.name, p.partition_index)
                _, hw = await log.bounds(t.name, p.partition_index)
                if p.offset > hw or p.offset < -1:
                    parts.append({"partition_index": p.partition_index, "low_watermark": -1,
                                  "error_code": KafkaError.offset_out_of_range})
                    continue
                start = await log.delete_records(t.name, p.partition_index, p.offset)
                parts.append({"partition_index": p.partition_index, "low_watermark": start,
                              "error_code": KafkaError.none})
            except Exception as exc:
                parts.append({"partition_index": p.partition_index, "low_watermark": -1,
                              "error_code": kafka_error(exc)})
        topics.append({"name": t.name, "partitions": parts})
    return codec.build(codec.response_class(ApiKey.DELETE_RECORDS, ctx.api_version),
                       {"throttle_time": 0, "topics": topics})
