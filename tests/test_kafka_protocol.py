"""The Kafka wire as the listener sees it: raw frames over a socket, for what clients cannot provoke."""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct

import pytest
import redis as redis_sync
from aiokafka import AIOKafkaProducer
from kio.schema.errors import ErrorCode as KafkaError

from gateway.errors import StorageUnavailable
from gateway.formats.records import build_batch, build_control_batch, iter_records
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, load_handlers, supported
from tests.kafka_wire import (
    LYING_ARRAY,
    TIMEOUT,
    call,
    decode,
    frame,
    idempotent_batch,
    read_response,
    request,
)

load_handlers()


@pytest.fixture
async def conn(gateway):
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    yield reader, writer
    writer.close()


def advertised() -> dict[int, tuple[int, int]]:
    return {r.api_key: (r.min_version, r.max_version) for r in supported()}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
async def test_api_versions_lists_the_registry(conn, version):
    reader, writer = conn
    req = codec.build(codec.request_class(ApiKey.API_VERSIONS, version),
                      {"client_software_name": "raw", "client_software_version": "1"})
    writer.write(request(req, 41))
    cid, resp = decode(ApiKey.API_VERSIONS, version, await read_response(reader))
    assert cid == 41 and resp.error_code == KafkaError.none
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == advertised()


async def test_api_versions_too_new_gets_v0_with_unsupported_version_and_the_list(conn):
    reader, writer = conn
    writer.write(frame(ApiKey.API_VERSIONS, 99, 5, b"\x00\x00whatever", flexible_header=True))
    cid, resp = decode(ApiKey.API_VERSIONS, 0, await read_response(reader))
    assert cid == 5 and resp.error_code == KafkaError.unsupported_version
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == advertised()


def _unadvertised_with_error_code() -> tuple[int, int]:
    """An API's first version past what we advertise whose response has a top-level error code."""
    from dataclasses import fields

    for r in supported():
        cls = codec.find_response_class(r.api_key, r.max_version + 1)
        if cls is not None and cls.__flexible__ and any(f.name == "error_code" for f in fields(cls)):
            return r.api_key, r.max_version + 1
    raise AssertionError("every API is advertised up to its newest version")


async def test_unsupported_versions_and_unknown_keys_answer_error_35_and_keep_the_connection(conn):
    reader, writer = conn
    # a version the protocol has but we do not advertise: its own response shape, error 35
    key, version = _unadvertised_with_error_code()
    writer.write(frame(key, version, 1, b"", flexible_header=True))
    cid, resp = decode(key, version, await read_response(reader))
    assert cid == 1 and resp.error_code == KafkaError.unsupported_version
    # a version the protocol does not know, and an api key nobody knows: header plus error 35
    for cid_sent, key, version in ((2, ApiKey.METADATA, 999), (3, 30000, 0)):
        writer.write(frame(key, version, cid_sent, b""))
        payload = await read_response(reader)
        assert struct.unpack(">ih", payload) == (cid_sent, KafkaError.unsupported_version)
    # still usable
    writer.write(request(codec.build(codec.request_class(ApiKey.API_VERSIONS, 0)), 4))
    assert decode(ApiKey.API_VERSIONS, 0, await read_response(reader))[0] == 4


async def test_pipelined_requests_are_answered_in_order(conn):
    reader, writer = conn
    reqs = []
    for i in range(50):
        if i % 2:
            reqs.append(request(codec.build(codec.request_class(ApiKey.METADATA, 9), {"topics": None}), i))
        else:
            reqs.append(request(codec.build(codec.request_class(ApiKey.API_VERSIONS, 3),
                                            {"client_software_name": "x", "client_software_version": "1"}), i))
    writer.write(b"".join(reqs))
    got = [struct.unpack_from(">i", await read_response(reader))[0] for _ in reqs]
    assert got == list(range(50))


def produce_request(version: int, acks: int, topic: str, records: bytes):
    return codec.build(codec.request_class(ApiKey.PRODUCE, version), {
        "transactional_id": None, "acks": acks, "timeout": 1000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    })


async def test_acks_zero_gets_no_response_but_is_stored(gateway, conn):
    reader, writer = conn
    await gateway.services.log.create_topic("quiet", 1)
    batch = build_batch([(None, b"x", [])])
    writer.write(request(produce_request(9, 0, "quiet", batch), 1) + request(produce_request(9, 1, "quiet", batch), 2))
    cid, resp = decode(ApiKey.PRODUCE, 9, await read_response(reader))
    assert cid == 2  # the acks=0 request had no answer
    assert resp.responses[0].partition_responses[0].base_offset == 1
    assert await gateway.services.log.bounds("quiet", 0) == (0, 2)


async def test_pipelined_produces_are_appended_in_order_and_later_requests_see_them(gateway, conn):
    """Produces overlap at Redis, yet land in the order sent; a request behind them waits for
    them: a ListOffsets after 40 produces of 3 records says 120."""
    reader, writer = conn
    await gateway.services.log.create_topic("piped", 1)
    frames = [request(produce_request(9, -1, "piped", build_batch([(None, b"%d-%d" % (i, j), []) for j in range(3)])), i)
              for i in range(40)]
    latest = codec.build(codec.request_class(ApiKey.LIST_OFFSETS, 4), {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": "piped", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}],
    })
    writer.write(b"".join(frames) + request(latest, 40) + b"".join(
        request(produce_request(9, -1, "piped", build_batch([(None, b"late", [])])), 41 + i) for i in range(5)))
    offsets = []
    for i in range(40):
        cid, resp = decode(ApiKey.PRODUCE, 9, await read_response(reader))
        assert cid == i
        offsets.append(resp.responses[0].partition_responses[0].base_offset)
    assert offsets == [3 * i for i in range(40)]
    cid, resp = decode(ApiKey.LIST_OFFSETS, 4, await read_response(reader))
    assert cid == 40 and resp.topics[0].partitions[0].offset == 120
    assert [decode(ApiKey.PRODUCE, 9, await read_response(reader))[0] for _ in range(5)] == list(range(41, 46))
    sl = await gateway.services.log.read("piped", 0, 0, 100)
    values = [r.value for e in sl.entries for r in iter_records(e.batch, e.base_offset)]
    assert values == [b"%d-%d" % (i, j) for i in range(40) for j in range(3)] + [b"late"] * 5


async def test_redis_losing_the_scripts_mid_stream_is_retriable_and_loses_nothing(gateway, conn, redis_url):
    """SCRIPT FLUSH (or a Redis restart without them) between produces: a produce may be refused
    with a retriable error, or its connection closed (produce.py: Redis failed under it), never
    half-done; sent again it lands once."""
    reader, writer = conn
    await gateway.services.log.create_topic("flushed", 1)
    admin = redis_sync.Redis.from_url(redis_url)
    stored = []
    for i in range(6):
        if i == 3:
            admin.script_flush()
        for _attempt in range(3):
            writer.write(request(produce_request(9, -1, "flushed", build_batch([(None, b"v%d" % i, [])])), i))
            try:
                _, resp = decode(ApiKey.PRODUCE, 9, await read_response(reader))
            except asyncio.IncompleteReadError:  # closed: a client connects again and resends
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
                continue
            p = resp.responses[0].partition_responses[0]
            if p.error_code == KafkaError.none:
                stored.append(p.base_offset)
                break
            assert p.error_code.retriable, p.error_code
        else:
            raise AssertionError("the produce never succeeded")
    admin.close()
    writer.close()
    assert stored == list(range(6))
    sl = await gateway.services.log.read("flushed", 0, 0, 100)
    assert [r.value for e in sl.entries for r in iter_records(e.batch, e.base_offset)] == [b"v%d" % i for i in range(6)]


async def test_frames_cut_anywhere_by_the_network_are_read_whole(gateway, conn):
    """Requests arriving in pieces that end anywhere (inside a size, a header, a batch; several
    requests in one piece) are read whole and in order; a batch of 200 KB among them too."""
    reader, writer = conn
    await gateway.services.log.create_topic("pieces", 1)
    values = [b"small-%d" % i for i in range(3)] + [bytes(range(256)) * 800]
    stream = b"".join(request(produce_request(9, -1, "pieces", build_batch([(None, v, [])])), i)
                      for i, v in enumerate(values))
    cuts = [0, 1, 3, 7, 30, 100, 101, len(stream) // 2, len(stream) - 5, len(stream)]
    for a, b in itertools.pairwise(cuts):
        writer.write(stream[a:b])
        await writer.drain()
    answers = [decode(ApiKey.PRODUCE, 9, await read_response(reader)) for _ in values]
    assert [(cid, r.responses[0].partition_responses[0].base_offset) for cid, r in answers] == [(i, i) for i in range(4)]
    sl = await gateway.services.log.read("pieces", 0, 0, 10)
    assert [r.value for e in sl.entries for r in iter_records(e.batch, e.base_offset)] == values


async def test_produce_to_a_missing_partition_and_a_corrupt_batch_are_per_partition_errors(gateway, conn):
    reader, writer = conn
    await gateway.services.log.create_topic("strict", 1)
    await gateway.services.log.create_topic("forged", 1)
    good = build_batch([(None, b"x", [])])
    bad = good[:-1] + bytes([good[-1] ^ 1])

    async def produce(cid: int, topic_data: list[dict]) -> list[tuple[str, int, int]]:
        req = codec.build(codec.request_class(ApiKey.PRODUCE, 8), {
            "transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": topic_data})
        writer.write(request(req, cid))
        _, resp = decode(ApiKey.PRODUCE, 8, await read_response(reader))
        return [(t.name, p.index, p.error_code) for t in resp.responses for p in t.partition_responses]

    assert await produce(3, [
        {"name": "strict", "partition_data": [{"index": 0, "records": bad}, {"index": 5, "records": good}]},
        {"name": "nope", "partition_data": [{"index": 0, "records": good}]}]) == [
        ("strict", 0, KafkaError.corrupt_message),
        ("strict", 5, KafkaError.unknown_topic_or_partition),
        ("nope", 0, KafkaError.unknown_topic_or_partition)]
    # a marker is transactional: without a transactional id the whole request is refused, as
    # KafkaApis.handleProduceRequest refuses any with RequestUtils.hasTransactionalRecords
    marker = build_control_batch(True, producer_id=1, producer_epoch=0)  # only the gateway writes these
    assert await produce(4, [
        {"name": "forged", "partition_data": [{"index": 0, "records": marker}]},
        {"name": "strict", "partition_data": [{"index": 0, "records": good}]}]) == [
        ("forged", 0, KafkaError.transactional_id_authorization_failed),
        ("strict", 0, KafkaError.transactional_id_authorization_failed)]
    assert await gateway.services.log.bounds("forged", 0) == (0, 0)
    assert await gateway.services.log.bounds("strict", 0) == (0, 0)


async def test_fetch_out_of_range_and_long_poll_woken_by_a_produce(gateway, conn):
    reader, writer = conn
    await gateway.services.log.create_topic("poll", 1)
    fetch_cls = codec.request_class(ApiKey.FETCH, 12)

    def fetch(offset: int, wait_ms: int):
        return codec.build(fetch_cls, {
            "replica_id": -1, "max_wait": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "poll", "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "partition_max_bytes": 1 << 20}]}],
        })

    for cid, offset in enumerate((5, -5, -(1 << 63)), start=1):  # past the end, and negative ones
        writer.write(request(fetch(offset, 10_000), cid))
        _, resp = decode(ApiKey.FETCH, 12, await read_response(reader))
        p = resp.responses[0].partitions[0]
        # nothing but the error, as Kafka 4.4 answers (tests/test_kafka_differential.py, fetch_offset_out_of_range)
        assert (p.error_code, p.high_watermark, p.log_start_offset) == (KafkaError.offset_out_of_range, -1, -1)

    # a long poll with a 30 s max wait returns as soon as a record arrives
    notifier = gateway.services.log.notifier
    waiting = asyncio.Event()
    original = notifier.wait

    async def wait(parts, timeout):
        waiting.set()
        return await original(parts, timeout)

    notifier.wait = wait
    writer.write(request(fetch(0, 30_000), 9))
    await asyncio.wait_for(waiting.wait(), TIMEOUT)
    await gateway.services.log.append([("poll", 0, build_batch([(None, b"wake", [])]))])
    _, resp = decode(ApiKey.FETCH, 12, await read_response(reader))
    p = resp.responses[0].partitions[0]
    assert p.error_code == KafkaError.none and p.high_watermark == 1 and len(p.records) > 0


async def test_oversized_or_malformed_frames_close_only_that_connection(gateway):
    port = gateway.listeners["kafka"].port
    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
    await producer.start()
    try:
        for garbage in (
            struct.pack(">i", gateway.config.max_frame_bytes + 1),  # too large
            struct.pack(">i", 3) + b"abc",  # too small for a header
            frame(ApiKey.METADATA, 9, 1, b"\xff\xff\xff"),  # body kio cannot read
            frame(ApiKey.DESCRIBE_CONFIGS, 4, 1, LYING_ARRAY, flexible_header=True),  # would abort kio
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(garbage)
            assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""  # closed by the gateway
            writer.close()
        md = await producer.send_and_wait("survivor", b"still here")
        assert md.offset == 0
    finally:
        await producer.stop()


async def test_an_idempotent_batch_refused_or_found_stored_is_logged_with_its_producer(gateway, conn, caplog):
    """The gateway's own record of what an idempotent batch got, with its producer id, epoch and
    sequences (produce.py's `_outcome`): the soak's cluster:1039740058 stored batches twice, and no
    log said which answer had told the producer they were not stored."""
    reader, writer = conn
    caplog.set_level(logging.INFO, "gateway.kafka.produce")
    await gateway.services.log.create_topic("told", 1)
    answers = []
    for cid, batch in enumerate((idempotent_batch(b"a", 0), idempotent_batch(b"a", 0), idempotent_batch(b"c", 5))):
        writer.write(request(produce_request(9, -1, "told", batch), cid))
        [p] = decode(ApiKey.PRODUCE, 9, await read_response(reader))[1].responses[0].partition_responses
        answers.append((p.error_code, p.base_offset))
    assert answers == [(KafkaError.none, 0), (KafkaError.none, 0), (KafkaError.out_of_order_sequence_number, -1)]
    said = [r.getMessage().split(": ", 1)[1] for r in caplog.records if r.name == "gateway.kafka.produce"]
    assert said == ["told-0 pid 4242 epoch 0 seq 0..0 answered as the duplicate of offset 0",
                    "told-0 pid 4242 epoch 0 seq 5..5 answered OUT_OF_ORDER_SEQUENCE_NUMBER: told-0"]  # stored: DEBUG


async def test_storage_outage_during_produce_closes_the_connection(gateway, conn):
    """As a leader gone mid-request: the client resends its in-flight produces in order, where an
    answer would let the next one be refused out of order and librdkafka bump its epoch (produce.py)."""
    reader, writer = conn
    await gateway.services.log.create_topic("outage", 1)

    async def unavailable(items, **options):
        raise StorageUnavailable("redis unavailable: injected")

    gateway.services.log.append = unavailable
    writer.write(request(produce_request(9, -1, "outage", build_batch([(None, b"x", [])])), 1))
    assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""


async def test_shutdown_closes_idle_connections_without_waiting_for_the_grace(gateway, conn):
    reader, writer = conn
    writer.write(request(codec.build(codec.request_class(ApiKey.API_VERSIONS, 0)), 1))
    await read_response(reader)
    await asyncio.wait_for(gateway.listeners["kafka"].close(grace=60), TIMEOUT)
    assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""


@pytest.mark.parametrize("version", [10, 11, 12])
async def test_metadata_for_an_unknown_topic_id_answers_in_the_versions_shape(conn, version):
    """Topics are asked for by id from v12 (an unknown one: UNKNOWN_TOPIC_ID, no name); before, a
    topic without a name is an invalid request, as Kafka answers it (with an empty name, the
    version's name not being nullable)."""
    import uuid

    wanted = uuid.UUID("e3e70682-c209-4cac-629f-6fbed82c07cd")
    resp = await call(conn, ApiKey.METADATA, version, {"topics": [{"name": None, "topic_id": wanted}]})
    [topic] = resp.topics
    assert topic.topic_id == wanted
    if version >= 12:
        assert topic.error_code == KafkaError.unknown_topic_id and topic.name is None
    else:
        assert topic.error_code == KafkaError.invalid_request and topic.name == ""


async def test_api_versions_says_a_feature_update_through_this_gateway_at_once(conn, gateway):
    """ApiVersions answers from the levels last read (every client connection opens with it, and
    Kafka's broker answers it from its metadata cache), yet an UpdateFeatures through this gateway
    is in its next answer: what the cache held before the update is not served after it."""
    software = {"client_software_name": "raw", "client_software_version": "1"}

    async def level() -> tuple[int, dict[str, int]]:
        answer = await call(conn, ApiKey.API_VERSIONS, 4, software)
        return answer.finalized_features_epoch, {f.name: f.max_version_level for f in answer.finalized_features}

    assert await level() == (-1, {})  # read now, kept for the next answers
    updated = await call(conn, ApiKey.UPDATE_FEATURES, 1, {"timeout": 10_000, "validate_only": False, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1}]})
    assert updated.error_code == 0
    epoch, levels = await level()
    assert epoch > 0 and levels == {"transaction.version": 2}
