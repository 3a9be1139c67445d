"""Generated wire traffic (issue 29): random but well-typed requests, built from kio's schemas with
hypothesis, sent to the real Kafka 4.4 broker and to the gateway, and the answers compared field by
field (tests/kafka_differences.py sets aside what must differ); then malformed ones (versions neither
serves, nulls where none are allowed, arrays that lie about their length, cut-short bodies), where
the gateway must answer what Kafka answers or close the connection where Kafka closes it, and keep
serving everyone else.

Field values come from small pools that make the answers interesting: topics that exist on both
brokers (with records) or on neither, partitions in and out of range, special and out-of-range
offsets, timestamps and epochs, group and transactional ids. Requests are derandomized (the seed
is logged) and counted, so a run takes the same time on every machine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.static.primitive import Records

from gateway.formats.records import build_batch
from gateway.kafka import codec
from tests.conftest import flush, kafka_bootstrap, running_gateway, test_config
from tests.differential import Side, coordinators_ready, side
from tests.kafka_differences import ANSWERS_INSTEAD_OF_CLOSING, WIRE_FOUND, differences, normalise, plain
from tests.kafka_wire import build_request, decode, frame, read_response, request
from tests.test_kafka_differential import T0, create, produce

pytestmark = [pytest.mark.jvm, pytest.mark.kafka]
log = logging.getLogger(__name__)

# APIs that change nothing a later answer depends on, so each answer depends on the request and the
# pool alone (requests that write, and so everything after them, are the corpus's)
API_KEYS = (1, 2, 3, 9, 10, 12, 13, 14, 15, 16, 18, 29, 32, 60, 69, 75, 77)
EXAMPLES = 150  # requests per API (both sides), about 2,500 in all
SEED = 29
ANSWER_WITHIN = 5.0  # every wait a request asks for is far shorter

TOPIC = "wire-pool"  # exists on both, 2 partitions, records 0-5 in partition 0
POOL: dict[str, list[Any]] = {
    "topic": [TOPIC, "wire-absent"],  # empty names: the corpus's *_empty_* scenarios
    "partition": [0, 1, 2, -1],
    "offset": [-3, -2, -1, 0, 2, 5, 6, 1 << 40],
    "timestamp": [-3, -2, -1, 0, T0, T0 + 1000, T0 + 10_000],
    "epoch": [-1, 0, 3],
    "group": ["wire-group", "wire-other"],
    "int": [-1, 0, 1, 1000],
}


# what every client sends in these fields (brokers' own fetches and fetch sessions aside)
FIXED = {"allow_auto_topic_creation": False, "replica_id": -1, "session_id": 0, "session_epoch": -1, "cluster_id": None, "rack_id": ""}


def _values(cls: type[Any], draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    """Values for every field of a kio request class, drawn from the pools by the field's name."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        shape = classify_field(f)
        if isinstance(shape, (EntityField, EntityTupleField)):
            n = draw(st.integers(0, 2 if depth < 2 else 1))
            many = shape.is_array
            made = _distinct([_values(shape.type_, draw, depth + 1) for _ in range(n if many else 1)])
            out[f.name] = made if many else made[0]
        else:
            out[f.name] = _scalar(f, draw)
    return out


def _distinct(items: list[Any]) -> list[Any]:
    """Entries of an array with distinct keys (an entity's first field): a topic or partition named
    twice in one request is a client's bug that Kafka answers in its own map's way."""
    seen: dict[Any, Any] = {}
    for item in items:
        seen.setdefault(next(iter(item.values()), None) if isinstance(item, dict) else item, item)
    return list(seen.values())


def _scalar(f: dataclasses.Field[Any], draw: st.DrawFn) -> Any:
    kind, name = f.metadata.get("kafka_type", ""), f.name
    if classify_field(f).is_array:
        return _distinct([_one(kind, name, draw) for _ in range(draw(st.integers(0, 3)))])
    if name in FIXED:
        return FIXED[name]
    return _one(kind, name, draw)


def _one(kind: str, name: str, draw: st.DrawFn) -> Any:
    if kind == "string":
        if "topic" in name or name == "name" or "resource_name" in name:
            return draw(st.sampled_from(POOL["topic"]))
        if "group" in name or "transactional" in name or "key" in name:
            return draw(st.sampled_from(POOL["group"]))
        return draw(st.sampled_from(["", "x", "range", "consumer", "User:alice", "*"]))
    if kind == "uuid":
        return draw(st.sampled_from([uuid.UUID(int=0), uuid.UUID(int=42)]))
    if kind == "records":
        return Records(build_batch([(b"k", b"w", [])], timestamp=T0 + 5))
    if kind == "bytes":
        return draw(st.sampled_from([b"", b"\x00\x01"]))
    if kind == "bool":
        return draw(st.booleans())
    if kind in ("timedelta_i32", "timedelta_i64"):
        return draw(st.sampled_from([0, 50]))  # a Fetch's wait, a timeout: short, as answers are awaited
    if name == "acks":
        return draw(st.sampled_from([-1, 1, 2]))  # acks=0 gets no answer to compare
    if kind == "float64":
        return 0.0
    if "partition" in name or name == "index":
        return draw(st.sampled_from(POOL["partition"]))
    if "offset" in name:
        return draw(st.sampled_from(POOL["offset"]))
    if "timestamp" in name:
        return draw(st.sampled_from(POOL["timestamp"]))
    if "epoch" in name or "generation" in name:
        return draw(st.sampled_from(POOL["epoch"]))
    if name == "isolation_level":
        return draw(st.sampled_from([0, 1]))
    if kind == "int8":
        return draw(st.integers(-1, 5))
    if kind == "int16":
        return draw(st.sampled_from([-1, 0, 1, 3]))
    return draw(st.sampled_from(POOL["int"]))


@st.composite
def requests(draw: st.DrawFn, versions: list[tuple[int, int]]) -> Any:
    key, version = draw(st.sampled_from(versions))
    cls = codec.request_class(key, version)
    assert cls is not None
    return codec.build(cls, _values(cls, draw))


class Peer:
    """One broker's end of the traffic: a connection, opened again after the broker closes it."""

    def __init__(self, s: Side) -> None:
        self.side = s
        self.conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def exchange(self, data: bytes, api_key: int, version: int) -> Any:
        """The normalised answer to one framed request, or "closed"."""
        if self.conn is None:
            self.conn = await self.side.connect()
        reader, writer = self.conn
        writer.write(data)
        try:
            payload = await asyncio.wait_for(read_response(reader), ANSWER_WITHIN)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.conn = None
            return "closed"
        except TimeoutError:
            writer.close()
            self.conn = None
            return "no answer"
        if payload[4:] == b"\x00\x23":  # the correlation id and UNSUPPORTED_VERSION alone
            return ANSWERS_INSTEAD_OF_CLOSING.where
        try:
            _, resp = decode(api_key, version, payload)
        except Exception:
            return f"an answer kio cannot read as {api_key} v{version}: {payload.hex()}"
        answer = plain(resp)
        if api_key == 16:  # the shared Kafka broker lists the corpus's groups too: these requests' own
            answer["groups"] = [g for g in answer["groups"] if g["group_id"] in POOL["group"]]
        return normalise(answer, unordered=True)


@pytest.fixture(scope="module")
async def peers(kafka_broker: Any, redis_server: str) -> Any:
    """Kafka and a gateway, each with the pool's topic and records."""
    flush(redis_server)
    async with running_gateway(test_config(redis_server)) as gw:
        async with side("kafka", kafka_broker.bootstrap) as k, side("gateway", kafka_bootstrap(gw)) as g:
            for s in (k, g):
                await coordinators_ready(s)
                await create(s, TOPIC, 2)
                await produce(s, TOPIC, 0, 3, 0, T0)
                await produce(s, TOPIC, 0, 3, 3, T0 + 2000)
            yield Peer(k), Peer(g)


async def _versions(peers: tuple[Peer, Peer]) -> list[tuple[int, int]]:
    """Every (api key, version) of API_KEYS that both brokers serve."""
    ranges = []
    for p in peers:
        resp = await p.side.call(18, 3, {"client_software_name": "wire", "client_software_version": "1"})
        ranges.append({k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]})
    kafka, gateway = ranges
    return [(key, v) for key in API_KEYS if key in kafka and key in gateway
            for v in range(max(kafka[key][0], gateway[key][0]), min(kafka[key][1], gateway[key][1]) + 1)
            if (key, v) >= (3, 4) or key != 3]  # Metadata v0-3 create what they name: the corpus's


def _wire_found(key: int, diff: list[str]) -> list[str]:
    """The lines of `diff` no open finding of WIRE_FOUND covers (by api key and path, any index)."""
    return [d for d in diff if (key, re.sub(r"\[\d+\]", "", d.split(": kafka")[0])) not in WIRE_FOUND]


async def test_generated_requests_get_kafkas_answers(peers: tuple[Peer, Peer]) -> None:
    versions = await _versions(peers)
    log.info("generated wire traffic: seed %d, %d API versions, %d examples", SEED, len(versions),
             EXAMPLES * len(API_KEYS))
    sent: list[Any] = []
    FUZZ = settings(max_examples=EXAMPLES * len(API_KEYS), derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))

    @FUZZ
    @given(requests(versions))
    def collect(req: Any) -> None:
        sent.append(req)

    collect()
    unexplained: dict[str, str] = {}
    for i, req in enumerate(sent):
        key, version = req.__api_key__, req.__version__
        data = request(req, i)
        kafka, gateway = [await p.exchange(data, key, version) for p in peers]
        for d in _wire_found(key, differences(kafka, gateway)):
            unexplained.setdefault(f"{key} v{version} {d.split(':')[0]}", f"{req!r}\n  {d}")
    assert len(sent) >= 2500
    assert not unexplained, "\n".join(unexplained.values())


def _malformed() -> list[tuple[str, int, int, bytes]]:
    """(what, api key, version, framed request) for requests no broker should take as they are."""
    out = []
    meta = build_request(3, 12, {"topics": [{"name": TOPIC}]})
    body = request(meta, 1)[4 + 8 + 2 + 4 + 1:]  # the body alone, after a flexible header
    out.append(("metadata v99", 3, 12, frame(3, 99, 1, body, flexible_header=True)))
    out.append(("produce v2 (below Kafka 4's)", 0, 2, frame(0, 2, 1, b"\xff\xff\x00\x01\x00\x00\x13\x88\x00\x00\x00\x00")))
    out.append(("api versions v99", 18, 0, frame(18, 99, 1, b"", flexible_header=True)))
    out.append(("unknown api key", 3, 12, frame(999, 0, 1, b"")))
    # a null topic name in Metadata v1 (non-flexible, name not nullable)
    out.append(("null topic name", 3, 1, frame(3, 1, 1, struct.pack(">ih", 1, -1))))
    # an array of two billion topics with none behind it
    out.append(("lying array", 3, 1, frame(3, 1, 1, struct.pack(">i", 2_000_000_000))))
    out.append(("cut short", 2, 5, frame(2, 5, 1, struct.pack(">iii", -1, 0, 1))))
    out.append(("negative string length", 10, 0, frame(10, 0, 1, struct.pack(">h", -7))))
    return out


async def test_malformed_requests_are_answered_or_closed_as_kafka_does(peers: tuple[Peer, Peer]) -> None:
    unexplained = []
    for what, key, version, data in _malformed():
        kafka, gateway = [await p.exchange(data, key, version) for p in peers]
        log.info("%s: kafka %s, gateway %s", what, kafka, gateway)
        if kafka == "closed" or gateway == "closed":
            if kafka != gateway and (kafka, gateway) != ("closed", ANSWERS_INSTEAD_OF_CLOSING.where):
                unexplained.append(f"{what}: kafka {kafka!r}, gateway {gateway!r}")
        else:
            unexplained += [f"{what}: {d}" for d in _wire_found(key, differences(kafka, gateway))]
        # and the gateway keeps serving others
        async with side("gateway", peers[1].side.bootstrap) as other:
            assert (await other.call(3, 12, {"topics": [{"name": TOPIC}]}))["topics"][0]["error_code"] == 0
    assert not unexplained, "\n".join(unexplained)
