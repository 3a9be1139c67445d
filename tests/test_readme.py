"""The README's code runs as written: each fenced block is read from README.md itself, so the text a
reader copies is the text tested, and every example is run by a test with its header's command.

The one change made to a block's text: the default addresses a user has (Kafka's `localhost:9092`,
the native `gateway://localhost:6650`, the admin `http://127.0.0.1:8080`) become the test gateway's,
since those ports may be taken where the suite runs. Beyond that:

- Python programs run as a file in a process of their own, and their effect is checked.
- Spark fragments run in the suite's Spark session, with the context the README names given by a
  named preamble (`spark`, and for the sink `results` and `checkpoint`).
- The security shell block runs in bash with the virtualenv's `gateway` on PATH, in a fresh
  directory (its `./data`), with the listeners' ports and the admin URL set through the environment
  fallbacks the README describes (GATEWAY_KAFKA_PORT, GATEWAY_NATIVE_PORT, GATEWAY_ADMIN_PORT,
  GATEWAY_ADMIN_URL), a password on stdin for the command that asks for one, and `set -e` before it.
- The MirrorMaker 2 block (`sh`, in bash) also gets Kafka's and its Connect worker's addresses, and
  fresh topic and group names (the Kafka broker lives as long as the run); for the way back, its
  clusters' addresses and aliases swap, as the README says.
- The tier store block runs in bash against s3s-fs (a real S3-compatible server), its endpoint in
  place of `http://localhost:9000` and its credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
- Not run here: `./dev serve` serves until Ctrl-C and `./dev test` is the whole suite (CI runs it);
  the `gateway serve [...]` synopsis is not a command (its flags are checked against the CLI's).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.client import AuthorizationFailed, Client
from gateway.server.gateway import Gateway
from gateway.store.embedded import EmbeddedRedis, free_port
from tests.conftest import (
    EXAMPLES,
    admin_url,
    eventually,
    in_spark,
    kafka_bootstrap,
    native_url,
    run_program,
    running_gateway,
    test_config,
)
from tests.kafka_clients import create_topic, produce, topic_config
from tests.kafka_connect import ConnectWorker, start_workers
from tests.kafka_jvm import unique

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

NOT_RUN = {
    "./dev serve": "serves until Ctrl-C; ./dev test is the suite itself, which CI runs",
    "gateway serve [": "a synopsis of the flags, not a command",
}
RUN = {
    "from confluent_kafka import Producer": "test_kafka_producer_snippet",
    'create_producer("orders")': "test_native_snippet_receives_what_it_sent_on_every_run",
    "send_watermark": "test_watermark_snippet",
    "DeadLetterPolicy(": "test_dead_letter_snippet",
    "subscribe_pattern(": "test_pattern_snippet",
    "chunking_enabled=True": "test_chunking_snippet",
    'mode="key_shared"': "test_key_shared_snippet",
    "gateway.client.blocking import Client": "test_blocking_snippet",
    "register(spark)": "test_spark_snippets",
    "F.window": "test_spark_snippets",
    'writeStream.format("gateway")': "test_spark_snippets",
    "GATEWAY_ADMIN_TOKEN=": "test_security_snippet",
    "--object-store": "test_tier_store_on_s3_snippet",
    "AvroSerializer(registry": "test_schema_registry_snippet",
    "schema=AvroSchema(PAYMENT)": "test_native_schema_snippet",
    "MirrorSourceConnector": "test_moving_from_kafka_snippet",
    'readStream.format("kafka")': "test_spark_kafka_snippet",
    '"remote.storage.enable": "true"': "test_tiered_storage_snippet",
}


def blocks() -> list[tuple[str, str]]:
    """README.md's fenced code blocks: (info string, text)."""
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)


def block(marker: str) -> str:
    """The one README block that contains `marker`."""
    found = [text for _, text in blocks() if marker in text]
    assert len(found) == 1, f"README.md has {len(found)} blocks with {marker!r}, not one"
    return found[0]


def localized(text: str, kafka: str, native: str, admin: str) -> str:
    """The snippet with the default addresses replaced by the test's: the only change made to it."""
    ours = {"localhost:9092": kafka, "gateway://localhost:6650": native, "http://127.0.0.1:8080": admin}
    return re.sub("|".join(map(re.escape, ours)), lambda m: ours[m.group()], text)


def on(gw: Gateway, text: str) -> str:
    """The snippet against the in-process gateway `gw`."""
    return localized(text, kafka_bootstrap(gw), native_url(gw), admin_url(gw))


async def run_snippet(text: str, gw: Gateway, tmp_path: Path, timeout: float = 60.0) -> str:
    """Run a README program as a user would: saved to a file, run by Python; returns what it printed
    on standard output. Standard error is the libraries' own logs (librdkafka's, at its default
    level, say a client was given a telemetry instance id), shown only if the program fails."""
    program = tmp_path / "snippet.py"
    program.write_text(on(gw, text))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    with (tmp_path / "snippet.stderr").open("w+b") as err:
        code, out = await run_program(sys.executable, str(program), timeout=timeout, cwd=tmp_path, env=env,
                                      stderr=err)
        err.seek(0)
        assert code == 0, out + err.read().decode()
    return out


def test_every_block_is_run_or_said_why_not() -> None:
    for info, text in blocks():
        claims = [m for m in [*RUN, *NOT_RUN] if m in text]
        assert len(claims) == 1, f"a ```{info} block is claimed by {claims}, not by one test or reason:\n{text}"
        assert info in ("python", "sh"), f"a ```{info} block: python or sh, so readers see it as code"
    tests = set(globals())
    assert set(RUN.values()) <= tests


def test_every_example_is_run_by_a_test_with_its_header_command() -> None:
    """run_example runs the command of the example's header; a test module names each example it runs."""
    runners = [p.read_text() for p in TESTS.glob("test_*.py")]
    runners = [text for text in runners if "run_example(" in text]
    for script in sorted(p.name for p in EXAMPLES.glob("*.py")):
        assert any(f'"{script}"' in text for text in runners), f"no test runs examples/{script} (with run_example)"


@pytest.mark.kafka
async def test_kafka_producer_snippet(gateway: Gateway, tmp_path: Path) -> None:
    await run_snippet(block("from confluent_kafka import Producer"), gateway, tmp_path)
    async with await Client.connect(native_url(gateway)) as client:
        [msg] = [m async for m in client.read_range("orders", 0, 0)]
    assert (msg.key, msg.value) == (b"customer-7", b"hello")


async def test_native_snippet_receives_what_it_sent_on_every_run(gateway: Gateway, tmp_path: Path) -> None:
    """It subscribes before sending, so the first run (which creates the subscription at the end of
    the topic) gets its message as the later ones do."""
    snippet = block('create_producer("orders")')
    for run in range(2):
        out = await run_snippet(snippet, gateway, tmp_path)
        assert out == f"sent orders-0@{run}, received b'hello' at orders-0@{run}\n"


@pytest.mark.kafka
async def test_tiered_storage_snippet(redis_url: str, tmp_path: Path) -> None:
    """Its records leave Redis for the tier store once a tiering pass copies them, and read back whole."""
    from tests.kafka_clients import consume

    cfg = test_config(redis_url, tier_store=str(tmp_path / "tier"), tier_interval=3600)
    async with running_gateway(cfg) as gw:
        assert await run_snippet(block('"remote.storage.enable": "true"'), gw, tmp_path) == "produced 3000 clicks\n"
        assert gw.tiering is not None and await gw.tiering.tier_pass() > 900_000
        local_start, highest = await gw.services.log.tier_bounds("clicks", 0)
        assert 0 < local_start <= highest + 1
        got = await consume("kafka-python", kafka_bootstrap(gw), "clicks", 0, 0, 3000)
        assert [r[3][:4] for r in got] == [b"%04d" % i for i in range(3000)]


@contextlib.asynccontextmanager
async def registry_snippet(redis_url: str, tmp_path: Path, marker: str) -> AsyncIterator[tuple[Gateway, str, str]]:
    """A gateway serving the Schema Registry, its URL, and what the README block with `marker`
    printed, run against both."""
    async with running_gateway(test_config(redis_url, schema_registry_port=free_port())) as gw:
        registry = f"http://127.0.0.1:{gw.listeners['schema_registry'].port}"
        text = block(marker).replace("http://localhost:8081", registry)
        yield gw, registry, await run_snippet(text, gw, tmp_path)


@pytest.mark.kafka
async def test_schema_registry_snippet(redis_url: str, tmp_path: Path) -> None:
    """The Avro record comes back decoded, through a schema the registry holds afterwards."""
    async with registry_snippet(redis_url, tmp_path, "AvroSerializer(registry") as (gw, _, out):
        assert out == "{'id': 'p-1', 'amount': 9.5}\n"
        assert gw.services is not None
        assert [v.version for v in (await gw.services.schemas.fresh()).versions("payments-value")] == [1]


@pytest.mark.kafka
async def test_native_schema_snippet(redis_url: str, tmp_path: Path) -> None:
    """The typed native round trip, whose record confluent-kafka's AvroDeserializer reads too."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tests.kafka_clients import consume

    async with registry_snippet(redis_url, tmp_path, "schema=AvroSchema(PAYMENT)") as (gw, registry, out):
        assert out == "{'id': 'p-2', 'amount': 20.0}\n"
        [(_, _, _, raw)] = await consume("confluent", kafka_bootstrap(gw), "payments", 0, 0, 1)
        decode = AvroDeserializer(SchemaRegistryClient({"url": registry}))
        ctx = SerializationContext("payments", MessageField.VALUE)
        assert await asyncio.to_thread(decode, raw, ctx) == {"id": "p-2", "amount": 20.0}


async def test_key_shared_snippet(gateway: Gateway, tmp_path: Path) -> None:
    """Each key's messages in order at one worker, on every run (the last consumer unsubscribes)."""
    for _ in range(2):
        lines = (await run_snippet(block('mode="key_shared"'), gateway, tmp_path)).splitlines()
        assert len(lines) == 4
        for k, line in enumerate(lines):
            key, rest = line.split(" ", 1)
            workers, values = rest.split("} ")
            assert key == f"account-{k}" and workers.count("worker-") == 1
            assert values == repr([f"payment {n}" for n in range(k, 12, 4)])
    assert not gateway.services.subscriptions.active("payments", "ledger")


async def test_blocking_snippet(gateway: Gateway, tmp_path: Path) -> None:
    for _ in range(2):  # subscribed before sending, as the async snippet
        assert await run_snippet(block("gateway.client.blocking import Client"), gateway, tmp_path) == \
            "b'hello from a script'\n"


async def test_watermark_snippet(gateway: Gateway, tmp_path: Path) -> None:
    lines = (await run_snippet(block("send_watermark"), gateway, tmp_path)).splitlines()
    watermark = lines[0]  # on_watermark, once the first reading is acknowledged: the sensor's
    assert watermark.isdigit(), lines
    # then last_watermark, a late reading, and the watermark at that reading (after the sensor's W_SET);
    # on_watermark may print None among them, once the sensor went idle
    assert [line for line in lines if line != "None"] == [watermark, watermark, "b'19.0' True", watermark]


async def test_pattern_snippet(gateway: Gateway, tmp_path: Path) -> None:
    assert await run_snippet(block("subscribe_pattern("), gateway, tmp_path) == "sensors-garden b'21.5'\n"


@pytest.mark.kafka
async def test_chunking_snippet(gateway: Gateway, tmp_path: Path) -> None:
    assert await run_snippet(block("chunking_enabled=True"), gateway, tmp_path) == "True 21\n"


async def test_dead_letter_snippet(gateway: Gateway, tmp_path: Path) -> None:
    out = await run_snippet(block("DeadLetterPolicy("), gateway, tmp_path)
    assert out.splitlines() == ["payments 0", "payments-settle-RETRY 1", "payments-settle-RETRY 2",
                                "payments-settle-RETRY 3", "b'card declined' b'payments' b'4'"]


def run_to_end(query: Any) -> None:
    """A README streaming query run until it has processed what its source holds, then stopped."""
    try:
        query.processAllAvailable()
    finally:
        query.stop()


@pytest.mark.spark
@pytest.mark.timeout(300)
async def test_spark_snippets(spark: Any, gateway: Gateway, client: Client, tmp_path: Path) -> None:
    """The source, the watermark filter and the sink, in order in one namespace, as a program would
    hold them; the sink's query runs until it has copied what the source read."""
    producer = await client.create_producer("events")
    for i in range(3):
        await producer.send(f"e{i}".encode(), key=b"k")
    namespace: dict[str, Any] = {"spark": spark}  # the SparkSession the section assumes

    def run() -> None:
        exec(on(gateway, block("register(spark)")), namespace)
        exec(on(gateway, block("F.window")), namespace)
        namespace["results"] = namespace["events"]  # any streaming DataFrame with a key and a value
        namespace["checkpoint"] = str(tmp_path / "checkpoint")
        exec(on(gateway, block('writeStream.format("gateway")')), namespace)
        run_to_end(namespace["query"])

    await in_spark(spark, run)
    assert namespace["windows"].isStreaming and namespace["windows"].columns == ["window", "count"]
    [info] = await client.list_partitions("results")
    copied = [(m.key, m.value) async for m in client.read_range("results", 0, 0)]
    assert copied == [(b"k", f"e{i}".encode()) for i in range(3)] and info.last_stable_offset == info.high_watermark


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.apps
@pytest.mark.timeout(300)
async def test_spark_kafka_snippet(spark: Any, gateway: Gateway, tmp_path: Path) -> None:
    """Spark's own Kafka source and sink as the README shows them, on the gateway's Kafka port."""
    bs = kafka_bootstrap(gateway)
    for topic in ("clicks", "clicks-copy"):
        await create_topic(bs, topic)
    await produce("confluent", bs, "clicks", [(b"k", f"c{i}".encode()) for i in range(3)])
    namespace: dict[str, Any] = {"spark": spark, "checkpoint": str(tmp_path / "checkpoint")}

    def run() -> None:
        exec(on(gateway, block('readStream.format("kafka")')), namespace)
        run_to_end(namespace["copied"])

    await in_spark(spark, run)
    async with await Client.connect(native_url(gateway)) as client:
        copied = [(m.key, m.value) async for m in client.read_range("clicks-copy", 0, 0)]
    assert copied == [(b"k", f"c{i}".encode()) for i in range(3)]


async def test_security_snippet(tmp_path: Path) -> None:
    ports = {"GATEWAY_KAFKA_PORT": free_port(), "GATEWAY_NATIVE_PORT": free_port(), "GATEWAY_ADMIN_PORT": free_port()}
    kafka, url = f"127.0.0.1:{ports['GATEWAY_KAFKA_PORT']}", f"gateway://127.0.0.1:{ports['GATEWAY_NATIVE_PORT']}"
    admin = f"http://127.0.0.1:{ports['GATEWAY_ADMIN_PORT']}"
    (tmp_path / "security.sh").write_text(localized(block("GATEWAY_ADMIN_TOKEN="), kafka, url, admin))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update({k: str(v) for k, v in ports.items()}, GATEWAY_ADMIN_URL=admin,
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p))
    try:
        code, out = await run_program("bash", "-c", "set -e; . ./security.sh", timeout=120,
                                      stdin=b"admin-secret\n", cwd=tmp_path, env=env)
        assert code == 0, out
        answers = json_values(out)
        assert answers[0] == {"status": "ok", "redis": True}  # the health check the snippet waits on
        [token] = [a["token"] for a in answers if isinstance(a, dict) and a.get("user") == "alice"]
        for login in ({"username": "alice", "password": "s3cret"}, {"token": token}):
            async with await Client.connect(url, **login) as alice:
                await (await alice.create_producer("orders")).send(b"by alice")  # write on orders
                with pytest.raises(AuthorizationFailed):
                    await alice.subscribe("orders", "billing-eu")  # read on billing-* groups, not the topic
        async with await Client.connect(url, username="admin", password="admin-secret") as as_admin:
            await as_admin.subscribe("orders", "audit")  # a super user may do anything
    finally:  # the snippet leaves the gateway serving in the background
        if (pid := serving(tmp_path)) is not None:
            await stopped(pid)
        EmbeddedRedis(tmp_path / "data").stop_leftover()


def serving(cwd: Path) -> int | None:
    """The pid of the gateway that holds the data dir `./data` of `cwd`, if one still runs there."""
    try:
        pid = int((cwd / "data" / "gateway.lock").read_text().split()[2].rstrip(","))
        return pid if Path(os.readlink(f"/proc/{pid}/cwd")) == cwd.resolve() else None
    except (OSError, IndexError, ValueError):
        return None


def json_values(text: str) -> list[Any]:
    """The JSON objects printed among other lines (the gateway's, serving in the background)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) >= 0:
        try:
            value, at = decoder.raw_decode(text, at)
            values.append(value)
        except json.JSONDecodeError:
            at += 1
    return values


async def stopped(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM a process that is not our child and wait for its exit (its pidfd turns readable)."""
    fd = os.pidfd_open(pid)
    try:
        os.kill(pid, signal.SIGTERM)
        ready, _, _ = await asyncio.to_thread(select.select, [fd], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        assert ready, f"the gateway {pid} did not stop within {timeout}s of SIGTERM"
    finally:
        os.close(fd)



def mirrored(text: str, source: str, target: str, connect: str, topic: str, group: str, back: bool) -> str:
    """The README's MirrorMaker 2 block from `source` to `target` (Kafka's `kafka:9092` and the
    gateway's `localhost:9092` in the text) through the Connect cluster at `connect`, for `topic`
    and `group`; `back` swaps the clusters' aliases too, as the README's way back does."""
    ours = {"kafka:9092": source, "localhost:9092": target, "http://localhost:8083": connect,
            "payments": topic, "billing": group}
    if back:
        ours |= {'"source.cluster.alias": "kafka"': '"source.cluster.alias": "gateway"',
                 '"target.cluster.alias": "gateway"': '"target.cluster.alias": "kafka"'}
    return re.sub("|".join(map(re.escape, ours)), lambda m: ours[m.group()], text)


async def consume_group(bs: str, group: str, topic: str, count: int) -> list[bytes]:
    """`count` values read by a member of `group` subscribed to `topic`, its offsets committed
    before it leaves (as a consumer stopped for a move does)."""
    import confluent_kafka as ck

    def run() -> list[bytes]:
        consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                                "enable.auto.commit": False})
        values: list[bytes] = []
        try:
            consumer.subscribe([topic])
            while len(values) < count:
                msg = consumer.poll(60)
                assert msg is not None, f"{len(values)} of {count} records of {topic} within 60s"
                assert msg.error() is None, msg.error()
                values.append(msg.value())
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return values

    return await asyncio.to_thread(run)


async def group_offsets(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The committed offsets of `group` in `topic`, as the Admin API lists them."""
    import confluent_kafka as ck
    import confluent_kafka.admin as cka

    def run() -> dict[int, int]:
        admin = cka.AdminClient({"bootstrap.servers": bs})
        request = ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, p) for p in range(partitions)])
        listed = admin.list_consumer_group_offsets([request])[group].result(30)
        return {tp.partition: tp.offset for tp in listed.topic_partitions if tp.offset >= 0}

    return await asyncio.to_thread(run)


@pytest.mark.jvm
@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.apps
@pytest.mark.timeout(300)
async def test_moving_from_kafka_snippet(gateway: Gateway, kafka_broker: Any, tmp_path: Path) -> None:
    """MirrorMaker 2 (connect-mirror's connectors in Kafka Connect 4.4) from Kafka 4.4 to the
    gateway with the README's block, then back with the same block turned around: the topic with
    its config and records, and the group's offsets, so that the group's next member on the new
    cluster reads only what came after."""
    kafka, gw = kafka_broker.bootstrap, kafka_bootstrap(gateway)
    block_text = block("MirrorSourceConnector")
    for back, (source, target) in enumerate([(kafka, gw), (gw, kafka)]):
        topic, group = unique("payments"), unique("billing")
        await create_topic(source, topic, 2, **{"retention.ms": "86400000"})
        await produce("confluent", source, topic, [(b"k%d" % i, b"old-%d" % i) for i in range(40)])
        assert len(await consume_group(source, group, topic, 40)) == 40
        left_off = await group_offsets(source, group, topic, 2)
        assert sum(left_off.values()) == 40

        worker = ConnectWorker(tmp_path / f"connect-{back}", target, unique("mirror"),
                               settings={"exactly.once.source.support": "disabled"})
        try:
            await start_workers(worker)
            script = mirrored(block_text, source, target, worker.url, topic, group, bool(back))
            code, out = await run_program("bash", "-c", script, timeout=60)
            assert code == 0, out
            await eventually(lambda: _equal(group_offsets(target, group, topic, 2), left_off),  # noqa: B023
                             timeout=120, what="the group's offsets on the target")
            assert await topic_config(target, topic, "retention.ms") == "86400000"
            await produce("confluent", source, topic, [(b"k%d" % i, b"new-%d" % i) for i in range(10)])
            resumed = await consume_group(target, group, topic, 10)
            assert sorted(resumed) == sorted(b"new-%d" % i for i in range(10))
        finally:
            worker.kill()


async def _equal(value: Any, expected: object) -> bool:
    return bool(await value == expected)


@pytest.mark.slow
async def test_tier_store_on_s3_snippet(tmp_path: Path) -> None:
    """The user's store measured beside the local directory and s3s-fs, through the URL the snippet
    gives: every store's raw rows, and each tiered row with its ratio to its baseline of the same run
    (figures, not their size: nothing here is timed); Redis's memory for the tiered topic below the
    same bytes untiered, a tenth of it being kept in Redis."""
    from gateway.bench.s3_server import S3Server

    with S3Server(tmp_path / "s3") as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GATEWAY_"))}
        env.update({k: v for k, v in server.env.items() if k != "AWS_ENDPOINT_URL"},
                   PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
                   PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p))
        script = block("--object-store").replace("http://localhost:9000", server.endpoint)
        code, out = await run_program("bash", "-c", "set -e; " + script, timeout=300, cwd=tmp_path, env=env)
        assert code == 0, out
        for store in ("local dir", "S3 (s3s-fs)", f"s3://tier/gateway/ at {server.endpoint}"):
            for row in ("raw PUT", "raw ranged GET"):
                assert re.search(rf"^{re.escape(f'{row}, {store}')} ", out, re.M), out
            for row, baseline in [(re.escape("copy+trim by the tiering role"), "raw PUT"),
                                  ("remote fetch of the fully remote range", "raw ranged GETs of its segments"),
                                  (r"consume from start, \d+% remote", "consume from start, all in Redis"),
                                  ("produce with copying running", "produce, untiered topic")]:
                found = re.search(rf"^{row}, {re.escape(store)} .* (\d+\.\d\d)x of {re.escape(f'{baseline}, {store}')}$",
                                  out, re.M)
                assert found and float(found[1]) > 0, (row, store, out)
        memory = re.search(r"MEMORY USAGE ([\d.]+) GB\n.*MEMORY USAGE ([\d.]+) GB", out)
        assert memory and 0 < float(memory[1]) < float(memory[2]), out
