"""KIP-1071's streams group APIs: StreamsGroupHeartbeat and StreamsGroupDescribe, over the group
coordinator's streams protocol (`gateway.domain.groups.streams`). Thin translations, as Kafka's
KafkaApis.handleStreamsGroupHeartbeat / handleStreamsGroupDescribe: the heartbeat needs READ on the
group and DESCRIBE on every topic the topology names (CREATE on the cluster or on the internal
topics where some must be created); tasks travel as subtopology ids and partitions.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.groups.streams import (
    HeartbeatRequest,
    InternalTopic,
    Subtopology,
    TaskOffsets,
    Tasks,
    TasksTuple,
    Topology,
    configure,
    topology_topics,
)
from gateway.domain.security import Operation, ResourceType
from gateway.kafka.authz import authorized_operations, refused_first
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import error_message
from gateway.kafka.groups import _authorize, _client_host, _coordinator, _ms, _response, group_error


def _topic(t: Any) -> InternalTopic:
    return InternalTopic(t.name, t.partitions, t.replication_factor, tuple((c.key, c.value) for c in t.topic_configs))


def _topology(t: Any) -> Topology | None:
    if t is None:
        return None
    return Topology(t.epoch, tuple(
        Subtopology(
            s.subtopology_id, tuple(s.source_topics), tuple(s.source_topic_regex),
            tuple(_topic(c) for c in s.state_changelog_topics), tuple(s.repartition_sink_topics),
            tuple(_topic(r) for r in s.repartition_source_topics),
            tuple((tuple(g.source_topics), tuple(g.source_topic_regex), tuple(g.repartition_source_topics))
                  for g in s.copartition_groups),
        )
        for s in t.subtopologies
    ))


def _tasks_in(ids: Any) -> Tasks:
    return {t.subtopology_id: frozenset(t.partitions) for t in ids or ()}


def _owned(req: Any) -> TasksTuple | None:
    """The tasks the member owns; None when it did not say (every list null: unchanged)."""
    if req.active_tasks is None and req.standby_tasks is None and req.warmup_tasks is None:
        return None
    return TasksTuple(_tasks_in(req.active_tasks), _tasks_in(req.standby_tasks), _tasks_in(req.warmup_tasks))


def _offsets_in(offsets: Any) -> tuple[tuple[str, int, int], ...] | None:
    return None if offsets is None else tuple((o.subtopology_id, o.partition, o.offset) for o in offsets)


def _offsets_out(offsets: TaskOffsets) -> list[dict[str, Any]]:
    """As Kafka 4.4's `StreamsGroupMember.taskOffsetsFromMap`: by subtopology, then partition."""
    return [{"subtopology_id": s, "partition": p, "offset": n}
            for s in sorted(offsets) for p, n in sorted(offsets[s].items())]


def _tasks_out(tasks: Tasks) -> list[dict[str, Any]]:
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(tasks.items())]


def _failed(exc: BaseException | None, code: KafkaError | None = None, message: str | None = None) -> dict[str, Any]:
    return {"error_code": code if code is not None else group_error(exc),
            "error_message": message if message is not None else error_message(exc),
            "member_id": "", "member_epoch": 0, "heartbeat_interval": 0,  # recovery lag: the version's default
            "task_offset_interval": 0, "status": None, "active_tasks": None, "standby_tasks": None,
            "warmup_tasks": None, "endpoint_information_epoch": 0, "partitions_by_user_endpoint": None}


@handles(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, 1)
async def streams_group_heartbeat(ctx: RequestContext, req: Any) -> Any:
    """v1 (KIP-1331) answers as v0 does, with a 64-bit recovery lag and TopologyDescriptionRequired
    false: as Kafka 4.4 without a topology description plugin, the gateway never asks for one."""
    try:
        await _authorize(ctx, req.group_id, Operation.READ)
        topology = _topology(req.topology)
        for name in sorted(topology_topics(topology)):
            if not await ctx.allowed(ResourceType.TOPIC, name, Operation.DESCRIBE):
                return _response(ctx, _failed(None, KafkaError.topic_authorization_failed,
                                              f"Unauthorized to describe topic {name}."))
        topics = {t.name: t.partitions for t in await ctx.services.log.list_topics()}
        endpoint = req.user_endpoint
        r = await _coordinator(ctx).streams_heartbeat(
            req.group_id,
            HeartbeatRequest(
                member_id=req.member_id,
                member_epoch=req.member_epoch,
                instance_id=req.instance_id,
                rack_id=req.rack_id,
                rebalance_timeout_ms=_ms(req.rebalance_timeout),
                topology=topology,
                owned=_owned(req),
                process_id=req.process_id,
                user_endpoint=None if endpoint is None else (endpoint.host, int(endpoint.port)),
                client_tags=None if req.client_tags is None else tuple((kv.key, kv.value) for kv in req.client_tags),
                shutdown_application=bool(req.shutdown_application),
                client_id=ctx.client_id or "",
                client_host=_client_host(ctx),
                endpoint_information_epoch=req.endpoint_information_epoch,
                task_offsets=_offsets_in(req.task_offsets),
                task_end_offsets=_offsets_in(req.task_end_offsets),
                version=ctx.api_version,
            ),
            topics,
            await ctx.services.share.configs(req.group_id),
        )
    except Exception as exc:
        return _response(ctx, _failed(exc))
    a = r.assignment
    return _response(ctx, {
        "error_code": KafkaError.none,
        "error_message": None,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "heartbeat_interval": r.heartbeat_interval_ms,
        "acceptable_recovery_lag": r.acceptable_recovery_lag,
        "task_offset_interval": r.task_offset_interval_ms,
        "status": [{"status_code": code, "status_detail": detail} for code, detail in r.statuses],
        "active_tasks": None if a is None else _tasks_out(a.active),
        "standby_tasks": None if a is None else _tasks_out(a.standby),
        "warmup_tasks": None if a is None else _tasks_out(a.warmup),
        "endpoint_information_epoch": r.endpoint_information_epoch,
        "partitions_by_user_endpoint": None if r.partitions_by_endpoint is None else [
            {"user_endpoint": {"host": e.endpoint[0], "port": e.endpoint[1]},
             "active_partitions": _partitions_out(e.active), "standby_partitions": _partitions_out(e.standby)}
            for e in r.partitions_by_endpoint],
    })


def _partitions_out(tps: list[tuple[str, list[int]]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partitions": ps} for t, ps in tps]


def _topics_out(topics: tuple[InternalTopic, ...], partitions: int | None = None) -> list[dict[str, Any]]:
    return [{"name": t.name, "partitions": t.partitions if partitions is None else partitions,
             "replication_factor": t.replication_factor,
             "topic_configs": [{"key": k, "value": v} for k, v in sorted(t.configs)]}
            for t in sorted(topics, key=lambda t: t.name)]


def _assignment(t: TasksTuple) -> dict[str, Any]:
    return {"active_tasks": _tasks_out(t.active), "standby_tasks": _tasks_out(t.standby),
            "warmup_tasks": _tasks_out(t.warmup)}


@handles(ApiKey.STREAMS_GROUP_DESCRIBE, 0, 1)
async def streams_group_describe(ctx: RequestContext, req: Any) -> Any:
    """As Kafka's GroupMetadataManager.streamsGroupDescribe: an id that is not a streams group
    answers GROUP_ID_NOT_FOUND in its own slot. The topology's subtopologies are shown configured
    (partition counts decided), or null while the group is not ready. v1 names the assignor and, when
    asked for the topology description, says NOT_STORED (1) of each group described, as Kafka 4.4's
    StreamsGroupTopologyDescriptionManager.attachTopologyDescriptions does without a plugin."""
    not_stored = 1 if getattr(req, "include_topology_description", False) else 0
    coordinator = _coordinator(ctx)
    topics = {t.name: t.partitions for t in await ctx.services.log.list_topics()}
    out: list[dict[str, Any]] = []
    empty: dict[str, Any] = {"group_state": "", "group_epoch": 0, "assignment_epoch": 0, "topology": None,
                             "members": []}
    for group_id in await refused_first(ctx, req.group_ids):
        try:
            await _authorize(ctx, group_id, Operation.DESCRIBE)
            d = await coordinator.describe_streams(group_id, topics)
        except Exception as exc:
            out.append({"group_id": group_id, "error_code": group_error(exc), "error_message": error_message(exc),
                        **empty})
            continue
        if d is None:
            out.append({"group_id": group_id, "error_code": KafkaError.group_id_not_found,
                        "error_message": f"Group {group_id} not found.", **empty})
            continue
        g, state = d
        configured = configure(g.topology, topics)
        subtopologies = None
        if g.topology is not None and configured.status is None:
            subtopologies = [
                {"subtopology_id": s.subtopology_id, "source_topics": sorted(s.source_topics),
                 "repartition_sink_topics": sorted(s.repartition_sinks),
                 "state_changelog_topics": _topics_out(s.changelogs, configured.tasks[s.subtopology_id]),
                 "repartition_source_topics": _topics_out(s.repartition_sources)}
                for s in sorted(g.topology.subtopologies, key=lambda s: s.subtopology_id)
            ]
        out.append({
            "group_id": group_id,
            "error_code": KafkaError.none,
            "error_message": None,
            "group_state": state,
            "group_epoch": g.group_epoch,
            "assignment_epoch": g.assignment_epoch,
            "topology": {"epoch": g.topology.epoch if g.topology else -1, "subtopologies": subtopologies},
            "members": [
                {
                    "member_id": m.member_id, "member_epoch": m.member_epoch, "instance_id": m.instance_id,
                    "rack_id": m.rack_id, "client_id": m.client_id, "client_host": m.client_host,
                    "topology_epoch": m.topology_epoch, "process_id": m.process_id,
                    "user_endpoint": None if m.user_endpoint is None else
                    {"host": m.user_endpoint[0], "port": m.user_endpoint[1]},
                    "client_tags": [{"key": k, "value": v} for k, v in m.client_tags],
                    "task_offsets": _offsets_out(m.task_offsets),
                    "task_end_offsets": _offsets_out(m.task_end_offsets),
                    "assignment": _assignment(m.assigned),
                    "target_assignment": _assignment(g.target.get(m.member_id, TasksTuple())),
                    "is_classic": False,
                }
                for m in g.members.values()
            ],
            "authorized_operations": await authorized_operations(
                ctx, ResourceType.GROUP, group_id, req.include_authorized_operations
            ),
            "topology_description_status": not_stored,
            "assignor_name": "sticky",
        })
    return _response(ctx, {"groups": out})


@handles(ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0, 0)
async def streams_group_topology_description_update(ctx: RequestContext, req: Any) -> Any:
    """KIP-1331's topology descriptions go to a broker's description plugin; Kafka 4.4 with none
    (GroupCoordinatorService.throwIfStreamsGroupTopologyDescriptionUpdateInvalid) refuses every
    update with UNSUPPORTED_VERSION, and so does the gateway, which keeps none."""
    try:
        await _authorize(ctx, req.group_id, Operation.READ)
    except Exception as exc:
        return _response(ctx, {"error_code": group_error(exc), "error_message": error_message(exc)})
    return _response(ctx, {"error_code": KafkaError.unsupported_version,
                           "error_message": "The broker has no streams group topology description plugin configured."})
