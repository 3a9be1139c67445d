"""KIP-848's consumer group APIs: ConsumerGroupHeartbeat and ConsumerGroupDescribe, over the group
coordinator's consumer protocol (`gateway.domain.groups.consumer`). Thin translations, as in Kafka's
KafkaApis.handleConsumerGroupHeartbeat / handleConsumerGroupDescribe: topics travel by topic id on
the wire and by name inside; a topic without an id (one older than topic ids) cannot be assigned.
OffsetCommit, OffsetFetch, FindCoordinator and the listings stay in `groups.py`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.groups.consumer import Assignment, HeartbeatRequest
from gateway.domain.security import Operation, ResourceType
from gateway.kafka.authz import authorized_operations, refused_first
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import error_message
from gateway.kafka.groups import _authorize, _client_host, _coordinator, _ms, _response, group_error

CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1  # ConsumerGroupDescribe v1's member_type


class TopicIds:
    """Every topic that has an id: name <-> id and partition counts, read once per request."""

    def __init__(self, topics: Iterable[Any]) -> None:
        self.ids: dict[str, uuid.UUID] = {}
        self.names: dict[uuid.UUID, str] = {}
        self.partitions: dict[str, int] = {}
        for t in topics:
            if not t.topic_id:
                continue
            tid = uuid.UUID(hex=t.topic_id)
            self.ids[t.name], self.names[tid] = tid, t.name
            self.partitions[t.name] = t.partitions

    @classmethod
    async def read(cls, ctx: RequestContext) -> TopicIds:
        return cls(await ctx.services.log.list_topics())

    def by_name(self, owned: Any) -> Assignment | None:
        """A request's topic-id partitions by topic name; ids of topics gone are left out."""
        if owned is None:
            return None
        return {self.names[t.topic_id]: frozenset(t.partitions) for t in owned if t.topic_id in self.names}

    def by_id(self, assignment: Assignment, *, named: bool = False) -> list[dict[str, Any]]:
        return [
            {"topic_id": self.ids[t], "partitions": sorted(ps), **({"topic_name": t} if named else {})}
            for t, ps in sorted(assignment.items())
            if t in self.ids
        ]


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def consumer_group_heartbeat(ctx: RequestContext, req: Any) -> Any:
    try:
        await _authorize(ctx, req.group_id, Operation.READ)
        for name in req.subscribed_topic_names or ():
            if not await ctx.allowed(ResourceType.TOPIC, name, Operation.DESCRIBE):
                return _response(ctx, {"error_code": KafkaError.topic_authorization_failed,
                                       "error_message": f"not allowed to describe topic {name!r}",
                                       "member_id": None, "member_epoch": 0, "heartbeat_interval": 0})
        topics = await TopicIds.read(ctx)
        r = await _coordinator(ctx).consumer_heartbeat(
            req.group_id,
            HeartbeatRequest(
                member_id=req.member_id,
                member_epoch=req.member_epoch,
                instance_id=req.instance_id,
                rack_id=req.rack_id,
                rebalance_timeout_ms=_ms(req.rebalance_timeout),
                subscribed_topics=None if req.subscribed_topic_names is None else list(req.subscribed_topic_names),
                subscribed_regex=getattr(req, "subscribed_topic_regex", None),  # v1+
                server_assignor=req.server_assignor,
                owned=topics.by_name(req.topic_partitions),
                client_id=ctx.client_id or "",
                client_host=_client_host(ctx),
            ),
            topics.partitions,
            api_version=ctx.api_version,
        )
    except Exception as exc:
        return _response(ctx, {"error_code": group_error(exc), "error_message": error_message(exc),
                               "member_id": None, "member_epoch": 0, "heartbeat_interval": 0})
    return _response(ctx, {
        "error_code": KafkaError.none,
        "error_message": None,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "heartbeat_interval": r.heartbeat_interval_ms,
        "assignment": None if r.assignment is None else {"topic_partitions": topics.by_id(r.assignment)},
    })


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def consumer_group_describe(ctx: RequestContext, req: Any) -> Any:
    """As Kafka's GroupMetadataManager.consumerGroupDescribe: an id that is not a consumer group
    (unknown, or a classic group) answers GROUP_ID_NOT_FOUND in its own slot, which is what makes
    librdkafka's and the Java admin client's describe fall back to DescribeGroups for it."""
    topics = await TopicIds.read(ctx)
    out: list[dict[str, Any]] = []
    empty = {"group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": []}
    for group_id in await refused_first(ctx, req.group_ids):
        try:
            await _authorize(ctx, group_id, Operation.DESCRIBE)
            d = await _coordinator(ctx).describe_consumer(group_id)
        except Exception as exc:
            out.append({"group_id": group_id, "error_code": group_error(exc), "error_message": error_message(exc),
                        **empty})
            continue
        if d is None:
            out.append({"group_id": group_id, "error_code": KafkaError.group_id_not_found,
                        "error_message": f"Group {group_id} not found.", **empty})
            continue
        out.append({
            "group_id": group_id,
            "error_code": KafkaError.none,
            "error_message": None,
            "group_state": d.state,
            "group_epoch": d.group_epoch,
            "assignment_epoch": d.assignment_epoch,
            "assignor_name": d.assignor,
            "members": [
                {
                    "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                    # Kafka keeps a member without a regex as "" (ConsumerGroupMemberMetadataValue's default)
                    "subscribed_topic_names": list(m.subscribed_topics),
                    "subscribed_topic_regex": m.subscribed_regex or "",
                    "assignment": {"topic_partitions": topics.by_id(m.assignment, named=True)},
                    "target_assignment": {"topic_partitions": topics.by_id(m.target_assignment, named=True)},
                    "member_type": CLASSIC_MEMBER_TYPE if m.classic else CONSUMER_MEMBER_TYPE,
                }
                for m in d.members
            ],
            "authorized_operations": await authorized_operations(
                ctx, ResourceType.GROUP, group_id, req.include_authorized_operations
            ),
        })
    return _response(ctx, {"groups": out})
