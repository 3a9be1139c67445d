"""Hostile input: malformed, truncated, lying and oversized frames on both faces.

The decoders are fuzzed directly (every Kafka API version the gateway advertises, from valid
requests mutated the ways a hostile or broken peer would: cut short, bytes overwritten, huge
lengths written in, junk) and through a live gateway process: after each bad frame that
connection is answered or closed, the process is alive, and another client is still served.
Examples are derandomized and counted, so the run takes the same time on every machine.
"""

from __future__ import annotations

import base64
import io
import socket
import struct
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from gateway.formats.frames import parse
from gateway.formats.records import build_batch
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, load_handlers, lookup, supported
from gateway.kafka.errors import MalformedRequest
from gateway.pb import gateway_pb2 as pb

load_handlers()
st.register_type_strategy(
    Records, st.one_of(st.binary(max_size=64), st.just(build_batch([(b"k", b"v", [("h", b"1")])]))).map(Records)
)

VERSIONS = [(r.api_key, v) for r in supported() for v in range(r.min_version, r.max_version + 1)]
# lengths a liar writes: int32 max and -2, a large int16, uvarints of four billion and of 2**63
LIES = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x7f\xff", b"\xff\xff\xff\xff\x0f",
        b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f", b"\x00\x10\x00\x00"]
FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def encode(req: Any, correlation_id: int = 7) -> bytes:
    """Header and body of a request, without the size prefix."""
    buf = io.BytesIO()
    entity_writer(type(req))(buf, req)
    head = struct.pack(">hhih", req.__api_key__, req.__version__, correlation_id, 4) + b"fuzz"
    if req.__header_schema__.__flexible__:
        head += b"\x00"
    return head + buf.getvalue()


@st.composite
def hostile_requests(draw: st.DrawFn) -> bytes:
    """A valid request of some advertised API version, then damaged (or left whole)."""
    key, version = draw(st.sampled_from(VERSIONS))
    data = bytearray(encode(draw(st.from_type(codec.request_class(key, version)))))
    how = draw(st.sampled_from(["whole", "cut", "overwrite", "lie", "insert", "junk"]))
    at = draw(st.integers(8, max(8, len(data))))  # past api key, version, correlation id
    if how == "cut":
        del data[at:]
    elif how == "overwrite":
        chunk = draw(st.binary(min_size=1, max_size=8))
        data[at:at + len(chunk)] = chunk
    elif how == "lie":
        data[at:at + 4] = draw(st.sampled_from(LIES))
    elif how == "insert":
        data[at:at] = draw(st.binary(min_size=1, max_size=16))
    elif how == "junk":
        data[8:] = draw(st.binary(max_size=256))
    return bytes(data)


def decode(frame: bytes) -> str:
    """What the listener does with a frame before any handler runs: 'decoded', 'unsupported' or
    'malformed' (the connection is closed). Anything else escaping would be a bug."""
    try:
        header = codec.read_header(frame)
        if lookup(header.api_key, header.api_version) is None:
            return "unsupported"
        codec.decode_request(frame, header)
    except MalformedRequest:
        return "malformed"
    return "decoded"


@settings(FUZZ, max_examples=800)
@given(hostile_requests())
def test_kafka_decoder_refuses_what_it_cannot_read_and_nothing_else_escapes(frame):
    decode(frame)


def test_kafka_decoder_takes_every_advertised_request_whole():
    for key, version in VERSIONS:
        req = codec.build(codec.request_class(key, version))
        assert decode(encode(req)) == "decoded", (ApiKey(key).name, version)


@settings(FUZZ, max_examples=1500)
@given(st.binary(max_size=512))
def test_native_decoder_refuses_junk_with_invalid_request(payload):
    try:
        parse(pb.Request(), payload)
    except Exception as exc:
        assert type(exc).__name__ == "InvalidRequest", exc


# -- a live gateway -------------------------------------------------------------------------------


def _scalar(field: Any) -> st.SearchStrategy[Any]:
    fd = field
    t = fd.type
    if t in (fd.TYPE_STRING,):
        return st.text(max_size=24)
    if t == fd.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.just(build_batch([(None, b"v", [])])))
    if t == fd.TYPE_BOOL:
        return st.booleans()
    if t == fd.TYPE_ENUM:
        return st.sampled_from([v.number for v in fd.enum_type.values] + [99])
    if t in (fd.TYPE_INT32, fd.TYPE_SINT32, fd.TYPE_SFIXED32):
        return st.integers(-(2**31), 2**31 - 1)
    if t in (fd.TYPE_UINT32, fd.TYPE_FIXED32):
        return st.integers(0, 2**32 - 1)
    if t in (fd.TYPE_UINT64, fd.TYPE_FIXED64):
        return st.one_of(st.integers(0, 8), st.integers(0, 2**64 - 1))
    return st.one_of(st.integers(-2, 8), st.integers(-(2**63), 2**63 - 1))


@st.composite
def native_messages(draw: st.DrawFn, cls: Any = pb.Request, depth: int = 0) -> Any:
    """Any message of the native protocol with any field values (one body for a Request)."""
    msg = cls()
    fields = list(cls.DESCRIPTOR.fields)
    if cls is pb.Request:
        body = draw(st.sampled_from([f for f in fields if f.containing_oneof is not None]))
        fields = [f for f in fields if f.containing_oneof is None] + [body]
    for f in fields:
        if f.containing_oneof is not None and cls is not pb.Request and not draw(st.booleans()):
            continue
        if f.message_type is not None:
            if depth > 2:
                continue
            sub = native_messages(getattr(pb, f.message_type.name), depth + 1)
            if f.is_repeated:
                getattr(msg, f.name).extend(draw(st.lists(sub, max_size=3)))
            else:
                getattr(msg, f.name).CopyFrom(draw(sub))
        elif f.is_repeated:
            getattr(msg, f.name).extend(draw(st.lists(_scalar(f), max_size=4)))
        else:
            setattr(msg, f.name, draw(_scalar(f)))
    return msg


class Live:
    """A gateway process and a well-behaved connection to it, checked after every hostile frame."""

    def __init__(self, gp: Any) -> None:
        self.gp = gp
        self.healthy = socket.create_connection(("127.0.0.1", gp.kafka_port), timeout=10)
        self.outcomes: dict[str, int] = {}
        self.previous = b""  # the frame before: its error may reach the log after the next one is sent
        self.log: list[str] = []  # the gateway's output, read all along so its pipe never fills
        self._reader = threading.Thread(target=lambda: self.log.extend(gp.proc.stdout), daemon=True)
        self._reader.start()

    def hostile(self, port: int, data: bytes, wait: float = 0.25) -> None:
        """Send `data` on a new connection and wait up to `wait` for an answer or the close."""
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            outcome = "answered"
            try:
                s.sendall(data)
                s.settimeout(wait or None)
                if not wait:
                    outcome = "no answer asked"
                elif s.recv(4) == b"":
                    outcome = "closed"
            except TimeoutError:
                outcome = "waiting"  # a long poll or a rebalance in progress: not a fault
            except ConnectionError:
                outcome = "closed"
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        assert self.gp.proc.poll() is None, "the gateway process died"
        first = next((i for i, line in enumerate(self.log) if " ERROR " in line), None)
        assert first is None, (f"after {self.previous[:300]!r} or {data[:300]!r} the gateway logged:\n"
                               + "".join(self.log[first:first + 40]))
        self.previous = data
        versions = codec.build(codec.request_class(ApiKey.API_VERSIONS, 0))
        payload = encode(versions, correlation_id=1)
        self.healthy.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _recv(self.healthy, 4))[0]
        assert struct.unpack(">i", _recv(self.healthy, size)[:4])[0] == 1


def _recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "the healthy connection was closed"
        out += chunk
    return out


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    from tests.conftest import GatewayProcess

    gp = GatewayProcess(tmp_path_factory.mktemp("fuzz") / "data")
    gp.start()
    live = Live(gp)
    try:
        yield live
    finally:
        gp.kill()
        print("hostile frames:", live.outcomes)


@settings(FUZZ, max_examples=300)
@given(frame=hostile_requests(), size_lie=st.sampled_from([0, 0, 0, 0, -5, 3, 1 << 30, -(1 << 31)]))
def test_live_kafka_listener_survives_hostile_frames(live, frame, size_lie):
    size = len(frame) if size_lie == 0 else (len(frame) + size_lie if abs(size_lie) < 10 else size_lie)
    live.hostile(live.gp.kafka_port, struct.pack(">i", size) + frame)


@settings(FUZZ, max_examples=250)
@given(msg=native_messages(), junk=st.one_of(st.none(), st.binary(max_size=64)))
def test_live_native_listener_survives_hostile_frames(live, msg, junk):
    payload = msg.SerializeToString() if junk is None else junk
    answered = junk is not None or msg.request_id != 0  # request id 0 asks for no answer
    live.hostile(live.gp.native_port, struct.pack(">I", len(payload)) + payload, wait=0.25 if answered else 0.0)


# -- SASL messages ------------------------------------------------------------------------------


@pytest.fixture
async def security(redis_url):
    from gateway.domain.security import SecurityService
    from gateway.store import Store

    store = Store.open(redis_url)
    service = SecurityService(store, enabled=True)
    await service.set_user("alice", "alice-secret")
    yield service
    await store.close()


def _scram_first() -> st.SearchStrategy[bytes]:
    text = st.text(max_size=12)
    crafted = st.builds(lambda flag, user, nonce, extra: f"{flag},,n={user},r={nonce}{extra}".encode(),
                        st.sampled_from(["n", "y", "p=tls-unique", "x"]), st.sampled_from(["alice", "=2C", "=4"]) | text,
                        text, st.sampled_from(["", ",tokenauth=true", ",m=x", ",e"]) | text)
    return st.one_of(st.binary(max_size=64), crafted)


@settings(FUZZ, max_examples=300)
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]), first=_scram_first(), data=st.data())
async def test_sasl_exchanges_refuse_junk_with_authentication_failed(security, mechanism, first, data):
    from gateway.errors import AuthenticationFailed

    exchange = security.sasl(mechanism)
    try:
        reply = await exchange.step(first)
        nonce = reply.decode().split(",")[0]
        proof = data.draw(st.one_of(st.binary(max_size=48).map(lambda b: base64.b64encode(b).decode()),
                                    st.text(max_size=20)))
        binding = data.draw(st.sampled_from(["biws", "eSws", "", "!!"]))
        final = data.draw(st.sampled_from([f"c={binding},{nonce},p={proof}", f"{nonce},p={proof}", proof]))
        await exchange.step(final.encode())
    except AuthenticationFailed:
        return
    assert exchange.principal is None or mechanism == "PLAIN" and first == b"\0alice\0alice-secret"
