"""One Apache Kafka 4.4 node in KRaft mode, broker and controller in one process, started from the
jars ./dev resolves into tests/jvm (target/classpath.txt): the peer of `gateway bench --peer` and
the suite's reference broker (tests/kafka_jvm.py adds the settings its tests need), one launcher
for both.

It runs as `kafka-server-start.sh config/server.properties` runs it: Kafka's own StorageTool formats
the storage (`kafka-storage.sh format --standalone`), then `kafka.Kafka` starts with the JVM options
of bin/kafka-server-start.sh and bin/kafka-run-class.sh and the settings of Kafka's
config/server.properties, on free loopback ports, its log on disk in `dir`.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from gateway.store.embedded import free_port

JVM_MODULE = Path(__file__).resolve().parents[2] / "tests" / "jvm"  # where ./dev builds Kafka's jars
TIMEOUT = 120.0
# a short-lived client or tool starts faster on the C1 compiler and the serial collector
CLIENT_JVM = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx512m"]
# bin/kafka-server-start.sh's KAFKA_HEAP_OPTS and bin/kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS
SERVER_JVM = ["-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
              "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
              "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true"]
# config/server.properties of Kafka 4.x beyond the listeners and log.dirs: one node's internal
# topics of one replica, the rest Kafka's defaults written out (so DescribeConfigs reports them as
# STATIC_BROKER_CONFIG, as on a broker a user starts)
SERVER_PROPERTIES = {
    "num.network.threads": "3",
    "num.io.threads": "8",
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "socket.request.max.bytes": "104857600",
    "num.partitions": "1",
    "num.recovery.threads.per.data.dir": "1",
    "offsets.topic.replication.factor": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "log.retention.hours": "168",
    "log.segment.bytes": "1073741824",
    "log.retention.check.interval.ms": "300000",
}


class KafkaMissing(RuntimeError):
    """Kafka's jars or Java 17 are not where ./dev puts them: the message says what to run."""


def java17_home() -> str:
    """Kafka 4.4 and Spark 4 run on Java 17; a newer JDK on the machine must not be picked up by accident."""
    homes = sorted(Path("/usr/lib/jvm").glob("java-17-openjdk-*"))
    if not homes:
        raise KafkaMissing("Java 17 is missing: ./dev installs Debian's openjdk-17-jre-headless")
    return str(homes[0])


def classpath() -> str:
    """tests/jvm's classes (its Log4j configuration among them) and Kafka 4.4's jars, as ./dev built them."""
    listed = JVM_MODULE / "target" / "classpath.txt"
    if not listed.is_file():
        raise KafkaMissing(f"Apache Kafka's jars are not built ({listed} is missing): `./dev gateway bench "
                           "--peer` or `./dev test` in a checkout of this repository builds them")
    return os.pathsep.join([str(JVM_MODULE / "target" / "classes"), listed.read_text().strip()])


def java_command(main: str, *args: str, options: list[str] = CLIENT_JVM, log_level: str = "WARN") -> list[str]:
    """`java` running `main` from tests/jvm's classpath; Log4j writes to stderr at `log_level`."""
    return [str(Path(java17_home()) / "bin" / "java"), *options, f"-Dlog.level={log_level}",
            "-cp", classpath(), main, *args]


def random_cluster_id() -> str:
    """What `kafka-storage random-uuid` prints: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


@dataclass
class KafkaBroker:
    """One node in `dir` (its storage, server.properties and log, broker.log, which stays there after
    the run). `settings` beside the listeners: config/server.properties' unless given; `features` go
    to the storage format (`--feature name=level`); `jvm_options`: kafka-server-start.sh's unless given."""

    dir: Path
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    settings: dict[str, str] = field(default_factory=lambda: dict(SERVER_PROPERTIES))
    features: list[str] = field(default_factory=list)
    jvm_options: list[str] = field(default_factory=lambda: list(SERVER_JVM))
    proc: subprocess.Popen[str] | None = None
    started = "Kafka Server started"  # KafkaRaftServer's line once the broker serves clients

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.dir / "broker.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "start() first"
        return self.proc.pid

    def properties(self) -> str:
        own = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
        }
        return "".join(f"{k}={v}\n" for k, v in {**own, **self.settings}.items())

    def start(self, timeout: float = TIMEOUT) -> None:
        """Format the storage with Kafka's own StorageTool (with `features`), start the node and
        return once it logs that it serves; ports another process took meanwhile are chosen again."""
        for attempt in range(3):
            if self._start(timeout):
                return
            if attempt == 2 or "Address already in use" not in self.log.read_text():
                raise RuntimeError(f"the Kafka broker did not start; its log, {self.log}:\n{self.log_tail()}")
            self.choose_ports()

    def choose_ports(self) -> None:
        """Every listener's port chosen again, free now: another process took one after it was chosen."""
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
                         f"--cluster-id={random_cluster_id()}", "--config", str(config), *self.features),
            capture_output=True, text=True, timeout=timeout)
        if formatted.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{formatted.stdout}{formatted.stderr}")
        self.proc = subprocess.Popen(java_command("kafka.Kafka", str(config), options=self.jvm_options,
                                                  log_level="INFO"),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True)
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

    def __enter__(self) -> Self:
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
