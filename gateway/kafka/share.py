"""KIP-932's share-group APIs: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge.

Thin translations over the share coordinator (`gateway.domain.groups.share_coordinator`), as Kafka
4.2's KafkaApis.handleShareGroupHeartbeat / handleShareFetchRequest / handleShareAcknowledgeRequest:
topics travel by id; a topic id no topic has is UNKNOWN_TOPIC_ID for each of its partitions; the
session errors (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH) and an unknown member are
answered at the top level, acknowledgements refused per partition (INVALID_RECORD_STATE). Every
partition that carried acknowledgements is in a ShareFetch's answer with its AcknowledgeErrorCode
(0 when applied), with records or none, the session-closing fetch's too, as KafkaApis merges the
acknowledge results into the fetch response (combineShareFetchAndShareAcknowledgeResponses). A
ShareFetch returns whole stored batches and, per batch, the ranges of it the member acquired with
their delivery counts; the client skips the records outside them.

Client quotas bind a ShareFetch as Kafka 4.4's KafkaApis binds it: MaxBytes at most the
consumer_byte_rate's window (handleFetchFromShareFetchRequest), then (processShareFetchResponse) the
response's size against consumer_byte_rate and the handling time (less the wait for records, as
Fetch's purgatory) against request_percentage, weighed together once the response is built. A
throttled ShareFetch is answered as ShareSessionContext.throttleResponse answers it: no records, no
errors, and only what KafkaApis adds back to it afterwards, the group's lock duration and the
outcome of the acknowledgements it carried (applied, as the request was handled in full). The records the
fetch acquired stay acquired, unsent, until their locks run out, as on Kafka. Its failures, and
ShareAcknowledge, are throttled by request time alone (RequestHandlerHelper.sendMaybeThrottle).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.share import JOIN_EPOCH, ShareError, ShareErrorKind
from gateway.domain.groups.share_coordinator import (
    LOCK_DURATION,
    AckBatch,
    ShareCoordinator,
    ShareFetched,
    TopicPartition,
)
from gateway.domain.quotas import REQUEST
from gateway.domain.security import Operation, ResourceType
from gateway.domain.topic_configs import Change
from gateway.formats.records import with_base_offset
from gateway.kafka.authz import authorized_operations, refused_first
from gateway.kafka.client_quotas import fetch_max_bytes, fetch_throttle, request_time, throttle
from gateway.kafka.consumer_groups import TopicIds
from gateway.kafka.dispatch import ApiKey, Encoded, RequestContext, handles
from gateway.kafka.errors import error_message
from gateway.kafka.fetch import MAX_WAIT
from gateway.kafka.groups import _authorize, _client_host, _coordinator, _response, group_error
from gateway.kafka.metadata import LEADER_EPOCH, broker, peer_address
from gateway.kafka.wire import I16, I32, I64, NO_TAGS, array_len, bytes_len, string, topic_key

SOURCE_GROUP = 8  # DescribeConfigs' DYNAMIC_GROUP_CONFIG
SOURCE_DEFAULT = 5
ASSIGNOR = "simple"  # Kafka's share-group assignor (`gateway.domain.groups.share.simple_assignment`)


def share_error(exc: BaseException) -> KafkaError:
    if isinstance(exc, ShareError):
        return KafkaError(int(exc.kind))
    return group_error(exc)


def _share(ctx: RequestContext) -> ShareCoordinator:
    return ctx.services.share


@handles(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
async def share_group_heartbeat(ctx: RequestContext, req: Any) -> Any:
    failed = {"member_id": None, "member_epoch": 0, "heartbeat_interval": 0}
    try:
        await _authorize(ctx, req.group_id, Operation.READ)
        for name in req.subscribed_topic_names or ():
            if not await ctx.allowed(ResourceType.TOPIC, name, Operation.DESCRIBE):
                return _response(ctx, {"error_code": KafkaError.topic_authorization_failed,
                                       "error_message": f"not allowed to describe topic {name!r}", **failed})
        if req.member_epoch == JOIN_EPOCH and await _coordinator(ctx).describe(req.group_id) is not None:
            raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a share group.")
        topics = await TopicIds.read(ctx)
        r = await _share(ctx).heartbeat(
            req.group_id, req.member_id, req.member_epoch,
            None if req.subscribed_topic_names is None else list(req.subscribed_topic_names),
            rack_id=req.rack_id, client_id=ctx.client_id or "", client_host=_client_host(ctx),
        )
    except Exception as exc:
        return _response(ctx, {"error_code": group_error(exc), "error_message": error_message(exc), **failed})
    return _response(ctx, {
        "error_code": KafkaError.none,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        # none for a member that left: Kafka's shareGroupLeave answers the member id and epoch alone
        "heartbeat_interval": 0 if r.left else _share(ctx).heartbeat_interval_ms,
        "assignment": None if r.assignment is None else {"topic_partitions": topics.by_id(r.assignment)},
    })


@handles(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
async def share_group_describe(ctx: RequestContext, req: Any) -> Any:
    """An id that is not a share group here answers GROUP_ID_NOT_FOUND in its slot, as Kafka does."""
    topics = await TopicIds.read(ctx)
    groups = [await _described(ctx, topics, group_id, req.include_authorized_operations)
              for group_id in await refused_first(ctx, req.group_ids)]
    return _response(ctx, {"groups": groups})


async def _described(ctx: RequestContext, topics: TopicIds, group_id: str, operations: bool) -> dict[str, Any]:
    slot: dict[str, Any] = {"group_id": group_id, "error_code": KafkaError.none, "group_state": "Empty",
                            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": ASSIGNOR, "members": []}
    try:
        await _authorize(ctx, group_id, Operation.DESCRIBE)
    except Exception as exc:
        return {**slot, "error_code": group_error(exc), "error_message": error_message(exc), "group_state": "",
                "assignor_name": ""}
    g = _share(ctx).describe(group_id)
    if g is None:
        if group_id in await _share(ctx).known():
            return slot  # known to Redis (configs, offsets), without members here
        return {**slot, "error_code": KafkaError.group_id_not_found, "error_message": f"Group {group_id} not found.",
                "group_state": "", "assignor_name": ""}
    return {
        **slot,
        "group_state": g.state,
        "group_epoch": g.epoch,
        "assignment_epoch": g.epoch,
        "members": [
            {"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch, "client_id": m.client_id,
             "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed),
             "assignment": {"topic_partitions": topics.by_id(m.assignment, named=True)}}
            for m in g.members.values()
        ],
        "authorized_operations": await authorized_operations(ctx, ResourceType.GROUP, group_id, operations),
    }


async def _names(ctx: RequestContext, topic_ids: list[uuid.UUID | None]) -> tuple[
        dict[uuid.UUID | None, str | None], dict[uuid.UUID | None, KafkaError]]:
    """Topic ids to names, None for an id no topic has or one the client may not read; and the
    error each of those gets: UNKNOWN_TOPIC_ID, or TOPIC_AUTHORIZATION_FAILED for a topic the
    client may not read (KafkaApis.handleShareFetchRequest and handleShareAcknowledgeRequest)."""
    out: dict[uuid.UUID | None, str | None] = {}
    errors: dict[uuid.UUID | None, KafkaError] = {}
    for tid in topic_ids:
        info = None if tid is None else await ctx.services.log.topic_by_id(tid.hex)
        allowed = info is not None and await ctx.allowed(ResourceType.TOPIC, info.name, Operation.READ)
        out[tid] = info.name if info is not None and allowed else None
        if out[tid] is None:
            errors[tid] = KafkaError.unknown_topic_id if info is None else KafkaError.topic_authorization_failed
    return out, errors


def _acks(topics: Any, names: dict[uuid.UUID | None, str | None]) -> dict[TopicPartition, list[AckBatch]]:
    acks: dict[TopicPartition, list[AckBatch]] = {}
    for t in topics:
        name = names.get(t.topic_id)
        if name is None:
            continue
        for p in t.partitions:
            if p.acknowledgement_batches:
                acks[(name, p.partition_index)] = [
                    (b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches
                ]
    return acks


def _leader(ctx: RequestContext) -> dict[str, int]:
    return {"leader_id": broker(ctx)[0], "leader_epoch": LEADER_EPOCH}


async def _lock_ms(ctx: RequestContext, group_id: str) -> int:
    share = _share(ctx)
    return int(share.value(await share.configs(group_id), LOCK_DURATION))


def _unknown_topic(t: Any, ctx: RequestContext, error: KafkaError) -> list[dict[str, Any]]:
    """The partitions of a request's topic whose id names no topic the client may read."""
    return [{"partition_index": p.partition_index, "error_code": error, "current_leader": _leader(ctx)}
            for p in t.partitions]


async def _failed(ctx: RequestContext, error: KafkaError, exc: BaseException) -> Encoded:
    took = throttle(ctx, (REQUEST, await request_time(ctx)))
    return Encoded(encode_share_fetch_response(error, error_message(exc), 0, [], throttle_ms=took), (error,))


@handles(ApiKey.SHARE_FETCH, 1, 2)
async def share_fetch(ctx: RequestContext, req: Any) -> Encoded:
    group_id = req.group_id or ""
    try:
        await _authorize(ctx, group_id, Operation.READ)
    except Exception as exc:
        return await _failed(ctx, group_error(exc), exc)
    wanted = [t.topic_id for t in req.topics] + [t.topic_id for t in req.forgotten_topics_data]
    names, refused = await _names(ctx, wanted)
    add = [(n, p.partition_index) for t in req.topics if (n := names[t.topic_id]) is not None for p in t.partitions]
    forget = [(n, p) for t in req.forgotten_topics_data if (n := names[t.topic_id]) is not None for p in t.partitions]
    try:
        fetched = await _share(ctx).fetch(
            group_id, req.member_id or "", req.share_session_epoch, add, forget, _acks(req.topics, names),
            max_records=req.max_records, max_bytes=fetch_max_bytes(ctx, req.max_bytes),
            max_wait=min(req.max_wait.total_seconds(), MAX_WAIT),
            topic_ids={name: tid.hex for tid, name in names.items() if name is not None and tid is not None},
        )
    except Exception as exc:
        return await _failed(ctx, share_error(exc), exc)
    if (opened := fetched.opened) is not None:  # ends with this connection, as Kafka's ShareSessionCache
        share, member_id = _share(ctx), req.member_id or ""
        ctx.connection.closers[("share session", group_id, member_id)] = (
            lambda: share.connection_closed(group_id, member_id, opened))
    ctx.remote += fetched.waited
    lock_ms = await _lock_ms(ctx, group_id)
    by_id = {name: tid for tid, name in names.items() if name is not None}
    answered = set(fetched.records) | fetched.acknowledged  # acknowledgements: always
    for topic, _ in answered | fetched.elsewhere:
        if topic not in by_id:  # a topic of the session the request did not name
            info = await ctx.services.log.topic(topic, create=False)
            by_id[topic] = uuid.UUID(hex=info.topic_id) if info.topic_id else None
    leader = broker(ctx)[0]
    topics: dict[uuid.UUID | None, list[SharePartition]] = {}
    for t in req.topics:
        if names[t.topic_id] is None:
            topics[t.topic_id] = [SharePartition(p.partition_index, leader, refused[t.topic_id])
                                  for p in t.partitions]
    endpoints: dict[int, tuple[int, str, int]] = {}
    for (_, p), old in sorted(fetched.stale.items()):
        topics.setdefault(uuid.UUID(hex=old), []).append(SharePartition(p, leader, KafkaError.unknown_topic_id))
    for topic, p in sorted(fetched.elsewhere - answered):
        elsewhere = peer_address(ctx, ctx.services.registry.leader(topic, p))
        endpoints[elsewhere[0]] = elsewhere
        topics.setdefault(by_id.get(topic), []).append(
            SharePartition(p, elsewhere[0], KafkaError.not_leader_or_follower))
    for tp in sorted(answered):
        topic, p = tp
        part = SharePartition(p, leader, ack_error=_ack_error(fetched, tp))
        for a in fetched.records.get(tp, []):
            part.records += with_base_offset(a.entry.batch, a.entry.base_offset)
            part.size += len(a.entry.batch)
            part.acquired += a.ranges
        part.acquired = in_batches(part.acquired, req.batch_size)
        topics.setdefault(by_id.get(topic), []).append(part)
    chunks = encode_share_fetch_response(KafkaError.none, None, lock_ms, list(topics.items()),
                                         sorted(endpoints.values()))
    if throttle_ms := await fetch_throttle(ctx, sum(len(c) for c in chunks)):
        topics = {}  # KafkaApis adds the acknowledgements' partitions with a zeroed CurrentLeader
        for topic, p in sorted(fetched.acknowledged):
            topics.setdefault(by_id.get(topic), []).append(SharePartition(p, 0, ack_error=_ack_error(fetched, (topic, p))))
        chunks = encode_share_fetch_response(KafkaError.none, None, lock_ms, list(topics.items()),
                                             throttle_ms=throttle_ms)
    codes = {p.error for ps in topics.values() for p in ps} | {p.ack_error for ps in topics.values() for p in ps}
    codes.discard(KafkaError.none)
    return Encoded(chunks, codes)


def _ack_error(fetched: ShareFetched, tp: TopicPartition) -> KafkaError:
    error = fetched.ack_errors.get(tp)
    return KafkaError.none if error is None else KafkaError(int(error))


def in_batches(ranges: list[tuple[int, int, int]], batch_size: int) -> list[tuple[int, int, int]]:
    """Acquired ranges (first, last, delivery count), in offset order, shaped as Kafka's
    SharePartition.createBatches shapes a fetch's: contiguous ranges of one delivery count are
    joined across stored batches, and a new one begins at a batch boundary once the current one
    spans `batch_size` records (ShareFetch's BatchSize) or more."""
    out: list[tuple[int, int, int]] = []
    for first, last, count in ranges:
        if out and out[-1][2] == count and out[-1][1] + 1 == first and first - out[-1][0] < batch_size:
            out[-1] = (out[-1][0], last, count)
        else:
            out.append((first, last, count))
    return out


@dataclass
class SharePartition:
    """One partition of a ShareFetch response: the stored batches as chunks, uncopied."""

    index: int
    leader: int
    error: KafkaError = KafkaError.none
    ack_error: KafkaError = KafkaError.none
    message: str | None = None  # the error's
    records: list[bytes | memoryview] = field(default_factory=list)
    size: int = 0
    acquired: list[tuple[int, int, int]] = field(default_factory=list)  # first, last, delivery count


def encode_share_fetch_response(
    error: KafkaError, message: str | None, lock_ms: int, topics: list[tuple[uuid.UUID | None, list[SharePartition]]],
    endpoints: list[tuple[int, str, int]] | None = None, throttle_ms: int = 0,
) -> list[bytes | memoryview]:
    """ShareFetchResponse v1-v2 body as chunks (the versions are alike), equal to kio's encoding;
    `endpoints` (node id, host, port) are the leaders a NOT_LEADER_OR_FOLLOWER partition names."""
    chunks: list[bytes | memoryview] = []
    out = bytearray(I32.pack(throttle_ms) + I16.pack(error) + string(message, True) + I32.pack(lock_ms))
    out += array_len(len(topics), True)
    for tid, parts in topics:
        out += topic_key(tid, True, True) + array_len(len(parts), True)
        for p in parts:
            out += I32.pack(p.index) + I16.pack(p.error) + string(p.message, True) + I16.pack(p.ack_error)
            out += string(None, True) + I32.pack(p.leader) + I32.pack(LEADER_EPOCH) + NO_TAGS
            out += bytes_len(p.size, True)
            if p.records:
                chunks.append(bytes(out))
                chunks.extend(p.records)
                out = bytearray()
            out += array_len(len(p.acquired), True)
            for first, last, count in p.acquired:
                out += I64.pack(first) + I64.pack(last) + I16.pack(count) + NO_TAGS
            out += NO_TAGS
        out += NO_TAGS
    out += array_len(len(endpoints or ()), True)
    for node, host, port in endpoints or ():
        out += I32.pack(node) + string(host, True) + I32.pack(port) + string(None, True) + NO_TAGS
    out += NO_TAGS
    chunks.append(bytes(out))
    return chunks


@handles(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def share_acknowledge(ctx: RequestContext, req: Any) -> Any:
    values: dict[str, Any] = {"throttle_time": 0, "error_code": KafkaError.none, "responses": []}
    group_id = req.group_id or ""
    try:
        await _authorize(ctx, group_id, Operation.READ)
        names, refused = await _names(ctx, [t.topic_id for t in req.topics])
        if req.share_session_epoch == 0:
            raise ShareError(ShareErrorKind.INVALID_SHARE_SESSION_EPOCH,
                             "a ShareAcknowledge cannot open a share session")
        errors = await _share(ctx).acknowledge(group_id, req.member_id or "", _acks(req.topics, names),
                                               session_epoch=req.share_session_epoch)
    except Exception as exc:
        return _response(ctx, {**values, "error_code": share_error(exc), "error_message": error_message(exc)})
    values["acquisition_lock_timeout"] = await _lock_ms(ctx, group_id)
    responses = []
    for t in req.topics:
        name = names.get(t.topic_id)
        if name is None:
            responses.append({"topic_id": t.topic_id, "partitions": _unknown_topic(t, ctx, refused[t.topic_id])})
            continue
        responses.append({"topic_id": t.topic_id, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": KafkaError(int(errors[(name, p.partition_index)])) if (name, p.partition_index) in errors
             else KafkaError.none,
             "current_leader": _leader(ctx)} for p in t.partitions]})
    values["responses"] = responses
    return _response(ctx, values)


# -- group configs (DescribeConfigs, IncrementalAlterConfigs on GROUP resources) --------------------


async def describe_group_configs(ctx: RequestContext, group_id: str, keys: list[str] | None) -> list[dict[str, Any]]:
    """The share group configs, each set one as a group config (DYNAMIC_GROUP_CONFIG), else the
    default; the synonyms as Kafka's ConfigHelper.createGroupConfigEntry lists them: the group's own
    value, then the default under the broker config's name where there is one
    (group.share.record.lock.duration.ms), else under the group config's. The caller authorizes."""
    share = _share(ctx)
    configs = await share.configs(group_id, fresh=True)
    out = []
    for name, spec in share.specs.items():
        if keys is not None and name not in keys:
            continue
        synonyms = [{"name": name, "value": configs[name], "source": SOURCE_GROUP}] if name in configs else []
        synonyms.append({"name": spec.broker or name, "value": spec.default, "source": SOURCE_DEFAULT})
        out.append({"name": name, "value": synonyms[0]["value"], "read_only": False,
                    "config_source": synonyms[0]["source"], "is_sensitive": False, "synonyms": synonyms,
                    "config_type": spec.kind, "documentation": spec.doc})
    return out


async def alter_group_configs(ctx: RequestContext, group_id: str, changes: list[Change], incremental: bool,
                              validate_only: bool) -> None:
    """The caller authorizes (GROUP_AUTHORIZATION_FAILED, as Kafka's ConfigAdminManager)."""
    await _share(ctx).alter_configs(group_id, changes, incremental=incremental, validate_only=validate_only)


# -- share group offsets -----------------------------------------------------------------------


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def describe_share_group_offsets(ctx: RequestContext, req: Any) -> Any:
    """Start offsets per partition (and from v1 the lag: records at or past the start offset), as
    Kafka's GroupCoordinatorService.describeShareGroupOffsets; a topic the client may not describe is
    left out, and a partition the group never read has start offset -1."""
    topics = await TopicIds.read(ctx)
    out = []
    for g in req.groups:
        try:
            await _authorize(ctx, g.group_id, Operation.DESCRIBE)
            wanted = None if g.topics is None else {t.topic_name: list(t.partitions) for t in g.topics}
            offsets = await _share(ctx).start_offsets(g.group_id, wanted)
        except Exception as exc:
            out.append({"group_id": g.group_id, "error_code": group_error(exc), "error_message": error_message(exc),
                        "topics": []})
            continue
        described = []
        for name, parts in offsets.items():
            if not await ctx.allowed(ResourceType.TOPIC, name, Operation.DESCRIBE):
                continue
            ends = {p: (await ctx.services.log.bounds(name, p))[1] for p in parts} if ctx.api_version >= 1 else {}
            described.append({"topic_name": name, "topic_id": topics.ids.get(name), "partitions": [
                {"partition_index": p, "start_offset": start, "leader_epoch": LEADER_EPOCH,
                 "lag": -1 if start < 0 or p not in ends else max(0, ends[p] - start)}
                for p, start in parts.items()]})
        out.append({"group_id": g.group_id, "error_code": KafkaError.none, "topics": described})
    return _response(ctx, {"groups": out})


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def alter_share_group_offsets(ctx: RequestContext, req: Any) -> Any:
    """Only while the group has no members (else GROUP_NOT_EMPTY for the whole request), as Kafka."""
    topics = await TopicIds.read(ctx)
    try:
        await _authorize(ctx, req.group_id, Operation.READ)
        await _share(ctx).alter_offsets(req.group_id, {
            t.topic_name: {p.partition_index: p.start_offset for p in t.partitions} for t in req.topics})
    except Exception as exc:
        return _response(ctx, {"error_code": group_error(exc), "error_message": error_message(exc), "responses": []})
    return _response(ctx, {"error_code": KafkaError.none, "responses": [
        {"topic_name": t.topic_name, "topic_id": topics.ids.get(t.topic_name),
         "partitions": [{"partition_index": p.partition_index, "error_code": KafkaError.none} for p in t.partitions]}
        for t in req.topics]})


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def delete_share_group_offsets(ctx: RequestContext, req: Any) -> Any:
    topics = await TopicIds.read(ctx)
    try:
        await _authorize(ctx, req.group_id, Operation.DELETE)
        await _share(ctx).delete_offsets(req.group_id, [t.topic_name for t in req.topics])
    except Exception as exc:
        return _response(ctx, {"error_code": group_error(exc), "error_message": error_message(exc), "responses": []})
    return _response(ctx, {"error_code": KafkaError.none, "responses": [
        {"topic_name": t.topic_name, "topic_id": topics.ids.get(t.topic_name), "error_code": KafkaError.none}
        for t in req.topics]})
