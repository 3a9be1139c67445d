"""Leadership moves: AlterPartitionReassignments, ListPartitionReassignments and ElectLeaders, on the
gateways' own partition leadership (`gateway.domain.registry`). A reassignment places a partition
on the live gateways it names, the first preferred; nothing is copied (Redis holds the one log), so
it completes at once and none is ever under way. Kafka's controller is the reference for every
answer: ControllerApis (ALTER or DESCRIBE on the cluster first) and ReplicationControlManager's
alterPartitionReassignments, listPartitionReassignments and electLeaders."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.registry import Election
from gateway.errors import TopicNotFound
from gateway.kafka import codec
from gateway.kafka.authz import may_alter_cluster, may_describe_cluster
from gateway.kafka.dispatch import ApiKey, RequestContext, handles

PREFERRED, UNCLEAN = 0, 1  # ElectLeadersRequest's election_type (v1+; v0 is preferred)
ELECTIONS = {Election.ELECTED: KafkaError.none, Election.NOT_NEEDED: KafkaError.election_not_needed,
             Election.NOT_AVAILABLE: KafkaError.preferred_leader_not_available}


class Refused(Exception):
    """A partition's reassignment Kafka refuses, with the error it answers."""

    def __init__(self, error: KafkaError, message: str) -> None:
        super().__init__(message)
        self.error = error


async def _partitions(ctx: RequestContext, topic: str, partition: int) -> int:
    """The topic's partition count, the partition checked as ReplicationControlManager checks it."""
    try:
        info = await ctx.services.log.topic(topic, create=False)
    except TopicNotFound:
        raise Refused(KafkaError.unknown_topic_or_partition, f"Unable to find a topic named {topic}.") from None
    if not 0 <= partition < info.partitions:
        raise Refused(KafkaError.unknown_topic_or_partition,
                      f"Unable to find partition {topic}:{partition}.")
    return info.partitions


def _check_replicas(replicas: tuple[int, ...], live: set[int]) -> None:
    """ReplicationControlManager.validateManualPartitionAssignment: in broker id order, each must be
    a live gateway (a registered broker) and named once."""
    assignment = KafkaError.invalid_replica_assignment
    if not replicas:
        raise Refused(assignment, "The manual partition assignment includes an empty replica list.")
    previous = None
    for b in sorted(replicas):
        if b not in live:
            raise Refused(assignment, f"The manual partition assignment includes broker {b}, but no such "
                          "broker is registered.")
        if b == previous:
            raise Refused(assignment, f"The manual partition assignment includes the broker {b} more than once.")
        previous = b


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1)
async def alter_partition_reassignments(ctx: RequestContext, req: Any) -> Any:
    """Place each partition on the replicas named; cancelling (null replicas) answers
    NO_REASSIGNMENT_IN_PROGRESS, since a reassignment here is done as soon as it is made. Without
    ALTER on the cluster every partition fails CLUSTER_AUTHORIZATION_FAILED, and so does the whole."""
    cls = codec.response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, ctx.api_version)
    registry = ctx.services.registry
    allowed = await may_alter_cluster(ctx)
    live = {p.node_id for p in registry.live()}
    keep_factor = not getattr(req, "allow_replication_factor_change", True)
    targets: dict[tuple[str, int], tuple[int, ...]] = {}
    responses = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, message = KafkaError.cluster_authorization_failed, None
            if allowed:
                code, message = KafkaError.none, None
                try:
                    await _partitions(ctx, t.name, p.partition_index)
                    if p.replicas is None:
                        raise Refused(KafkaError.no_reassignment_in_progress, "No partition reassignment is in progress.")
                    replicas = tuple(p.replicas)
                    _check_replicas(replicas, live)
                    now = registry.replicas(t.name, p.partition_index) or live
                    if keep_factor and len(replicas) != len(now):
                        raise Refused(KafkaError.invalid_replication_factor,
                                      f"The replication factor is changed from {len(now)} to {len(replicas)}")
                    targets[t.name, p.partition_index] = replicas
                except Refused as exc:
                    code, message = exc.error, str(exc)
            parts.append({"partition_index": p.partition_index, "error_code": code, "error_message": message})
        responses.append({"name": t.name, "partitions": parts})
    if targets:
        await registry.reassign(targets)
    error = KafkaError.none if allowed else KafkaError.cluster_authorization_failed
    return codec.build(cls, {"throttle_time": 0, "allow_replication_factor_change": not keep_factor,
                             "error_code": error, "error_message": None, "responses": responses})


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, req: Any) -> Any:
    """No reassignment is ever under way (each completes as it is made), which Kafka's controller
    answers as here: ReplicationControlManager.listPartitionReassignments lists only partitions that
    are reassigning, skipping unknown topics, after ControllerApis's check of DESCRIBE on the cluster,
    whose failure the Java client shows with the error's own wording."""
    cls = codec.response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS, ctx.api_version)
    error = KafkaError.none if await may_describe_cluster(ctx) else KafkaError.cluster_authorization_failed
    return codec.build(cls, {"throttle_time": 0, "error_code": error, "error_message": None, "topics": []})


@handles(ApiKey.ELECT_LEADERS, 0, 2)
async def elect_leaders(ctx: RequestContext, req: Any) -> Any:
    """A preferred election moves a placed partition's leadership to its first replica when that
    gateway is alive (PREFERRED_LEADER_NOT_AVAILABLE otherwise); one already led by it, and every
    unplaced one, answer ELECTION_NOT_NEEDED. An unclean election is never needed: every partition
    has a live leader, any gateway serving it. As ReplicationControlManager.electLeaders: an unknown
    topic or partition with its own message, and a request for every partition (null) answered with
    every topic, holding only the elections made; KafkaApis first requires ALTER on the cluster."""
    cls = codec.response_class(ApiKey.ELECT_LEADERS, ctx.api_version)
    allowed = await may_alter_cluster(ctx)
    registry = ctx.services.registry
    preferred = getattr(req, "election_type", PREFERRED) == PREFERRED
    named = req.topic_partitions
    wanted = ([(t.topic, p) for t in named for p in t.partitions] if named is not None
              else registry.placed() if preferred else [])
    answers: dict[tuple[str, int], tuple[KafkaError, str | None]] = dict.fromkeys(wanted, (KafkaError.none, None))
    elect = []
    for topic, p in wanted:
        if not allowed:
            answers[topic, p] = KafkaError.cluster_authorization_failed, None
            continue
        try:
            count = (await ctx.services.log.topic(topic, create=False)).partitions
        except TopicNotFound:
            answers[topic, p] = KafkaError.unknown_topic_or_partition, f"No such topic as {topic}"
            continue
        if not 0 <= p < count:
            answers[topic, p] = KafkaError.unknown_topic_or_partition, f"No such partition as {topic}-{p}"
        elif preferred:
            elect.append((topic, p))
        else:
            answers[topic, p] = KafkaError.election_not_needed, None
    for key, outcome in (await registry.elect_preferred(elect)).items():
        answers[key] = ELECTIONS[outcome], None
    results: dict[str, list[dict[str, Any]]] = {}
    if named is None:  # every partition: every topic, with only the elections made
        answers = {k: v for k, v in answers.items() if v[0] == KafkaError.none}
        results = {info.name: [] for info in await ctx.services.log.list_topics()} if allowed else {}
    for (topic, p), (code, message) in answers.items():
        results.setdefault(topic, []).append({"partition_id": p, "error_code": code, "error_message": message})
    error = KafkaError.none if allowed else KafkaError.cluster_authorization_failed
    return codec.build(cls, {"throttle_time": 0, "error_code": error, "replica_election_results": [
        {"topic": topic, "partition_result": parts} for topic, parts in results.items()]})
