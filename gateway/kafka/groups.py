"""Kafka's consumer-group APIs over the group coordinator: thin translations, one per API.

FindCoordinator names the gateway holding a group's lease (this one when nobody holds it; see
`gateway.domain.groups.coordinator`), and this gateway for transactions.
OffsetCommit v10 and OffsetFetch v10 name topics by id (KIP-516's follow-up to KIP-848), each id
looked up afresh so an offset never lands on a topic made again under the name; an id no topic
has is UNKNOWN_TOPIC_ID, as Kafka 4.2's KafkaApis answers. Errors of the group protocol
(`GroupError.kind`) carry Kafka's own codes.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.groups import GroupCoordinator, GroupError, GroupErrorKind
from gateway.domain.security import Operation, ResourceType
from gateway.errors import AuthorizationFailed, ErrorCode, GatewayError, TopicNotFound
from gateway.kafka import codec
from gateway.kafka.authz import authorized_operations, may_describe_cluster, refused_first
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import REPLICAS_SHORT, error_message, kafka_error
from gateway.kafka.metadata import broker, peer_address, topic_uuid

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def group_error(exc: BaseException | None) -> KafkaError:
    """The Kafka code for a group operation's failure (the group protocol's kinds are Kafka's codes)."""
    if isinstance(exc, GroupError):
        return KafkaError(int(exc.kind))
    if isinstance(exc, AuthorizationFailed):
        return KafkaError.group_authorization_failed
    if isinstance(exc, GatewayError) and (exc.code == ErrorCode.STORAGE_UNAVAILABLE or exc.code in REPLICAS_SHORT):
        return KafkaError.coordinator_not_available  # clients look for the coordinator again and retry
    return kafka_error(exc)


async def _authorize(ctx: RequestContext, group_id: str, operation: Operation) -> None:
    if not await ctx.allowed(ResourceType.GROUP, group_id, operation):
        raise AuthorizationFailed(f"not allowed to {operation} group {group_id!r}")


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coord = ctx.services.groups
    _, host, port = broker(ctx)
    coord.advertise(host, port)
    return coord


def _ms(value: Any) -> int:
    """A kio timedelta field in whole milliseconds (-1 stays -1)."""
    return int(round(value.total_seconds() * 1000))


def _client_host(ctx: RequestContext) -> str:
    """Kafka shows a member's host as "/address"; our connection knows its peer as a tuple's repr."""
    peer = ctx.connection.peer.strip("()[]")
    host = peer.split(",")[0].strip().strip("'\"")
    return f"/{host}"


def _response(ctx: RequestContext, values: dict[str, Any]) -> Any:
    cls = codec.response_class(ctx.api_key, ctx.api_version)
    assert cls is not None  # registration checked that kio has every advertised version
    return codec.build(cls, values)


# -- FindCoordinator ----------------------------------------------------------------------------


@handles(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx: RequestContext, req: Any) -> Any:
    key_type = getattr(req, "key_type", KEY_TYPE_GROUP)
    keys = list(req.coordinator_keys) if ctx.api_version >= 4 else [req.key]
    found = [await _locate(ctx, key_type, key) for key in keys]
    if ctx.api_version >= 4:
        return _response(ctx, {"coordinators": [{"key": key, **entry} for key, entry in zip(keys, found, strict=True)]})
    return _response(ctx, found[0])


async def _locate(ctx: RequestContext, key_type: int, key: str) -> dict[str, Any]:
    """A group's coordinator is the gateway holding its lease, else the one the registry spreads the
    group to (which takes the lease on the first request). A transactional id's is the one the
    registry spreads it to: every gateway can coordinate a transaction, whose state is in Redis.

    A lease that cannot be read (Redis away) is answered with the gateway the registry spreads the
    group to, never COORDINATOR_NOT_AVAILABLE, as Kafka 4.4 answers FindCoordinator from its metadata
    cache whatever its coordinator's state (KafkaApis.getCoordinator: that error only while the
    offsets partition has no leader); the group's requests there are what is refused retriably.
    librdkafka retries a FindCoordinator twice, then waits for a broker connection to change state
    before asking again, past every timeout (librdkafka issue 5456), and no connection to a gateway
    changes while its Redis is away: send_offsets_to_transaction never returned (tests/jepsen soak
    sentinel:255050520). Nor is a holder named that Metadata no longer lists (a gateway killed before
    its lease ran out), as Kafka names only a live broker (getAliveBrokerNode): librdkafka adds the
    broker FindCoordinator names, drops it at the next Metadata, and waits on it for ever
    (librdkafka issue 5511; soak cluster:520419567)."""
    resource = ResourceType.GROUP if key_type == KEY_TYPE_GROUP else ResourceType.TRANSACTIONAL_ID
    if key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION) and not await ctx.allowed(resource, key, Operation.DESCRIBE):
        denied = (KafkaError.group_authorization_failed if key_type == KEY_TYPE_GROUP
                  else KafkaError.transactional_id_authorization_failed)
        return {"error_code": denied, "error_message": None, "node_id": -1, "host": "", "port": -1}
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        return {"error_code": KafkaError.invalid_request, "error_message": f"key type {key_type} is not coordinated here",
                "node_id": -1, "host": "", "port": -1}
    target = None
    if key_type == KEY_TYPE_GROUP:
        try:
            target = await _coordinator(ctx).locate(key)
        except Exception as exc:
            if (code := group_error(exc)) != KafkaError.coordinator_not_available:
                return {"error_code": code, "error_message": error_message(exc), "node_id": -1, "host": "",
                        "port": -1}
        if target is not None and target[2] == 0:  # the holder took the lease before it learnt its address
            return {"error_code": KafkaError.coordinator_not_available, "error_message": None,
                    "node_id": -1, "host": "", "port": -1}
        if target is not None and target[0] not in {p.node_id for p in ctx.services.registry.live()}:
            target = None  # a holder gone from Metadata (killed, its lease not yet run out) is no coordinator
    if target is None:
        registry = ctx.services.registry
        spread = registry.group_coordinator if key_type == KEY_TYPE_GROUP else registry.txn_coordinator
        target = peer_address(ctx, spread(key))
    node, host, port = target
    return {"error_code": KafkaError.none, "error_message": None, "node_id": node, "host": host, "port": port}


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------


@handles(ApiKey.JOIN_GROUP, 0, 9)
async def join_group(ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    instance_id = getattr(req, "group_instance_id", None)
    try:
        await _authorize(ctx, req.group_id, Operation.READ)
        r = await _coordinator(ctx).join(
            req.group_id,
            req.member_id,
            protocol_type=req.protocol_type,
            protocols=[(p.name, p.metadata) for p in req.protocols],
            session_timeout_ms=_ms(req.session_timeout),
            rebalance_timeout_ms=_ms(req.rebalance_timeout) if v >= 1 else -1,
            instance_id=instance_id,
            client_id=ctx.client_id or "",
            client_host=_client_host(ctx),
            require_known_member_id=v >= 4 and not instance_id,
        )
    except Exception as exc:
        member_id = exc.member_id if isinstance(exc, GroupError) and exc.member_id else req.member_id
        return _response(ctx, {
            "error_code": group_error(exc),
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None if v >= 7 else "",
            "leader": "",
            "member_id": member_id,
            "members": [],
        })
    return _response(ctx, {
        "error_code": KafkaError.none,
        "generation_id": r.generation,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol or "",
        "leader": r.leader,
        "skip_assignment": False,
        "member_id": r.member_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.instance_id, "metadata": m.metadata}
            for m in r.members
        ],
    })


@handles(ApiKey.SYNC_GROUP, 0, 5)
async def sync_group(ctx: RequestContext, req: Any) -> Any:
    try:
        await _authorize(ctx, req.group_id, Operation.READ)
        r = await _coordinator(ctx).sync(
            req.group_id,
            req.generation_id,
            req.member_id,
            instance_id=getattr(req, "group_instance_id", None),
            protocol_type=getattr(req, "protocol_type", None),
            protocol=getattr(req, "protocol_name", None),
            assignments={a.member_id: a.assignment for a in req.assignments},
        )
    except Exception as exc:
        return _response(ctx, {"error_code": group_error(exc), "assignment": b""})
    return _response(ctx, {
        "error_code": KafkaError.none,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol,
        "assignment": r.assignment,
    })


@handles(ApiKey.HEARTBEAT, 0, 4)
async def heartbeat(ctx: RequestContext, req: Any) -> Any:
    try:
        await _authorize(ctx, req.group_id, Operation.READ)
        await _coordinator(ctx).heartbeat(
            req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None)
        )
    except Exception as exc:
        return _response(ctx, {"error_code": group_error(exc)})
    return _response(ctx, {"error_code": KafkaError.none})


@handles(ApiKey.LEAVE_GROUP, 0, 5)
async def leave_group(ctx: RequestContext, req: Any) -> Any:
    if ctx.api_version < 3:
        leaving: list[tuple[str, str | None]] = [(req.member_id, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in req.members]
    try:
        await _authorize(ctx, req.group_id, Operation.READ)
        outcomes = await _coordinator(ctx).leave(req.group_id, leaving)
    except Exception as exc:
        return _response(ctx, {"error_code": group_error(exc), "members": []})
    codes = [KafkaError.none if k is None else KafkaError(int(k)) for k in outcomes]
    if ctx.api_version < 3:
        return _response(ctx, {"error_code": codes[0]})
    return _response(ctx, {
        "error_code": KafkaError.none,
        "members": [
            {"member_id": mid, "group_instance_id": iid, "error_code": code}
            for (mid, iid), code in zip(leaving, codes, strict=True)
        ],
    })


# -- OffsetCommit, OffsetFetch ------------------------------------------------------------------


TOPIC_IDS_VERSION = 10
"""OffsetCommit and OffsetFetch name topics by id from this version on."""


async def _names(ctx: RequestContext, topics: Any) -> list[str | None]:
    """The name of each topic of the request: as given before v10, else of the topic its id names
    now (None for an id no topic has, or the zero id)."""
    if ctx.api_version < TOPIC_IDS_VERSION:
        return [t.name for t in topics]
    out: list[str | None] = []
    for t in topics:
        info = None if t.topic_id is None else await ctx.services.log.topic_by_id(t.topic_id.hex, fresh=True)
        out.append(None if info is None else info.name)
    return out


@handles(ApiKey.OFFSET_COMMIT, 2, 10)
async def offset_commit(ctx: RequestContext, req: Any) -> Any:
    """As Kafka's KafkaApis.handleOffsetCommitRequest; from v10 a topic whose id names no topic
    answers UNKNOWN_TOPIC_ID on its partitions, and the rest are committed."""
    names = await _names(ctx, req.topics)
    offsets = {
        (name, p.partition_index): (
            p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata
        )
        for t, name in zip(req.topics, names, strict=True) if name is not None
        for p in t.partitions
    }
    codes: dict[tuple[str, int], KafkaError] = {}
    group_code: KafkaError | None = None
    for topic in {t for t, _ in offsets}:  # the others are committed; these get their own error
        if not await ctx.allowed(ResourceType.TOPIC, topic, Operation.READ):
            codes.update({k: KafkaError.topic_authorization_failed for k in offsets if k[0] == topic})
    try:
        await _authorize(ctx, req.group_id, Operation.READ)
        outcome = await _coordinator(ctx).commit_offsets(
            req.group_id,
            req.generation_id_or_member_epoch,
            req.member_id,
            {k: v for k, v in offsets.items() if k not in codes},
            instance_id=getattr(req, "group_instance_id", None),
            api_version=ctx.api_version,
        ) if len(codes) < len(offsets) else {}
        codes.update({k: KafkaError.none if e is None else KafkaError(int(e)) for k, e in outcome.items()})
    except Exception as exc:
        group_code = group_error(exc)  # Kafka's getErrorResponse: on every partition of the request

    def code(name: str | None, partition: int) -> KafkaError:
        if group_code is not None:
            return group_code
        return KafkaError.unknown_topic_id if name is None else codes[(name, partition)]

    return _response(ctx, {
        "topics": [
            {"name": name, "topic_id": getattr(t, "topic_id", None), "partitions": [
                {"partition_index": p.partition_index, "error_code": code(name, p.partition_index)}
                for p in t.partitions
            ]}
            for t, name in zip(req.topics, names, strict=True)
        ],
    })


async def _fetch_group(
    ctx: RequestContext, group_id: str, parts: list[tuple[str, int]] | None, member_id: str | None = None,
    member_epoch: int = -1, names: list[str] | None = None, require_stable: bool = False,
) -> tuple[list[dict[str, Any]], KafkaError]:
    """One group's committed offsets of `parts` (all of them when None) as response topics
    (partition field names are the same in every version), and the group-level error. A consumer
    group's member (v9+) fetches in its epoch. Every topic in `names` (those asked for) is answered,
    one asked with no partitions with none, those the principal may describe first, as Kafka's
    OffsetMetadataManager.fetchOffsets and KafkaApis.fetchOffsetsForGroup answer. With
    `require_stable` (v7+), a partition an open transaction has offsets pending for is
    UNSTABLE_OFFSET_COMMIT, which the client retries."""
    try:
        await _authorize(ctx, group_id, Operation.DESCRIBE)
        found = await _coordinator(ctx).fetch_offsets(group_id, parts, member_id=member_id, member_epoch=member_epoch)
        unstable = await ctx.services.txn_producers.unstable_offsets(group_id, list(found)) if require_stable \
            else set()
    except Exception as exc:
        return [], group_error(exc)
    asked = list(dict.fromkeys(names or ()))
    hidden = {t for t in {*asked, *(t for t, _ in found)}
              if not await ctx.allowed(ResourceType.TOPIC, t, Operation.DESCRIBE)}
    by_topic: dict[str, list[dict[str, Any]]] = {t: [] for t in sorted(asked, key=lambda t: t in hidden)}
    for (topic, partition), c in found.items():
        if topic in hidden:
            if parts is not None:  # asked for by name: say why there is nothing; else leave it out
                by_topic.setdefault(topic, []).append(_unfetched(partition, KafkaError.topic_authorization_failed))
            continue
        if (topic, partition) in unstable:
            by_topic.setdefault(topic, []).append(_unfetched(partition, KafkaError.unstable_offset_commit))
            continue
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": -1 if c is None else c.offset,
            "committed_leader_epoch": -1 if c is None else c.leader_epoch,
            "metadata": "" if c is None else c.metadata,
            "error_code": KafkaError.none,
        })
    return [{"name": name, "partitions": ps} for name, ps in by_topic.items()], KafkaError.none


def _unfetched(partition: int, error: KafkaError) -> dict[str, Any]:
    return {"partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
            "error_code": error}


async def _fetch_group_by_id(
    ctx: RequestContext, group_id: str, topics: Any, member_id: str | None, member_epoch: int,
    require_stable: bool = False,
) -> tuple[list[dict[str, Any]], KafkaError]:
    """OffsetFetch v10's group: topics asked for by id, answered by id; an id no topic has is
    UNKNOWN_TOPIC_ID on its partitions. All of the group's offsets (no topics) carry the id of the
    topic of each name now (the zero id for a topic gone)."""
    ids: dict[str, uuid.UUID | None] = {}
    unknown: list[dict[str, Any]] = []
    parts: list[tuple[str, int]] | None = None
    if topics is not None:
        parts = []
        for t, name in zip(topics, await _names(ctx, topics), strict=True):
            if name is None:
                unknown.append({"topic_id": t.topic_id,
                                "partitions": [_unfetched(p, KafkaError.unknown_topic_id) for p in t.partition_indexes]})
            else:
                ids[name] = t.topic_id
                parts += [(name, p) for p in t.partition_indexes]
    found, error = await _fetch_group(ctx, group_id, parts, member_id, member_epoch, list(ids), require_stable)
    if error != KafkaError.none:
        return [], error
    for t in found:
        if t["name"] not in ids:
            try:
                ids[t["name"]] = topic_uuid((await ctx.services.log.topic(t["name"], create=False)).topic_id)
            except TopicNotFound:
                ids[t["name"]] = None
        t["topic_id"] = ids[t["name"]]
    return found + unknown, error


@handles(ApiKey.OFFSET_FETCH, 1, 10)
async def offset_fetch(ctx: RequestContext, req: Any) -> Any:
    stable = bool(getattr(req, "require_stable", False))
    if ctx.api_version >= 8:
        groups = []
        for g in req.groups:
            member_id, member_epoch = getattr(g, "member_id", None), getattr(g, "member_epoch", -1)
            if ctx.api_version >= TOPIC_IDS_VERSION:
                topics, error = await _fetch_group_by_id(ctx, g.group_id, g.topics, member_id, member_epoch, stable)
            else:
                topics, error = await _fetch_group(ctx, g.group_id, _parts(g.topics), member_id, member_epoch,
                                                   [t.name for t in g.topics or ()], stable)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return _response(ctx, {"groups": groups})
    topics, error = await _fetch_group(ctx, req.group_id, _parts(req.topics), names=[t.name for t in req.topics or ()],
                                       require_stable=stable)
    if ctx.api_version < 2 and error != KafkaError.none:
        # v1 has no group-level error: it goes on every partition asked for
        topics = [
            {"name": t.name, "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": error}
                for p in t.partition_indexes
            ]}
            for t in req.topics or ()
        ]
    return _response(ctx, {"topics": topics, "error_code": error})


def _parts(topics: Any) -> list[tuple[str, int]] | None:
    return None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]


# -- DescribeGroups, ListGroups, DeleteGroups ---------------------------------------------------


@handles(ApiKey.DESCRIBE_GROUPS, 0, 6)
async def describe_groups(ctx: RequestContext, req: Any) -> Any:
    """KIP-430: with include_authorized_operations (v3+), each group found says what the principal
    may do on it (Kafka sets it on the groups without an error only)."""
    wants_operations = getattr(req, "include_authorized_operations", False)
    out = []
    for group_id in await refused_first(ctx, req.groups):
        try:
            await _authorize(ctx, group_id, Operation.DESCRIBE)
            d, gone = await _coordinator(ctx).describe(group_id), f"group {group_id} not found"
        except Exception as exc:
            if isinstance(exc, GroupError) and exc.kind is GroupErrorKind.GROUP_ID_NOT_FOUND:
                d, gone = None, str(exc)  # a group of a type DescribeGroups does not describe (streams)
            else:
                out.append({"group_id": group_id, "error_code": group_error(exc),
                            "error_message": error_message(exc),
                            "group_state": "", "protocol_type": "", "protocol_data": "", "members": []})
                continue
        if d is None:
            missing = ctx.api_version >= 6
            out.append({
                "group_id": group_id,
                "error_code": KafkaError.group_id_not_found if missing else KafkaError.none,
                "error_message": gone if missing else None,
                "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
                "authorized_operations": await authorized_operations(
                    ctx, ResourceType.GROUP, group_id, wants_operations and not missing
                ),
            })
            continue
        # only a Stable group names its protocol and its members' metadata for it; otherwise Kafka
        # describes the members without metadata (GroupMetadataManager.describeGroups,
        # ClassicGroupMember.describeNoMetadata)
        stable = d.state == "Stable"
        out.append({
            "group_id": group_id,
            "error_code": KafkaError.none,
            "group_state": d.state,
            "protocol_type": d.protocol_type,
            "protocol_data": d.protocol if stable else "",
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                 "client_host": m.client_host, "member_metadata": m.metadata if stable else b"",
                 "member_assignment": m.assignment}
                for m in d.members
            ],
            "authorized_operations": await authorized_operations(ctx, ResourceType.GROUP, group_id, wants_operations),
        })
    return _response(ctx, {"groups": out})


@handles(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(ctx: RequestContext, req: Any) -> Any:
    states = set(getattr(req, "states_filter", ()) or ())
    types = {t.lower() for t in getattr(req, "types_filter", ()) or ()}
    try:
        listed = await _coordinator(ctx).list_groups(states or None)
        listed += await ctx.services.share.list_groups(states or None)
    except Exception as exc:
        return _response(ctx, {"error_code": group_error(exc), "groups": []})
    # KafkaApis.handleListGroupsRequest: DESCRIBE on the cluster lists every group, else those the
    # principal may describe
    everyone = await may_describe_cluster(ctx)
    return _response(ctx, {
        "error_code": KafkaError.none,
        "groups": [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state,
             "group_type": g.group_type}
            for g in listed
            if (not types or g.group_type in types)
            and (everyone or await ctx.allowed(ResourceType.GROUP, g.group_id, Operation.DESCRIBE))
        ],
    })


@handles(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: RequestContext, req: Any) -> Any:
    results = []
    for group_id in req.groups_names:
        try:
            await _authorize(ctx, group_id, Operation.DELETE)
            if not await ctx.services.share.delete_group(group_id):  # a share group's, else the others'
                await _coordinator(ctx).delete(group_id)
            code = KafkaError.none
        except Exception as exc:
            code = group_error(exc)
        results.append({"group_id": group_id, "error_code": code})
    return _response(ctx, {"results": results})


@handles(ApiKey.OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: RequestContext, req: Any) -> Any:
    """As Kafka's KafkaApis.handleOffsetDeleteRequest: delete on the group (else a group-level
    GROUP_AUTHORIZATION_FAILED), read on each topic (else TOPIC_AUTHORIZATION_FAILED on its
    partitions), topics that do not exist UNKNOWN_TOPIC_OR_PARTITION; the rest go to the coordinator."""
    codes: dict[tuple[str, int], KafkaError] = {}
    try:
        await _authorize(ctx, req.group_id, Operation.DELETE)
        for t in req.topics:
            code = KafkaError.none
            if not await ctx.allowed(ResourceType.TOPIC, t.name, Operation.READ):
                code = KafkaError.topic_authorization_failed
            elif not await _topic_exists(ctx, t.name):
                code = KafkaError.unknown_topic_or_partition
            codes.update({(t.name, p.partition_index): code for p in t.partitions})
        wanted = [tp for tp, code in codes.items() if code == KafkaError.none]
        outcome = await _coordinator(ctx).delete_offsets(req.group_id, wanted)
    except Exception as exc:
        return _response(ctx, {"error_code": group_error(exc), "topics": []})
    codes.update({tp: KafkaError.none if e is None else KafkaError(int(e)) for tp, e in outcome.items()})
    return _response(ctx, {"error_code": KafkaError.none, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": codes[(t.name, p.partition_index)]}
            for p in t.partitions]}
        for t in req.topics]})


async def _topic_exists(ctx: RequestContext, name: str) -> bool:
    try:
        await ctx.services.log.topic(name, create=False)
    except TopicNotFound:
        return False
    return True
