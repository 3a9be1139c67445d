"""Apache Kafka 4.4's command-line tools, unchanged (their main classes from the kafka-tools jar, as
bin/kafka-*.sh runs them), against the gateway; the same commands against a real Kafka 4.4 broker,
and what they print compared. The verifiable producer and consumer (Kafka's own system tests' check
that whatever was acknowledged is consumed) run through a gateway SIGKILL and restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.kafka.configs import RESOURCE_CLIENT_METRICS, SOURCE_CLIENT_METRICS
from gateway.kafka.dispatch import ApiKey
from tests.conftest import GatewayProcess, eventually, kafka_bootstrap
from tests.kafka_clients import TIMEOUT, create_topic
from tests.kafka_jvm import TOOLS, Settle, ToolRun, java, java_command, same_on_both, tools, unique
from tests.kafka_wire import call

pytestmark = [pytest.mark.jvm, pytest.mark.kafka, pytest.mark.slow]


def landed(bs: str, topic: str) -> dict[str, Settle]:
    """What the session awaits after a tool whose change a Kafka broker applies from its metadata
    log a moment after the tool is answered (the gateway, at once), as an operator would look again
    before going on: the new partition led, the config set, the ACL listed, then gone."""
    import confluent_kafka.admin as cka

    admin = cka.AdminClient({"bootstrap.servers": bs})
    acls = cka.AclBindingFilter(cka.ResourceType.TOPIC, topic, cka.ResourcePatternType.ANY, None, None,
                                cka.AclOperation.ANY, cka.AclPermissionType.ANY)

    def led() -> bool:
        parts = admin.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions
        return len(parts) == 2 and all(p.leader >= 0 for p in parts.values())

    def config() -> bool:
        (f,) = admin.describe_configs([cka.ConfigResource(cka.ResourceType.TOPIC, topic)]).values()
        return bool(f.result(TIMEOUT)["max.message.bytes"].value == "20000")

    def acl_count() -> int:
        return len(admin.describe_acls(acls).result(TIMEOUT))

    def until(check: Callable[[], bool], what: str) -> Settle:
        return lambda: eventually(lambda: asyncio.to_thread(check), TIMEOUT, f"{topic}: {what}")

    return {"partitions": until(led, "two partitions led"), "config": until(config, "max.message.bytes set"),
            "acl": until(lambda: acl_count() == 1, "the ACL listed"),
            "no acl": until(lambda: acl_count() == 0, "the ACL gone")}


def session(bs: str, topic: str, records_file: Path) -> list[list[str] | Settle]:
    """An operator's session with the tools on a new topic and a consumer group of the same name."""
    settle = landed(bs, topic)
    b = ["--bootstrap-server", bs]
    group = ["--group", topic]
    reset = ["kafka-consumer-groups", *b, "--reset-offsets", *group, "--topic", topic]
    acl = ["--allow-principal", "User:alice", "--operation", "Read", "--topic", topic]
    return [
        ["kafka-topics", *b, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1",
         "--config", "retention.ms=3600000"],
        ["kafka-producer-perf-test", "--topic", topic, "--num-records", "90", "--record-size", "100",
         "--throughput", "-1", "--command-property", f"bootstrap.servers={bs}", "acks=all"],
        ["kafka-topics", *b, "--alter", "--topic", topic, "--partitions", "2"],
        settle["partitions"],
        ["kafka-topics", *b, "--describe", "--topic", topic],
        ["kafka-configs", *b, "--entity-type", "topics", "--entity-name", topic, "--alter",
         "--add-config", "max.message.bytes=20000"],
        settle["config"],
        ["kafka-configs", *b, "--entity-type", "topics", "--entity-name", topic, "--describe"],
        ["kafka-consumer-perf-test", *b, "--topic", topic, "--num-records", "90", *group],
        ["kafka-log-dirs", *b, "--describe", "--topic-list", topic],
        ["kafka-get-offsets", *b, "--topic", topic],
        ["kafka-consumer-groups", *b, "--describe", *group],
        ["kafka-delete-records", *b, "--offset-json-file", str(records_file)],
        ["kafka-get-offsets", *b, "--topic", topic, "--time", "-2"],
        [*reset, "--to-earliest", "--execute"],
        [*reset, "--shift-by", "-5", "--execute"],
        [*reset, "--to-datetime", "2020-01-01T00:00:00.000", "--execute"],
        [*reset, "--shift-by", "5", "--execute"],
        ["kafka-consumer-groups", *b, "--describe", *group, "--offsets"],
        ["kafka-consumer-groups", *b, "--delete-offsets", *group, "--topic", topic],
        ["kafka-acls", *b, "--add", *acl],
        settle["acl"],
        ["kafka-acls", *b, "--list", "--topic", topic],
        ["kafka-acls", *b, "--remove", "--force", *acl],
        settle["no acl"],
        ["kafka-acls", *b, "--list", "--topic", topic],
        ["kafka-topics", *b, "--delete", "--topic", topic],
        ["kafka-consumer-groups", *b, "--list"],  # the last two are not compared: see normalized
        ["kafka-features", *b, "describe"],
    ]


def normalized(run: ToolRun) -> str:
    """What a tool printed, less what differs between any two clusters: ids, node ids, timings.
    min.insync.replicas=1 is Kafka 4.4's cluster-wide dynamic default (docs/kafka-differences.md)."""
    out = run.out
    if run.command[0] == "kafka-producer-perf-test":
        out = re.findall(r"^(\d+) records sent", out, re.M)[-1]
    elif run.command[0] == "kafka-consumer-perf-test":
        out = out.strip().splitlines()[-1].split(", ")[4]  # data.consumed.in.nMsg
    elif run.command[0] == "kafka-log-dirs":  # a dir's path and a partition's bytes are each broker's own
        out = json.dumps([[sorted((p["partition"], p["offsetLag"], p["isFuture"]) for p in d["partitions"])
                           for d in b["logDirs"]] for b in log_dirs(run)["brokers"]])
    out = re.sub(r"TopicId: \S+", "TopicId: <id>", out)
    out = re.sub(r"\b(Leader|Replicas|Isr): \d+", r"\1: <node>", out)
    return f"exit {run.exit}\n" + out.replace("min.insync.replicas=1,", "")


def log_dirs(run: ToolRun) -> dict:
    """kafka-log-dirs' answer: the JSON line it prints after its two lines of progress."""
    return json.loads(run.out.strip().splitlines()[-1])


async def test_tools_answer_as_on_kafka(gateway, kafka_broker, tmp_path):
    topic = unique("tools")
    records = tmp_path / "delete-records.json"
    records.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 30}]}))

    async def run(bs: str) -> list[ToolRun]:
        return await tools(*session(bs, topic, records))

    on_kafka, on_gateway = await run(kafka_broker.bootstrap), await run(kafka_bootstrap(gateway))
    compared = len(on_kafka) - 2
    for k, g in zip(on_kafka[:compared], on_gateway[:compared], strict=True):
        assert normalized(g) == normalized(k), f"{' '.join(g.command)}\nkafka:\n{k.out}\ngateway:\n{g.out}"
    assert normalized(on_gateway[1]) == "exit 0\n90" and normalized(on_gateway[6]) == "exit 0\n90"
    [dirs] = [d for b in log_dirs(on_gateway[7])["brokers"] for d in b["logDirs"]]  # one dir: its Redis
    assert sum(p["size"] for p in dirs["partitions"]) > 90 * 100  # the records' bytes in Redis
    assert f"{topic}:0:30" in on_gateway[11].out.split()  # the log start offset after delete-records
    [listing, features] = on_gateway[compared:]
    assert listing.exit == 0 and topic in listing.out.split()
    # the gateway versions transaction.version alone, finalized at no level until an admin sets one
    # (docs/kafka-differences.md, the finalized features row)
    assert (features.exit, features.out.split()) == (0, [
        "Feature:", "transaction.version", "SupportedMinVersion:", "0", "SupportedMaxVersion:", "2",
        "FinalizedVersionLevel:", "0", "Epoch:", "-"])


async def verifiable(tool: str, bs: str, topic: str, *args: str) -> asyncio.subprocess.Process:
    """kafka-verifiable-producer or -consumer in a JVM of its own, its JSON events on stdout."""
    return await asyncio.create_subprocess_exec(
        *java_command(TOOLS[tool], "--bootstrap-server", bs, "--topic", topic, *args),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)


async def events(proc: asyncio.subprocess.Process, name: str) -> AsyncIterator[dict]:
    """The events called `name` a verifiable client prints, as they come."""
    assert proc.stdout is not None
    async for line in proc.stdout:
        event = json.loads(line)
        if event["name"] == name:
            yield event


async def test_verifiable_producer_and_consumer_through_a_gateway_kill(gateway_process: GatewayProcess):
    """kafka-verifiable-producer and kafka-verifiable-consumer keep going while the gateway is killed
    (SIGKILL) and started again: the consumer reads every record the producer saw acknowledged, at
    the offset it was acknowledged at."""
    gp = gateway_process
    gp.args += ["--log-level", "WARNING"]  # nothing reads its output: keep the pipe from filling
    gp.start()
    topic = "verifiable"
    await create_topic(gp.kafka_bootstrap, topic, 3)
    producer = await verifiable("kafka-verifiable-producer", gp.kafka_bootstrap, topic,
                                "--max-messages", "1500", "--throughput", "300", "--acks", "-1")
    consumer = await verifiable("kafka-verifiable-consumer", gp.kafka_bootstrap, topic,
                                "--group-id", "verifiable", "--reset-policy", "earliest", "--verbose")
    acked: dict[str, tuple[int, int]] = {}  # value: (partition, offset)
    consumed: dict[str, tuple[int, int]] = {}
    enough, caught_up = asyncio.Event(), asyncio.Event()

    async def read_producer() -> None:
        async for event in events(producer, "producer_send_success"):
            acked[event["value"]] = (event["partition"], event["offset"])
            if len(acked) == 300:
                enough.set()

    def check() -> None:
        if producing.done() and acked.keys() <= consumed.keys():
            caught_up.set()

    async def read_consumer() -> None:
        async for event in events(consumer, "record_data"):
            consumed[event["value"]] = (event["partition"], event["offset"])
            check()

    producing = asyncio.create_task(read_producer())
    consuming = asyncio.create_task(read_consumer())
    try:
        await asyncio.wait_for(enough.wait(), 60)
        await asyncio.to_thread(gp.kill)
        await asyncio.to_thread(gp.start)
        await asyncio.wait_for(producer.wait(), 120)
        await producing
        check()
        await asyncio.wait_for(caught_up.wait(), 120)
    finally:
        for proc in (producer, consumer):
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            await proc.wait()
        consuming.cancel()
    assert producer.returncode == 0 and len(acked) > 300
    assert all(consumed[v] == at for v, at in acked.items())


# columns of kafka-transactions' tables that differ between any two clusters, and the coordinator
# epoch, which the gateway has not (docs/kafka-differences.md)
VARIABLE_COLUMNS = {"Coordinator", "CoordinatorId", "ProducerId", "CurrentTransactionStartTimeMs",
                    "TransactionDurationMs", "LastTimestamp", "LatestCoordinatorEpoch"}


def table(out: str, keep: Callable[[dict[str, str]], bool] = lambda row: True) -> list[dict[str, str]]:
    """A kafka-transactions table as rows by column name, less the columns in VARIABLE_COLUMNS."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    if not lines:
        return []
    header, *rows = lines
    return [{k: v for k, v in row.items() if k not in VARIABLE_COLUMNS}
            for row in (dict(zip(header, values, strict=False)) for values in rows) if keep(row)]


async def test_kafka_transactions_answers_as_on_kafka(gateway, kafka_broker):
    """kafka-transactions on a transaction left open by its producer: list, describe,
    describe-producers, find-hanging, then abort by its first offset, after which read_committed
    readers read past it."""
    topic = unique("txns")

    async def scenario(bs: str) -> list[object]:
        await create_topic(bs, topic, 1)
        await java("gateway.jvm.Produce", bs, topic, "commit:2,open:3", f"transactional.id={topic}")
        b, tx = ["--bootstrap-server", bs], "kafka-transactions"
        producers = [tx, *b, "describe-producers", "--topic", topic, "--partition", "0"]
        listed, described, before, hanging, aborted, after = await tools(
            [tx, *b, "list"],
            [tx, *b, "describe", "--transactional-id", topic],
            producers,
            [tx, *b, "find-hanging", "--topic", topic],
            [tx, *b, "abort", "--topic", topic, "--partition", "0", "--start-offset", "3"],
            producers)
        read = await java("gateway.jvm.Consume", bs, topic, "0", "isolation.level=read_committed")
        return [table(listed.out, lambda row: row["TransactionalId"] == topic), table(described.out),
                table(before.out), hanging.out, (aborted.exit, aborted.out), table(after.out), read.lines()]

    answers = await same_on_both(gateway, kafka_broker, scenario)
    assert answers[1][0]["TransactionState"] == "Ongoing" and answers[2][0]["CurrentTransactionStartOffset"] == "3"
    assert answers[5][0]["CurrentTransactionStartOffset"] == "None"
    assert [line.split()[2] for line in answers[6]] == ["commit-0", "commit-1"]


def subscription_is(bs: str, name: str, interval: str | None) -> Settle:
    """Until DescribeConfigs of the subscription `name` shows its own interval.ms as `interval` (None:
    none of its own left): a Kafka broker applies a subscription from its metadata log a moment after
    kafka-client-metrics is answered."""
    async def shown() -> bool:
        host, port = bs.rsplit(":", 1)
        conn = await asyncio.open_connection(host, int(port))
        try:
            resp = await call(conn, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
                {"resource_type": RESOURCE_CLIENT_METRICS, "resource_name": name, "configuration_keys": None}],
                "include_synonyms": False, "include_documentation": False})
        finally:
            conn[1].close()
        own = {c.name: c.value for r in resp.results for c in r.configs if c.config_source == SOURCE_CLIENT_METRICS}
        return own.get("interval.ms") == interval if interval is not None else not own

    return lambda: eventually(shown, TIMEOUT, f"subscription {name}'s interval.ms {interval}")


async def test_kafka_client_metrics_answers_as_on_kafka(gateway, kafka_broker):
    """kafka-client-metrics (KIP-714's subscriptions as CLIENT_METRICS config resources): alter,
    describe, list, refused values, delete, then described with only the defaults left. Its
    selector matches no client, so the suite's other clients push nothing meanwhile."""
    name = unique("metrics")

    async def scenario(bs: str) -> list[tuple[int, str]]:
        cm = ["kafka-client-metrics", "--bootstrap-server", bs]
        runs = await tools(
            [*cm, "--alter", "--name", name, "--metrics", "org.apache.kafka.producer.,org.apache.kafka.consumer.",
             "--interval", "1000", "--match", "client_id=nobody-.*"],
            subscription_is(bs, name, "1000"),
            [*cm, "--describe", "--name", name],
            [*cm, "--list"],
            [*cm, "--alter", "--name", name, "--interval", "70"],
            [*cm, "--alter", "--name", name, "--match", "bogus=1"],
            [*cm, "--delete", "--name", name],
            subscription_is(bs, name, None),
            [*cm, "--describe", "--name", name])
        listed = runs[2]
        return [(r.exit, r.out) for r in runs[:2]] + [(listed.exit, str(name in listed.out.split()))] + \
            [(r.exit, r.out) for r in runs[3:]]

    answers = await same_on_both(gateway, kafka_broker, scenario)
    assert answers[2] == (0, "True") and "interval.ms=1000" in answers[1][1]
