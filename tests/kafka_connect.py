"""Kafka Connect 4.4 in distributed mode, as `bin/connect-distributed.sh worker.properties` runs it,
from tests/jvm's classpath (connect-runtime, with the connect-file and connect-mirror plugins), and
its REST API as a user calls it. A worker's output goes to worker-N.log in its directory."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.store.embedded import free_port
from tests.kafka_jvm import TIMEOUT, java_command

DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"
STARTED = "Kafka Connect started"  # Connect.start()'s line once the REST API serves
# what DistributedHerder logs, before the exception, when its work thread fails (the process stays)
HERDER_FAILED = "Uncaught exception in herder work thread"


@dataclass
class ConnectWorker:
    """One distributed worker of the cluster `group` on `bootstrap`; `settings` add to or replace its
    worker properties (exactly-once source support is on unless they say otherwise)."""

    dir: Path
    bootstrap: str
    group: str = "connect-cluster"
    settings: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[str] | None = None
    runs: int = 0
    lines: list[str] = field(default_factory=list)  # this run's log so far
    grew: threading.Condition = field(default_factory=threading.Condition)
    copier: threading.Thread | None = None  # copies this run's output to its log and `lines`

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.dir / f"worker-{self.runs}.log"

    def properties(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{self.group}-configs",
            "offset.storage.topic": f"{self.group}-offsets",
            "status.storage.topic": f"{self.group}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.storage.partitions": "2",
            "status.storage.partitions": "2",
            "listeners": self.url,
            # the plugins' ServiceLoader manifests (KIP-898): no scan of every jar on the classpath
            "plugin.discovery": "service_load",
            "exactly.once.source.support": "enabled",
            # sinks read what exactly-once sources committed, nothing of an aborted transaction
            "consumer.isolation.level": "read_committed",
            "offset.flush.interval.ms": "500",
            # a SIGKILLed worker's tasks go to whoever is left at once, not after KIP-415's 5 minutes
            "scheduled.rebalance.max.delay.ms": "0",
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "1000",
            **self.settings,
        }

    def start(self, timeout: float = TIMEOUT) -> None:
        """Start the worker and return once it serves REST; fail, quoting its log, if it stops first."""
        self.runs += 1
        self.lines = []
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "worker.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        self.proc = subprocess.Popen(java_command(DISTRIBUTED, str(config), options=["-Xmx512m"], log_level="INFO"),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.copier = threading.Thread(target=self._copy_log, daemon=True)
        self.copier.start()
        self.logged(STARTED, timeout)

    def _copy_log(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.log.open("w") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                with self.grew:
                    self.lines.append(line)
                    self.grew.notify_all()
        with self.grew:
            self.lines.append("")  # the end of its output
            self.grew.notify_all()

    def logged(self, pattern: str, timeout: float = TIMEOUT, then: int = 0) -> str:
        """The first log line matching `pattern` (a regular expression), or the `then`-th after it,
        awaited; the worker stopping first fails."""
        with self.grew:
            found = self.grew.wait_for(lambda: self._line(pattern, then) is not None, timeout)
            assert found, f"the Connect worker logged no {pattern!r} within {timeout}s; its log: {self.log}"
            line = self._line(pattern, then)
        assert line, f"the Connect worker stopped before its {pattern!r}; its log: {self.log}"
        return line

    def _line(self, pattern: str, then: int) -> str | None:
        """The line wanted, "" if the output ended first, None while it may still come."""
        for i, line in enumerate(self.lines):
            if line == "":
                return ""
            if re.search(pattern, line):
                return self.lines[i + then] if i + then < len(self.lines) else None
        return None

    def kill(self) -> None:
        """SIGKILL: no shutdown, its producers and group membership left behind. Returns once its
        output is all copied, so that a restart's log starts afresh."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.copier is not None:
            self.copier.join(10)

    async def rest(self, method: str, path: str, body: object = None) -> Any:
        """One call of the worker's REST API, in a thread (a gateway under test may share the loop):
        the decoded JSON answer, or an `HTTPError`'s status and body as {"status", "error"}."""

        def call() -> Any:
            data = None if body is None else json.dumps(body).encode()
            request = urllib.request.Request(self.url + path, data=data, method=method,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    text = answer.read()
            except urllib.error.HTTPError as exc:
                return {"status": exc.code, "error": exc.read().decode()}
            return json.loads(text) if text else None

        return await asyncio.to_thread(call)


async def start_workers(*workers: ConnectWorker) -> None:
    """Start each worker, in a thread (their gateway may share this loop)."""
    for worker in workers:
        await asyncio.to_thread(worker.start)
