"""The hand-written Produce, Fetch and ListOffsets encoders, byte for byte against kio's encoder."""

from __future__ import annotations

import datetime
import io
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as KafkaError
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from gateway.formats.records import build_batch, with_base_offset
from gateway.kafka import codec, streams_schema
from gateway.kafka.dispatch import ApiKey, load_handlers, supported
from gateway.kafka.fetch import FetchPartition, encode_fetch_response
from gateway.kafka.offsets import OffsetResult, encode_list_offsets_response
from gateway.kafka.produce import PartitionResult, encode_produce_response
from gateway.kafka.txn import encode_add_partitions_response, encode_end_txn_response
from tests.kafka_wire import LYING_ARRAY

load_handlers()


def kio_body(api_key: int, version: int, values: dict) -> bytes:
    return codec.encode_body(codec.build(codec.response_class(api_key, version), values))


def test_api_keys_name_every_api_of_kio_and_no_other():
    """kio's APIs, and the one gateway.kafka.streams_schema adds (Kafka 4.4's, newer than kio)."""
    newer = {streams_schema.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE: "streams_group_topology_description_update"}
    assert {key.value: key.name.lower() for key in ApiKey} == {**api_key_map, **newer}


def versions(api_key: int) -> list[int]:
    """Every advertised version of the API."""
    reg = next(r for r in supported() if r.api_key == api_key)
    return list(range(reg.min_version, reg.max_version + 1))


errors = st.sampled_from([KafkaError.none, KafkaError.unknown_topic_or_partition, KafkaError.corrupt_message,
                          KafkaError.unknown_topic_id, KafkaError.inconsistent_topic_id])
names = st.text(alphabet="abcxyz._-0123456789", min_size=1, max_size=20)
i64s = st.integers(-1, 2**40)


@pytest.mark.parametrize("version", versions(ApiKey.PRODUCE))
@settings(max_examples=25, deadline=None)
@given(
    topics=st.lists(
        st.tuples(names, st.lists(st.tuples(st.integers(0, 1000), errors, i64s, i64s, st.none() | names,
                                            st.lists(st.tuples(st.integers(0, 2**31 - 1), names), max_size=3)),
                                  max_size=3)),
        max_size=3,
    )
)
def test_produce_response_matches_kio(version, topics):
    def key(name: str) -> str | uuid.UUID:  # v13 names topics by id
        return uuid.uuid5(uuid.NAMESPACE_OID, name) if version >= 13 else name

    ours = [(key(name), [PartitionResult(i, e, b, s, m, record_errors=tuple(r)) for i, e, b, s, m, r in parts])
            for name, parts in topics]
    expected = kio_body(ApiKey.PRODUCE, version, {
        "throttle_time": 0,
        "responses": [
            {"name": name, "topic_id": name, "partition_responses": [
                {"index": p.index, "error_code": p.error, "base_offset": p.base_offset, "log_append_time": None,
                 "log_start_offset": p.log_start, "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in p.record_errors]
                 if version >= 8 else (), "error_message": p.message}
                for p in parts]}
            for name, parts in ours
        ],
    })
    assert b"".join(encode_produce_response(version, ours)) == expected


def _batch(n: int, base: int) -> tuple[bytes, list[bytes | memoryview]]:
    raw = build_batch([(b"k", b"v" * i, []) for i in range(n)], timestamp=1_700_000_000_000)
    chunks = with_base_offset(raw, base)
    return b"".join(bytes(c) for c in chunks), chunks


@pytest.mark.parametrize("version", versions(ApiKey.FETCH))
@settings(max_examples=25, deadline=None)
@given(
    parts=st.lists(
        st.tuples(st.integers(0, 99), errors, i64s, st.integers(0, 3), st.none() | st.lists(st.tuples(i64s, i64s), max_size=2)),
        max_size=4,
    ),
    topic=names,
    topic_id=st.none() | st.uuids(),
)
def test_fetch_response_matches_kio(version, parts, topic, topic_id):
    """Every version, v13+ naming topics by id (None: the zero id, for an id that named none)."""
    ours = []
    for index, err, hw, nbatches, aborted in parts:
        fp = FetchPartition(index, err, hw, hw, 0, aborted)
        for b in range(nbatches):
            _, chunks = _batch(b + 1, hw + b * 10)
            fp.records += chunks
            fp.size += sum(len(c) for c in chunks)
        ours.append(fp)
    expected = kio_body(ApiKey.FETCH, version, {
        "throttle_time": 0, "error_code": KafkaError.none, "session_id": 0,
        "responses": [{"topic": topic, "topic_id": topic_id, "partitions": [
            {"partition_index": p.index, "error_code": p.error, "high_watermark": p.high_watermark,
             "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start,
             "aborted_transactions": None if p.aborted is None else [
                 {"producer_id": a, "first_offset": f} for a, f in p.aborted],
             "preferred_read_replica": -1,
             "records": b"".join(bytes(c) for c in p.records)}
            for p in ours]}],
    })
    chunks = encode_fetch_response(version, [(topic_id if version >= 13 else topic, ours)])
    assert b"".join(bytes(c) for c in chunks) == expected
    # record bytes are passed through as the very objects read from storage, not copies
    record_chunks = [c for p in ours for c in p.records]
    assert all(any(c is r for c in chunks) for r in record_chunks)


@pytest.mark.parametrize("version", versions(ApiKey.LIST_OFFSETS))
@settings(max_examples=25, deadline=None)
@given(
    topics=st.lists(st.tuples(names, st.lists(st.tuples(st.integers(0, 99), errors, i64s, i64s), max_size=3)), max_size=3)
)
def test_list_offsets_response_matches_kio(version, topics):
    ours = [(name, [OffsetResult(i, e, ts, off) for i, e, ts, off in parts]) for name, parts in topics]
    expected = kio_body(ApiKey.LIST_OFFSETS, version, {
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": [
            {"partition_index": p.index, "error_code": p.error, "timestamp": p.timestamp, "offset": p.offset,
             "leader_epoch": 0 if p.error == KafkaError.none and p.offset >= 0 else -1}
            for p in parts]} for name, parts in ours],
    })
    assert b"".join(encode_list_offsets_response(version, ours)) == expected


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@settings(max_examples=25, deadline=None)
@given(topics=st.lists(st.tuples(st.text(min_size=1, max_size=8), st.lists(st.tuples(st.integers(0, 99), errors),
                                                                          max_size=3)), max_size=3))
def test_add_partitions_to_txn_response_matches_kio(version, topics):
    expected = kio_body(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"results_by_topic_v3_and_below": [
        {"name": name, "results_by_partition": [{"partition_index": p, "partition_error_code": e} for p, e in parts]}
        for name, parts in topics]})
    assert encode_add_partitions_response(version, topics) == expected


@pytest.mark.parametrize("version", versions(ApiKey.END_TXN))
@settings(max_examples=10, deadline=None)
@given(error=errors, producer_id=i64s, producer_epoch=st.integers(-1, 32767))
def test_end_txn_response_matches_kio(version, error, producer_id, producer_epoch):
    values = {"throttle_time": 0, "error_code": error, "producer_id": producer_id, "producer_epoch": producer_epoch}
    expected = kio_body(ApiKey.END_TXN, version, values)
    assert encode_end_txn_response(version, error, producer_id, producer_epoch) == expected


def _request_frame(request, correlation_id: int = 7, client_id: str | None = "me") -> bytes:
    header_cls = request.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=request.__api_key__,
                                              request_api_version=request.__version__,
                                              correlation_id=correlation_id, client_id=client_id))
    entity_writer(type(request))(buf, request)
    return buf.getvalue()


@pytest.mark.parametrize("version", [0, 5, 9, 12, 13])
def test_request_decoding_tolerates_trailing_bytes(version):
    cls = codec.request_class(ApiKey.METADATA, version)
    req = codec.build(cls, {"topics": [{"name": "a", "topic_id": None}], "allow_auto_topic_creation": True})
    frame = _request_frame(req) + b"\x00\x01trailing"
    header = codec.read_header(frame)
    assert header[:4] == (ApiKey.METADATA, version, 7, "me")
    assert codec.decode_request(frame, header) == req


def test_response_framing_adds_size_and_header():
    flex = codec.frame_response(9, True, [b"ab", b"c"])
    assert b"".join(flex) == struct.pack(">ii", 8, 9) + b"\x00abc"
    plain = codec.frame_response(9, False, [b"ab"])
    assert b"".join(plain) == struct.pack(">ii", 6, 9) + b"ab"
    assert not codec.response_header_flexible(ApiKey.API_VERSIONS, 3)
    assert codec.response_header_flexible(ApiKey.METADATA, 9)


def test_malformed_request_is_reported():
    with pytest.raises(codec.MalformedRequest):
        codec.read_header(b"\x00\x03\x00")
    cls = codec.request_class(ApiKey.METADATA, 12)
    frame = _request_frame(codec.build(cls, {"topics": [{"name": "abc", "topic_id": None}]}))
    with pytest.raises(codec.MalformedRequest):
        codec.decode_request(frame[:-6], codec.read_header(frame))


@settings(max_examples=300, deadline=None)
@given(reg=st.sampled_from(supported()), data=st.data())
def test_hostile_request_bodies_decode_or_raise_malformed(reg, data):
    """Any bytes after a valid header either decode or raise MalformedRequest: never another error."""
    version = data.draw(st.integers(reg.min_version, reg.max_version))
    body = data.draw(st.binary(max_size=64) | st.sampled_from([b"\x7f\xff\xff\xff", b"\xff" * 9, b"\x80" * 12]))
    head = struct.pack(">hhih", reg.api_key, version, 1, -1)
    if codec.request_class(reg.api_key, version).__header_schema__.__flexible__:
        head += b"\x00"
    frame = head + body
    header = codec.read_header(frame)
    try:
        codec.decode_request(frame, header)
    except codec.MalformedRequest:
        pass


def test_an_array_longer_than_the_request_is_refused_before_kio_sees_it():
    frame = struct.pack(">hhih", ApiKey.DESCRIBE_CONFIGS, 4, 1, -1) + b"\x00" + LYING_ARRAY
    with pytest.raises(codec.MalformedRequest, match="claims 4021096923 items"):
        codec.decode_request(frame, codec.read_header(frame))



@pytest.mark.parametrize(("api", "version", "body", "field"), [
    (ApiKey.DELETE_ACLS, 1, struct.pack(">i", -1), "filters"),  # an array
    (ApiKey.DELETE_ACLS, 2, b"\x00\x00", "filters"),  # a compact array (length 0 means null), no tags
    (ApiKey.DESCRIBE_GROUPS, 0, struct.pack(">ih", 1, -1), "groups"),  # a string in an array of strings
])
def test_a_null_where_the_schema_has_none_is_refused_as_kafka_refuses_it(api, version, body, field):
    """Kafka's generated readers throw "non-nullable field ... was serialized as null"; kio would hand
    the handler a None."""
    head = struct.pack(">hhih", api, version, 1, -1)
    if codec.request_class(api, version).__header_schema__.__flexible__:
        head += b"\x00"
    frame = head + body
    with pytest.raises(codec.MalformedRequest, match=f"non-nullable field {field} was serialized as null"):
        codec.decode_request(frame, codec.read_header(frame))

st.register_type_strategy(Records, st.binary(max_size=40).map(Records))
ADVERTISED = [(r.api_key, v) for r in supported() for v in range(r.min_version, r.max_version + 1)]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_corrupted_real_requests_decode_or_raise_malformed(data):
    """Valid requests of every advertised version with a few bytes overwritten: never a crash."""
    key, version = data.draw(st.sampled_from(ADVERTISED))
    cls = codec.request_class(key, version)
    buf = io.BytesIO()
    entity_writer(cls)(buf, data.draw(st.from_type(cls)))
    body = bytearray(buf.getvalue())
    for _ in range(data.draw(st.integers(1, 4))):
        if body:
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.sampled_from([0xFF, 0x7F, 0x80, 0x00, 0x41]))
    head = struct.pack(">hhih", key, version, 1, -1) + (b"\x00" if cls.__header_schema__.__flexible__ else b"")
    frame = head + bytes(body)
    try:
        codec.decode_request(frame, codec.read_header(frame))
    except codec.MalformedRequest:
        pass


def _kio_request_frame(req) -> bytes:
    """A request frame as a client sends it (without the size prefix): header, then kio's body."""
    buf = io.BytesIO()
    entity_writer(type(req))(buf, req)
    head = struct.pack(">hhih", req.__api_key__, req.__version__, 7, 3) + b"cli"
    return head + (b"\x00" if req.__header_schema__.__flexible__ else b"") + buf.getvalue()


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_produce_requests_are_read_by_hand_as_kio_reads_them(data):
    """The hand-written Produce reader gives kio's values, records as views of the frame itself."""
    version = data.draw(st.integers(3, 13))
    req = data.draw(st.from_type(codec.request_class(ApiKey.PRODUCE, version)))
    frame = _kio_request_frame(req)
    header = codec.read_header(frame)
    ours = codec.decode_request(frame, header)
    theirs, _ = entity_reader(type(req))(frame, header.body_offset)
    assert ours.transactional_id == theirs.transactional_id
    assert (ours.acks, ours.timeout_ms) == (theirs.acks, theirs.timeout // datetime.timedelta(milliseconds=1))
    assert [(t.name if version < 13 else t.topic_id,
             [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
            for t in ours.topic_data] == \
           [(t.name if version < 13 else t.topic_id, [(p.index, p.records) for p in t.partition_data])
            for t in theirs.topic_data]
    for p in (p for t in ours.topic_data for p in t.partition_data if p.records is not None):
        assert p.records.obj is frame  # never copied


@pytest.mark.parametrize("version", [3, 9, 12, 13])
def test_a_cut_produce_request_is_malformed_at_every_length(version):
    batch = build_batch([(b"k", b"v" * 50, [])])
    req = codec.build(codec.request_class(ApiKey.PRODUCE, version), {
        "transactional_id": "tx", "acks": -1, "timeout": 1000,
        "topic_data": [{"name": "t", "topic_id": uuid.uuid4(), "partition_data": [{"index": 0, "records": batch}]}]})
    frame = _kio_request_frame(req)
    header = codec.read_header(frame)
    assert bytes(codec.decode_request(frame, header).topic_data[0].partition_data[0].records) == batch
    for end in range(header.body_offset, len(frame)):
        with pytest.raises(codec.MalformedRequest, match="api 0|produce|claims|tagged"):
            codec.decode_request(frame[:end], header)
