"""kio-shaped schemas of the streams group APIs' versions that kio 0.6.5 lacks: StreamsGroupHeartbeat
and StreamsGroupDescribe v1 and StreamsGroupTopologyDescriptionUpdate v0 (KIP-1331), as Kafka 4.4's
message specs (kafka-clients 4.4.0, `common/message/StreamsGroup*.json`) define them.

The v1 classes are kio's v0 classes with the fields v1 adds, removes or retypes, built from them so
that nothing of v0 is written twice; the topology description is new, and shared by the describe's
answer and the update's request, as the specs' structs are alike. No annotations are postponed here:
kio reads the fields' types as objects.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.streams_group_describe.v0 import request as describe_request_v0
from kio.schema.streams_group_describe.v0 import response as describe_response_v0
from kio.schema.streams_group_heartbeat.v0 import request as heartbeat_request_v0
from kio.schema.streams_group_heartbeat.v0 import response as heartbeat_response_v0
from kio.schema.types import GroupId
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE = 93
_Layout = list[str | tuple[str, Any, Any]]  # a base field's name, or (name, type, dataclasses.field)


def _derive(base: type[Any], version: int, layout: _Layout, *, kind: EntityType | None = None,
            api_key: int | None = None) -> type[Any]:
    """`base`'s class at `version`: the fields `layout` names in its order, base fields by name."""
    old = {f.name: f for f in dataclasses.fields(base)}
    spec: list[tuple[str, Any, Any]] = []
    for item in layout:
        if isinstance(item, tuple):
            spec.append(item)
            continue
        f = old[item]
        kwargs: dict[str, Any] = {"metadata": f.metadata}
        if f.default is not dataclasses.MISSING:
            kwargs["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            kwargs["default_factory"] = f.default_factory
        spec.append((f.name, f.type, field(**kwargs)))
    namespace = {"__type__": kind or base.__type__, "__version__": i16(version), "__flexible__": True,
                 "__api_key__": i16(api_key if api_key is not None else base.__api_key__),
                 "__header_schema__": base.__header_schema__, "__module__": __name__}
    return dataclasses.make_dataclass(base.__name__, spec, namespace=namespace, frozen=True, slots=True,
                                      kw_only=True)


def _entity(kind: EntityType, header: type[Any]) -> Callable[[type[Any]], type[Any]]:
    """A kio entity of StreamsGroupTopologyDescriptionUpdate v0: kio's class attributes and dataclass."""
    def make(cls: type[Any]) -> type[Any]:
        for name, value in (("__type__", kind), ("__version__", i16(0)), ("__flexible__", True),
                            ("__api_key__", i16(STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE)),
                            ("__header_schema__", header)):
            setattr(cls, name, value)
        return dataclass(frozen=True, slots=True, kw_only=True)(cls)
    return make


def _names(base: type[Any]) -> list[str]:
    return [f.name for f in dataclasses.fields(base)]


# -- the topology description (KIP-1331) --------------------------------------------------------


@_entity(EntityType.nested, RequestHeader)
class TopologyDescriptionNode:
    name: str = field(metadata={"kafka_type": "string"})
    node_type: i8 = field(metadata={"kafka_type": "int8"})  # 1 source, 2 processor, 3 sink
    source_topics: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    sink_topic: str | None = field(metadata={"kafka_type": "string"}, default=None)
    stores: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    successors: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())


@_entity(EntityType.nested, RequestHeader)
class TopologyDescriptionSubtopology:
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    nodes: tuple[TopologyDescriptionNode, ...]


@_entity(EntityType.nested, RequestHeader)
class TopologyDescriptionGlobalStore:
    source: TopologyDescriptionNode
    processor: TopologyDescriptionNode


@_entity(EntityType.nested, RequestHeader)
class TopologyDescription:
    subtopologies: tuple[TopologyDescriptionSubtopology, ...]
    global_stores: tuple[TopologyDescriptionGlobalStore, ...]


# -- StreamsGroupTopologyDescriptionUpdate v0 ---------------------------------------------------


@_entity(EntityType.request, RequestHeader)
class StreamsGroupTopologyDescriptionUpdateRequest:
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    member_id: str = field(metadata={"kafka_type": "string"})
    topology_epoch: i32 = field(metadata={"kafka_type": "int32"})
    topology_description: TopologyDescription


@_entity(EntityType.response, ResponseHeader)
class StreamsGroupTopologyDescriptionUpdateResponse:
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)


# -- StreamsGroupHeartbeat v1: the request as v0's; the answer's recovery lag 64-bit, after the
# -- offset interval, and TopologyDescriptionRequired ----------------------------------------------

_hb_v0 = heartbeat_response_v0.StreamsGroupHeartbeatResponse
StreamsGroupHeartbeatRequestV1 = _derive(heartbeat_request_v0.StreamsGroupHeartbeatRequest, 1,
                                         list(_names(heartbeat_request_v0.StreamsGroupHeartbeatRequest)))
StreamsGroupHeartbeatResponseV1 = _derive(_hb_v0, 1, [
    "throttle_time", "error_code", "error_message", "member_id", "member_epoch", "heartbeat_interval",
    "task_offset_interval",
    ("acceptable_recovery_lag", i64, field(metadata={"kafka_type": "int64"}, default=i64(-1))),
    "status", "active_tasks", "standby_tasks", "warmup_tasks",
    ("topology_description_required", bool, field(metadata={"kafka_type": "bool"}, default=False)),
    "endpoint_information_epoch", "partitions_by_user_endpoint",
])

# -- StreamsGroupDescribe v1: IncludeTopologyDescription; each group's description, its status and
# -- the assignor's name --------------------------------------------------------------------------

_desc_v0 = describe_request_v0.StreamsGroupDescribeRequest
StreamsGroupDescribeRequestV1 = _derive(_desc_v0, 1, [
    *_names(_desc_v0),
    ("include_topology_description", bool, field(metadata={"kafka_type": "bool"}, default=False)),
])
DescribedGroupV1 = _derive(describe_response_v0.DescribedGroup, 1, [
    *_names(describe_response_v0.DescribedGroup),
    ("topology_description", TopologyDescription | None, field(default=None)),
    ("topology_description_status", i8, field(metadata={"kafka_type": "int8"}, default=i8(0))),
    ("assignor_name", str | None, field(metadata={"kafka_type": "string"}, default=None)),
])
StreamsGroupDescribeResponseV1 = _derive(describe_response_v0.StreamsGroupDescribeResponse, 1, [
    "throttle_time", ("groups", tuple[DescribedGroupV1, ...], field()),  # type: ignore[valid-type]
])

# (api key, version) -> class, beside kio's index
REQUESTS: dict[tuple[int, int], type[Any]] = {
    (88, 1): StreamsGroupHeartbeatRequestV1,
    (89, 1): StreamsGroupDescribeRequestV1,
    (STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0): StreamsGroupTopologyDescriptionUpdateRequest,
}
RESPONSES: dict[tuple[int, int], type[Any]] = {
    (88, 1): StreamsGroupHeartbeatResponseV1,
    (89, 1): StreamsGroupDescribeResponseV1,
    (STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0): StreamsGroupTopologyDescriptionUpdateResponse,
}
