"""The suite's JVM side: Apache Kafka 4.4's clients, tools and broker from the jars tests/jvm pins
(`./dev test` resolves them and writes tests/jvm/target/classpath.txt), and the small programs in
tests/jvm/src that the tests run. Nothing here skips: without the built module a test fails, naming
what to run."""

from __future__ import annotations

import asyncio
import difflib
import pprint
import re
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.bench import kafka_broker
from gateway.bench.kafka_broker import (  # noqa: F401  (the suite's names for them)
    CLIENT_JVM,
    TIMEOUT,
    classpath,
    java_command,
    random_cluster_id,
)
from gateway.bench.kafka_broker import JVM_MODULE as JVM  # noqa: F401
from gateway.store.embedded import free_port
from tests.conftest import kafka_bootstrap


@dataclass
class Ran:
    returncode: int
    out: str  # stdout: what the program reports
    err: str  # stderr: its log

    def lines(self) -> list[str]:
        return self.out.splitlines()


async def java(main: str, *args: str, timeout: float = TIMEOUT, check: bool = True, stdin: str | None = None) -> Ran:
    """Run a main class to its end, awaited (a gateway under test may share this event loop), killed
    at `timeout`. With `check`, a non-zero exit fails, showing what it printed."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = await asyncio.create_subprocess_exec(
            *java_command(main, *args), stdout=out, stderr=err,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE)
        try:
            await asyncio.wait_for(proc.communicate(None if stdin is None else stdin.encode()), timeout)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        out.seek(0)
        err.seek(0)
        ran = Ran(proc.returncode, out.read().decode(), err.read().decode())
    if check and ran.returncode != 0:
        raise AssertionError(f"{main} {' '.join(args)} exited {ran.returncode}:\n{ran.out}\n{ran.err}")
    return ran


# Kafka's scripts (bin/kafka-*.sh) and the main classes they run
TOOLS = {
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-client-metrics": "org.apache.kafka.tools.ClientMetricsCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-delegation-tokens": "org.apache.kafka.tools.DelegationTokenCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
}


@dataclass
class ToolRun:
    command: list[str]  # as a user types it: the script's name, then its arguments
    exit: int
    out: str  # stdout and stderr together


Settle = Callable[[], Awaitable[object]]
"""A step between two tools' commands: awaited before the next one is sent (what the broker must have
applied first, as a user would wait for it)."""


async def tools(*steps: list[str] | Settle, timeout: float = TIMEOUT) -> list[ToolRun]:
    """Run Kafka's command-line tools, one after another in one JVM (tests/jvm's Tools), each as
    its script runs it: `["kafka-topics", "--bootstrap-server", ...]`. A command is sent once the one
    before it has ended and every `Settle` between them has been awaited. Kafka's broker learns of
    what its controller made (a topic's partitions, a config, an ACL) from the metadata log a moment
    after the tool that asked was answered: a command that reads it back is sent after a Settle that
    waits for it, so that what is compared is the state a user sees once the change has landed."""
    commands = [s for s in steps if isinstance(s, list)]
    runs: list[ToolRun] = []
    with tempfile.TemporaryFile() as err:
        proc = await asyncio.create_subprocess_exec(
            *java_command("gateway.jvm.Tools"), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=err, limit=1 << 24)
        assert proc.stdin is not None and proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout

        async def run_all() -> None:
            for step in steps:
                if not isinstance(step, list):
                    await step()
                    continue
                stdin.write(("\t".join([TOOLS[step[0]], *step[1:]]) + "\n").encode())
                await stdin.drain()
                out: list[str] = []
                while not (line := (await stdout.readline()).decode()).startswith("=== exit "):
                    if not line:
                        return  # the JVM ended: reported below
                    out.append(line)
                runs.append(ToolRun(step, int(line.removeprefix("=== exit ")), "".join(out)))
            stdin.close()
            await proc.wait()

        try:
            await asyncio.wait_for(run_all(), timeout)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        err.seek(0)
        log = err.read().decode()
    assert len(runs) == len(commands), f"the tools stopped after {len(runs)} of {len(commands)}:\n{log}"
    return runs


# Transactions V1, the protocol the gateway speaks (V2, KIP-890 part 2, is issue 34): Kafka 4.4
# finalizes V2 by default, under which producers bump their epoch at every transaction's end
FORMAT_FEATURES = ["--feature", "transaction.version=1"]

SUITE_SETTINGS = {
    # one node: the internal topics have one replica, and one partition each, which a test's
    # first group, transaction or share group then creates in a moment; nothing else of
    # config/server.properties, so that every other setting keeps its default's source
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    # as the suite's gateways: no 3 s wait before a new classic group's first rebalance
    "group.initial.rebalance.delay.ms": "0",
    # as librdkafka's CI and the suite's share-group gateways: a share group may lock its
    # records for as little as 1 s (share.record.lock.duration.ms); the default stays 30 s
    "group.share.min.record.lock.duration.ms": "1000",
    # as the streams app tests' gateways: a streams group may set a session timeout
    # (streams.session.timeout.ms) as short as 6 s, so a killed instance's tasks move on in
    # seconds; the default stays 45 s
    "group.streams.min.session.timeout.ms": "6000",
    # as the suite's gateways (--txn-reaper-interval 1): a transaction past its timeout is
    # aborted within a second, not ten
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    # ACLs served, as the gateway always serves them; the unauthenticated clients of the
    # tests may do anything, as they may on a gateway without --auth
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


@dataclass
class KafkaBroker(kafka_broker.KafkaBroker):
    """The suite's node: the package's launcher (gateway/bench/kafka_broker.py) with SUITE_SETTINGS
    in place of config/server.properties', FORMAT_FEATURES, and the JVM's own defaults rather than
    kafka-server-start.sh's 1 GB heap."""

    settings: dict[str, str] = field(default_factory=lambda: dict(SUITE_SETTINGS))
    features: list[str] = field(default_factory=lambda: list(FORMAT_FEATURES))
    jvm_options: list[str] = field(default_factory=list)


# SCRAM users of the SASL broker (and of the gateway it is compared with): admin a super user
SASL_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
SASL_MECHANISM = "SCRAM-SHA-256"


@dataclass
class SaslKafkaBroker(KafkaBroker):
    """The same node with a second listener, SASL_PLAINTEXT with SCRAM-SHA-256, whose users
    (SASL_USERS) are created as Kafka's tools create them, by `kafka-storage format --add-scram`;
    User:admin is a super user, the others have what ACLs give them. Fixtures of its own
    (conftest's sasl_kafka_broker, token_kafka_broker), so the ACLs and users its tests make touch
    no other test's broker; the tests sharing one delete every ACL before they start."""

    sasl_port: int = field(default_factory=free_port)

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def __post_init__(self) -> None:
        self.features += [a for user, password in SASL_USERS.items()
                          for a in ("--add-scram", f"{SASL_MECHANISM}=[name={user},password={password}]")]
        self.settings["super.users"] += ";User:admin"
        self.settings |= {
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": SASL_MECHANISM,
            f"listener.name.sasl_plaintext.{SASL_MECHANISM.lower()}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        }

    def choose_ports(self) -> None:
        super().choose_ports()
        self.sasl_port = free_port()

    def properties(self) -> str:
        plain = f"PLAINTEXT://127.0.0.1:{self.port}"
        sasl = f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
        return "".join(line.replace(plain, f"{plain},{sasl}") if line.startswith(("listeners=", "advertised.listeners="))
                       else line
                       for line in super().properties().splitlines(keepends=True))


Scenario = Callable[[str], Awaitable[object]]


async def same_on_both(gateway: Any, kafka_broker: KafkaBroker, scenario: Scenario) -> Any:
    """What `scenario` observes against the gateway, checked equal to what it observes on Kafka."""
    on_kafka = await scenario(kafka_broker.bootstrap)
    on_gateway = await scenario(kafka_bootstrap(gateway))
    assert on_gateway == on_kafka, "\n".join(difflib.unified_diff(
        pprint.pformat(on_kafka, width=200).splitlines(), pprint.pformat(on_gateway, width=200).splitlines(),
        "kafka", "gateway", lineterm=""))
    return on_kafka


DIFFERENCES = Path(__file__).resolve().parents[1] / "docs" / "kafka-differences.md"


def allowed(what: str) -> str:
    """`what`, once checked to name a row of the allowlist's table in docs/kafka-differences.md: a
    test lets a difference through only where that one list says why."""
    rows = re.findall(r"^\| (.+?) \|", DIFFERENCES.read_text(), flags=re.M)
    assert what in rows, f"docs/kafka-differences.md lists no {what!r}"
    return what


def unique(prefix: str) -> str:
    """A name no earlier test used: the broker lives as long as the run."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
