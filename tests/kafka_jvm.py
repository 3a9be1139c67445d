"""The suite's JVM side: Apache Kafka 4.4's clients, tools and broker from the jars tests/jvm pins
(`./dev test` resolves them and writes tests/jvm/target/classpath.txt), and the small programs in
tests/jvm/src that the tests run. Nothing here skips: without the built module a test fails, naming
what to run."""

from __future__ import annotations

import asyncio
import base64
import difflib
import os
import pprint
import re
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.store.embedded import free_port
from tests.conftest import java17_home, kafka_bootstrap

JVM = Path(__file__).resolve().parent / "jvm"
TIMEOUT = 120.0
# a short-lived client starts faster on the C1 compiler and the serial collector
CLIENT_JVM = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx512m"]


def classpath() -> str:
    listed = JVM / "target" / "classpath.txt"
    if not listed.is_file():
        raise RuntimeError("tests/jvm is not built: `./dev test` builds it (it needs Maven and a Java 17 JDK)")
    return os.pathsep.join([str(JVM / "target" / "classes"), listed.read_text().strip()])


def java_command(main: str, *args: str, options: list[str] = CLIENT_JVM, log_level: str = "WARN") -> list[str]:
    """`java` running `main` from tests/jvm's classpath; Log4j writes to stderr at `log_level`."""
    return [str(Path(java17_home()) / "bin" / "java"), *options, f"-Dlog.level={log_level}",
            "-cp", classpath(), main, *args]


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
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
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


async def tools(*commands: list[str], timeout: float = TIMEOUT) -> list[ToolRun]:
    """Run Kafka's command-line tools, one after another in one JVM (tests/jvm's Tools), each as
    its script runs it: `["kafka-topics", "--bootstrap-server", ...]`."""
    lines = "".join("\t".join([TOOLS[c[0]], *c[1:]]) + "\n" for c in commands)
    ran = await java("gateway.jvm.Tools", stdin=lines, timeout=timeout)
    parts = re.split(r"^=== exit (-?\d+)\n", ran.out, flags=re.M)
    runs = [ToolRun(c, int(code), out) for c, out, code in zip(commands, parts[0::2], parts[1::2], strict=False)]
    assert len(runs) == len(commands), f"the tools stopped after {len(runs)} of {len(commands)}:\n{ran.out}\n{ran.err}"
    return runs


def random_cluster_id() -> str:
    """What `kafka-storage random-uuid` prints: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


# Transactions V1, the protocol the gateway speaks (V2, KIP-890 part 2, is issue 34): Kafka 4.4
# finalizes V2 by default, under which producers bump their epoch at every transaction's end
FORMAT_FEATURES = ["--feature", "transaction.version=1"]


@dataclass
class KafkaBroker:
    """One Apache Kafka 4.4 node in KRaft mode, broker and controller in one process, as
    `kafka-server-start.sh config/server.properties` runs it, in `dir` (its storage, properties and
    log, broker.log, which stays there after the run)."""

    dir: Path
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[str] | None = None
    started = "Kafka Server started"  # KafkaRaftServer's line once the broker serves clients

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.dir / "broker.log"

    def properties(self) -> str:
        return "\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={self.dir / 'data'}",
            # one node: the internal topics have one replica, and one partition each, which a
            # test's first group, transaction or share group then creates in a moment
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "share.coordinator.state.topic.num.partitions=1",
            # as the suite's gateways: no 3 s wait before a new classic group's first rebalance
            "group.initial.rebalance.delay.ms=0",
            # as librdkafka's CI and the suite's share-group gateways: a share group may lock its
            # records for as little as 1 s (share.record.lock.duration.ms); the default stays 30 s
            "group.share.min.record.lock.duration.ms=1000",
            # ACLs served, as the gateway always serves them; the unauthenticated clients of the
            # tests may do anything, as they may on a gateway without --auth
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS",
            "",
        ])

    def format_args(self) -> list[str]:
        return FORMAT_FEATURES

    def start(self, timeout: float = TIMEOUT) -> None:
        """Format the storage with Kafka's own StorageTool (with `format_args`), start the node and
        return once it logs that it serves; ports another process took meanwhile are chosen again."""
        for attempt in range(3):
            if self._start(timeout):
                return
            if attempt == 2 or "Address already in use" not in self.log.read_text():
                raise RuntimeError(f"the Kafka broker did not start; its log, {self.log}:\n{self.log_tail()}")
            self.port, self.controller_port = free_port(), free_port()

    def _start(self, timeout: float) -> bool:
        """One try: whether the node started (else it is stopped, and its log says why)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        # formatted afresh: the storage records the controller's address, which a retry changes
        shutil.rmtree(self.dir / "data", ignore_errors=True)
        config = self.dir / "server.properties"
        config.write_text(self.properties())
        formatted = subprocess.run(
            java_command("kafka.tools.StorageTool", "format", "--standalone",
                         # one argument: an id may begin with "-", which would read as an option
                         f"--cluster-id={random_cluster_id()}", "--config", str(config), *self.format_args()),
            capture_output=True, text=True, timeout=timeout)
        if formatted.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{formatted.stdout}{formatted.stderr}")
        self.proc = subprocess.Popen(java_command("kafka.Kafka", str(config), options=[], log_level="INFO"),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = threading.Event()
        started: list[bool] = []
        copying = threading.Thread(target=self._copy_log, args=(seen, started), daemon=True)
        copying.start()
        if seen.wait(timeout) and started:
            return True
        self.stop()
        copying.join(10)  # its log complete before anyone reads it, or a retry writes the next
        return False

    def _copy_log(self, seen: threading.Event, started: list[bool]) -> None:
        """Everything the broker prints goes to broker.log; `seen` is set at its started line (and
        `started` holds True), or when its output ends."""
        assert self.proc is not None and self.proc.stdout is not None
        with self.log.open("w") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                if self.started in line:
                    started.append(True)
                    seen.set()
        seen.set()

    def log_tail(self, lines: int = 60) -> str:
        return "".join(self.log.read_text().splitlines(keepends=True)[-lines:]) if self.log.exists() else ""

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        """A controlled shutdown (SIGTERM, as kafka-server-stop.sh sends), SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


# SCRAM users of the SASL broker (and of the gateway it is compared with): admin a super user
SASL_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
SASL_MECHANISM = "SCRAM-SHA-256"


@dataclass
class SaslKafkaBroker(KafkaBroker):
    """The same node with a second listener, SASL_PLAINTEXT with SCRAM-SHA-256, whose users
    (SASL_USERS) are created as Kafka's tools create them, by `kafka-storage format --add-scram`;
    User:admin is a super user, the others have what ACLs give them. Its own fixture, so the
    ACLs and users its tests make touch no other test's broker."""

    sasl_port: int = field(default_factory=free_port)

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def format_args(self) -> list[str]:
        return [*FORMAT_FEATURES, *(a for user, password in SASL_USERS.items()
                                    for a in ("--add-scram", f"{SASL_MECHANISM}=[name={user},password={password}]"))]

    def properties(self) -> str:
        plain = f"PLAINTEXT://127.0.0.1:{self.port}"
        sasl = f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
        return "\n".join([
            line.replace(plain, f"{plain},{sasl}") if "listeners=" in line
            else line.replace("super.users=User:ANONYMOUS", "super.users=User:ANONYMOUS;User:admin")
            for line in super().properties().splitlines()] + [
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"sasl.enabled.mechanisms={SASL_MECHANISM}",
            f"listener.name.sasl_plaintext.{SASL_MECHANISM.lower()}.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            ""])


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
