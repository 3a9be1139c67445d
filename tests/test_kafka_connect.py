"""Kafka Connect 4.4 in distributed mode on the gateway: its config, offset and status topics live
there, FileStreamSource and FileStreamSink move a file's lines through a topic with exactly-once
source support (KIP-618), a worker SIGKILLed mid-stream and restarted, a second worker joining;
the gateway itself SIGKILLed mid-stream and restarted, under the worker and under MirrorMaker 2
mirroring from Kafka 4.4. Also the worker's refusal of a config topic
that is not compacted, and of a worker that ACLs deny (or deny creating its missing internal topics),
compared with Kafka's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from gateway.server.gateway import Gateway
from tests.conftest import GatewayProcess, admin_url, eventually, kafka_bootstrap, run_program
from tests.kafka_clients import create_topic, produce, topic_config
from tests.kafka_connect import HERDER_FAILED, ConnectWorker, start_workers
from tests.kafka_jvm import tools, unique
from tests.sasl_pair import acls_listed, login, sasl_pair
from tests.test_readme import block, mirrored

pytestmark = [pytest.mark.jvm, pytest.mark.kafka, pytest.mark.slow, pytest.mark.apps]

SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
# three appends of a growing file: the worker is killed while it sends the second, the largest
LINES = [f"line-{i:05d}" for i in range(22000)]
CHUNKS = (LINES[:1000], LINES[1000:21000], LINES[21000:])


async def read_committed(bs: str, topic: str, count: int, to_end: bool = True, timeout: float = 90.0) -> list[str]:
    """The committed values of the one-partition `topic`, read until there are `count` of them (the
    consumer waits on its fetches, failing at `timeout`) and, `to_end`, on to the last stable offset,
    so that a value written twice shows."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[str] = []
        deadline = asyncio.get_running_loop().time() + timeout
        while len(values) < count or (to_end and await consumer.position(tp) < (await consumer.end_offsets([tp]))[tp]):
            assert asyncio.get_running_loop().time() < deadline, f"{len(values)} of {count} values in {timeout}s"
            got = await consumer.getmany(tp, timeout_ms=1000)
            values += [r.value.decode() for r in got.get(tp, [])]
        return values
    finally:
        await consumer.stop()


async def lines_through(worker: ConnectWorker, tmp_path: Path, interrupt: Callable[[str], Awaitable[None]],
                        boundary: dict[str, str] | None = None) -> tuple[str, Path]:
    """FileStreamSource with exactly-once support (by default a transaction a poll, of up to
    batch.size, 2000, lines; `boundary` may say otherwise) from a file appended to in CHUNKS,
    `interrupt(topic)` awaited once the largest append is written (it waits for what it needs);
    then the topic, read read_committed, holds every line once, in order. Returns the topic and the
    file."""
    topic, source_file = unique("lines"), tmp_path / "in.txt"
    append(source_file, CHUNKS[0])
    created = await worker.rest("POST", "/connectors", {"name": "src", "config": {
        "connector.class": SOURCE, "file": str(source_file), "topic": topic, "tasks.max": "1",
        "exactly.once.support": "required", **(boundary or {"transaction.boundary": "poll"})}})
    assert created.get("name") == "src", created
    assert await read_committed(worker.bootstrap, topic, len(CHUNKS[0])) == CHUNKS[0]
    append(source_file, CHUNKS[1])
    await interrupt(topic)
    append(source_file, CHUNKS[2])
    assert await read_committed(worker.bootstrap, topic, len(LINES)) == LINES
    return topic, source_file


def append(path: Path, lines: list[str]) -> None:
    with path.open("a") as file:
        file.write("".join(line + "\n" for line in lines))


async def producer_epoch(bs: str, transactional_id: str) -> int:
    """The producer epoch of a transactional id, as kafka-transactions describe prints it."""
    (run,) = await tools(["kafka-transactions", "--bootstrap-server", bs, "describe",
                          "--transactional-id", transactional_id])
    assert run.exit == 0, run.out
    header, row = run.out.strip().splitlines()[-2:]
    return int(dict(zip(header.split(), row.split(), strict=False))["ProducerEpoch"])


@pytest.mark.timeout(300)
async def test_file_lines_move_once_each_through_a_worker_killed_mid_stream(gateway, tmp_path: Path):
    """KIP-618 on the gateway: the source task's producer is transactional (transactional.id
    `<group>-<connector>-<task>`), a transaction every three seconds with its source offset; a
    worker SIGKILLed while one is open (the gateway's admin API lists it open before the kill and
    after it) leaves a zombie that the restarted task's InitProducerId fences, aborting its
    transaction, and the topic read read_committed holds every line once, in order. Then a sink writes them out, a second
    worker takes half the work (the `connect` protocol's incremental cooperative assignment), and a
    stopped connector's offsets altered (KIP-875) fence its producers with Admin.fenceProducers.
    Written against Kafka 4.4 too, where it passes as it is (with the `either` fixture), and
    kept to the gateway here: its worker starts cost more than the comparison adds."""
    bs, group = kafka_bootstrap(gateway), unique("connect")
    first = ConnectWorker(tmp_path / "first", bs, group)
    sink_file = tmp_path / "out.txt"

    async def restart_worker(topic: str) -> None:
        txn = await eventually(lambda: _open_transaction(gateway, topic), what="a source transaction open", timeout=60)
        first.kill()
        assert await _open_transaction(gateway, topic) == txn, "the kill landed outside the transaction"
        await start_workers(first)

    try:
        await start_workers(first)
        topic, source_file = await lines_through(first, tmp_path, restart_worker, boundary={
            "transaction.boundary": "interval", "transaction.boundary.interval.ms": "3000"})
        for internal in ("configs", "offsets", "status"):  # made by the worker, through CreateTopics
            assert await topic_config(bs, f"{group}-{internal}", "cleanup.policy") == "compact"

        await first.rest("POST", "/connectors", {"name": "sink", "config": {
            "connector.class": SINK, "file": str(sink_file), "topics": topic, "tasks.max": "1"}})
        await eventually(lambda: sink_file.exists() and len(sink_file.read_text().splitlines()) >= len(LINES),
                         what="every line written out", timeout=60)
        assert sink_file.read_text().splitlines() == LINES

        second = ConnectWorker(tmp_path / "second", bs, group)
        try:
            await start_workers(second)

            async def spread() -> bool:
                placed = {s["connector"]["worker_id"] for s in await _statuses(first)}
                placed |= {t["worker_id"] for s in await _statuses(first) for t in s["tasks"]}
                return placed == {f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"}

            await eventually(spread, what="work on both workers", timeout=60)
        finally:
            second.kill()

        before = await producer_epoch(bs, f"{group}-src-0")
        assert (await first.rest("PUT", "/connectors/src/stop")) is None
        await eventually(lambda: _state(first, "src", "STOPPED"), what="the source stopped", timeout=60)
        altered = await first.rest("PATCH", "/connectors/src/offsets", {"offsets": [
            {"partition": {"filename": str(source_file)}, "offset": {"position": source_file.stat().st_size}}]})
        assert "altered successfully" in altered["message"], altered
        assert await producer_epoch(bs, f"{group}-src-0") > before
    finally:
        first.kill()


async def _open_transaction(gateway: Gateway, topic: str) -> str | None:
    """The id of the open transaction writing to `topic`, as the gateway's admin API lists it."""
    async with aiohttp.ClientSession() as http, http.get(admin_url(gateway) + "/admin/v2/transactions") as r:
        listed = await r.json()
    return next((t["txn"] for t in listed if t["state"] == "OPEN" and {"topic": topic, "partition": 0} in t["partitions"]),
                None)


async def _statuses(worker: ConnectWorker) -> list[dict]:
    return [await worker.rest("GET", f"/connectors/{name}/status") for name in await worker.rest("GET", "/connectors")]


async def _state(worker: ConnectWorker, name: str, state: str) -> bool:
    return (await worker.rest("GET", f"/connectors/{name}/status"))["connector"]["state"] == state


async def test_a_config_topic_not_compacted_is_refused_as_kafka_refuses_it(gateway, kafka_broker, tmp_path: Path):
    """Connect's KafkaConfigBackingStore checks `cleanup.policy` with DescribeConfigs and stops the
    worker on a topic that deletes: the same line on both, the one a user reads."""
    seen = {}
    for name, bs in (("kafka", kafka_broker.bootstrap), ("gateway", kafka_bootstrap(gateway))):
        group = unique("connect")
        await create_topic(bs, f"{group}-configs", 1, **{"cleanup.policy": "delete"})
        worker = ConnectWorker(tmp_path / name, bs, group=group)
        try:
            await start_workers(worker)
            failure = await asyncio.to_thread(worker.logged, HERDER_FAILED, then=1)
        finally:
            worker.kill()
        seen[name] = failure.replace(group, "GROUP").strip()
    assert "cleanup.policy=compact" in seen["kafka"], seen
    assert seen["gateway"] == seen["kafka"]


@pytest.mark.timeout(300)
async def test_a_gateway_killed_under_the_worker_loses_no_line(gateway_process: GatewayProcess, tmp_path: Path):
    """The gateway SIGKILLed while the exactly-once source streams, and started again on its ports
    and data: the worker's clients reconnect, and every line is in the topic once."""
    gateway_process.start()
    worker = ConnectWorker(tmp_path / "worker", gateway_process.kafka_bootstrap, unique("connect"))

    async def restart_gateway(topic: str) -> None:
        await read_committed(worker.bootstrap, topic, len(CHUNKS[0]) + 1, to_end=False)
        gateway_process.kill()
        await asyncio.to_thread(gateway_process.start)

    try:
        await start_workers(worker)
        await lines_through(worker, tmp_path, restart_gateway)
    finally:
        worker.kill()


@pytest.mark.timeout(300)  # four workers started one after another, each given TIMEOUT to start
async def test_a_worker_denied_by_acls_or_its_missing_topic_fails_as_on_kafka(redis_server: str, sasl_kafka_broker,
                                                                          tmp_path: Path):
    """A worker logged in as `alice` on a SASL Kafka 4.4 broker with StandardAuthorizer and on a
    gateway with authentication on, the herder's failure (the line a user reads) compared: with no
    ACL at all, and with every right on the worker's topics and group but CREATE, so that its
    internal topics are missing and it may not create them."""
    seen: dict[str, list[str]] = {}
    alice = {f"{prefix}{k}": v for prefix in ("", "producer.", "consumer.", "admin.") for k, v in login("alice").items()}
    admin = tmp_path / "admin.properties"
    admin.write_text("".join(f"{k}={v}\n" for k, v in login("admin").items()))
    async with sasl_pair(redis_server, tmp_path, broker=sasl_kafka_broker) as bootstraps:
        for name, bs in bootstraps.items():
            for case in ("no-acl", "no-create"):
                group = unique("connect")
                if case == "no-create":
                    acls = ["kafka-acls", "--bootstrap-server", bs, "--command-config", str(admin), "--add",
                            "--allow-principal", "User:alice", "--resource-pattern-type", "prefixed"]
                    runs = await tools([*acls, "--operation", "Read", "--operation", "Write", "--operation",
                                        "Describe", "--operation", "DescribeConfigs", "--topic", group],
                                       [*acls, "--operation", "All", "--group", group])
                    assert all(r.exit == 0 for r in runs), [r.out for r in runs]
                    await acls_listed(bs, 5)  # four on its topics, one on its group
                worker = ConnectWorker(tmp_path / name / case, bs, group=group, settings=alice)
                try:
                    await asyncio.to_thread(worker.start)
                    failure = await asyncio.to_thread(worker.logged, HERDER_FAILED, then=1)
                finally:
                    worker.kill()
                seen.setdefault(name, []).append(failure.replace(group, "GROUP").strip())
    assert all("Authorization" in line for line in seen["kafka"]), seen
    assert seen["gateway"] == seen["kafka"]


@pytest.mark.timeout(300)
async def test_a_gateway_killed_under_mirror_maker_loses_no_record(gateway_process: GatewayProcess, kafka_broker,
                                                                   tmp_path: Path):
    """MirrorMaker 2, with the README's block, mirroring from Kafka 4.4 into a gateway that is
    SIGKILLed and started again on its ports and data: every record mirrored before the kill is
    there after it, and what Kafka gets after the kill is mirrored too (at least once: the mirror's
    source task is not exactly-once here)."""
    gateway_process.start()
    kafka, gw = kafka_broker.bootstrap, gateway_process.kafka_bootstrap
    topic, group = unique("payments"), unique("billing")
    await create_topic(kafka, topic, 1)
    before, after = [f"before-{i}" for i in range(40)], [f"after-{i}" for i in range(10)]
    await produce("confluent", kafka, topic, [(b"k", v.encode()) for v in before])
    worker = ConnectWorker(tmp_path / "mirror", gw, unique("mirror"), settings={"exactly.once.source.support": "disabled"})
    try:
        await start_workers(worker)
        script = mirrored(block("MirrorSourceConnector"), kafka, gw, worker.url, topic, group, back=False)
        code, out = await run_program("bash", "-c", script, timeout=60)
        assert code == 0, out
        assert set(await read_committed(gw, topic, len(before), to_end=False)) == set(before)
        gateway_process.kill()
        await asyncio.to_thread(gateway_process.start)
        assert set(await read_committed(gw, topic, len(before), to_end=False)) == set(before)
        await produce("confluent", kafka, topic, [(b"k", v.encode()) for v in after])

        async def all_mirrored() -> bool:
            return set(await read_committed(gw, topic, len(before))) == set(before + after)

        await eventually(all_mirrored, what="the records produced after the kill mirrored", timeout=120)
    finally:
        worker.kill()
