"""Named, seeded fault schedules: a lab, client workloads in its client namespaces, faults started and
healed on a timeline, everything healed, the workloads' final reads, and the checker.

A schedule's steps are drawn from its seed once the lab is up (which gateway, which moment within a
window), so a run is named by `<schedule> seed <n>` and repeats as such. On an anomaly the histories and
every process's log are kept under tests/jepsen/artifacts/<schedule>-<seed>-<time>/ (git-ignored)
and the failure names the anomaly and that folder.

Workloads are programs run as `python -m <module> --bootstrap H:P[,H:P] --native H:P[,H:P] --history FILE
--seconds N --seed S` in a client namespace: they write a history file and end with a final read. The
history workloads of tests/jepsen/workloads write every operation, for tests/jepsen/checker.py; each
schedule runs a mix of them, so that each runs under at least two kinds of fault, beside the smoke
workload (tests/jepsen/smoke.py, one JSON object) at acks=1, which holds that setting to what the
README's Guarantees say of it.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.jepsen import faults
from tests.jepsen.checker import check_file
from tests.jepsen.faults import Fault
from tests.jepsen.lab import REPO, Host, Lab

ARTIFACTS = REPO / "tests" / "jepsen" / "artifacts"


@dataclass
class Step:
    """`fault` started `at` seconds into the workloads, healed `hold` seconds later."""

    at: float
    fault: Fault
    hold: float


@dataclass(frozen=True)
class Workload:
    """A client program and the check of the history it writes (anomalies, one line each)."""

    name: str
    argv: Callable[[Lab, Path, int, int], list[str]]  # lab, history file, seconds, seed
    check: Callable[[Path], list[str]]


def _smoke(acks: str) -> Callable[[Lab, Path, int, int], list[str]]:
    def argv(lab: Lab, history: Path, seconds: int, seed: int) -> list[str]:
        return [sys.executable, "-m", "tests.jepsen.smoke", "--bootstrap", lab.bootstrap, "--seconds", str(seconds),
                "--topic", f"smoke-{acks}-{seed}", "--acks", acks, "--history", str(history)]
    return argv


def program(module: str, *extra: str) -> Callable[[Lab, Path, int, int], list[str]]:
    """The argv of a history workload, `python -m tests.jepsen.workloads.<module>` with the common flags
    and its own `extra`: registering one is `WORKLOADS[name] = Workload(name, program(module), <its check>)`."""
    def argv(lab: Lab, history: Path, seconds: int, seed: int) -> list[str]:
        return [sys.executable, "-m", f"tests.jepsen.workloads.{module}", "--bootstrap", lab.bootstrap,
                "--native", lab.native, "--history", str(history), "--seconds", str(seconds), "--seed", str(seed),
                *extra]
    return argv


def _read(history: Path) -> tuple[dict[int, tuple[int, int]], dict[int, list[tuple[int, int]]], list[str]]:
    """What was acknowledged where, where each value was read, and a failed final read's anomaly."""
    seen = json.loads(history.read_text())
    acked = {v: (p, o) for v, p, o in seen["acked"]}
    read: dict[int, list[tuple[int, int]]] = {}
    for v, p, o in seen["read"]:
        read.setdefault(v, []).append((p, o))
    failed = [f"final read failed (the topic lost or changed?): {seen['read_error']}"] if "read_error" in seen else []
    if not acked:
        failed.append("unavailable: nothing acknowledged in the whole run")
    return acked, read, failed


def check_smoke(history: Path, *, duplicates: bool = False, loss: bool = False) -> list[str]:
    """No acknowledged record lost or read elsewhere than where it was acknowledged, none read twice
    (an idempotent producer's duplicate). Without idempotence (acks=1) a retry may write a record
    twice (`duplicates`), and over a failover what the replicas had not received is lost (`loss`):
    the Guarantees in README.md, and no more."""
    acked, read, anomalies = _read(history)
    if anomalies:
        return anomalies
    for v, (p, o) in sorted(acked.items()):
        if v not in read:
            if not loss:
                anomalies.append(f"lost: value {v} acknowledged at partition {p} offset {o}, never read")
        elif (p, o) not in read[v] and not loss:
            anomalies.append(f"moved: value {v} acknowledged at partition {p} offset {o}, read at {read[v]}")
    if not duplicates:
        anomalies += [f"duplicate: value {v} read at {at}" for v, at in sorted(read.items()) if len(at) > 1]
    return anomalies


WORKLOADS: dict[str, Workload] = {
    # the history workloads, checked by tests/jepsen/checker.py on the production settings: no anomaly allowed
    "idempotent": Workload("idempotent", program("idempotent"), check_file),
    "transactional": Workload("transactional", program("transactional"), check_file),
    "groups-classic": Workload("groups-classic", program("groups", "--protocol", "classic"), check_file),
    "groups-consumer": Workload("groups-consumer", program("groups", "--protocol", "consumer"), check_file),
    "share": Workload("share", program("share"), check_file),
    "native": Workload("native", program("native"), check_file),
    "smoke": Workload("smoke", _smoke("all"), check_smoke),
    # acks=1 with the primary in place: at least once, nothing acknowledged lost
    "smoke-acks1": Workload("smoke-acks1", _smoke("1"), lambda h: check_smoke(h, duplicates=True)),
    # acks=1 over a failover: what was not replicated is lost, and its offsets taken by later records
    "smoke-acks1-failover": Workload("smoke-acks1-failover", _smoke("1"),
                                     lambda h: check_smoke(h, duplicates=True, loss=True)),
}

HISTORIES = tuple(name for name, w in WORKLOADS.items() if w.check is check_file)  # on production settings


@dataclass(frozen=True)
class Schedule:
    name: str
    topology: str
    seed: int
    steps: Callable[[Lab, random.Random], list[Step]]
    seconds: int = 24  # the workloads' write phase: the schedules' end 3 s after their last fault can heal
    workloads: tuple[str, ...] = HISTORIES
    why: str = ""
    fails_over: bool = False  # its faults must move a Redis primary: checked, so a fault that did nothing fails


@dataclass
class Outcome:
    schedule: str
    seed: int
    anomalies: list[str] = field(default_factory=list)
    kept: Path | None = None  # where the histories and logs were kept, on an anomaly
    faults: list[str] = field(default_factory=list)
    primaries: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())  # before, after

    def __str__(self) -> str:
        head = f"{self.schedule} seed {self.seed}: {len(self.anomalies)} anomalies under {', '.join(self.faults)}"
        return head + "".join(f"\n  {a}" for a in self.anomalies[:20]) + (f"\n  kept in {self.kept}" if self.kept else "")


def run(schedule: Schedule, root: Path, seed: int | None = None) -> Outcome:
    """Run `schedule` in a fresh lab under `root`; what the checker found comes back."""
    seed = schedule.seed if seed is None else seed
    rng = random.Random(seed)
    outcome = Outcome(schedule.name, seed)
    with Lab(root, schedule.topology) as lab:
        steps = sorted(schedule.steps(lab, rng), key=lambda s: s.at)
        outcome.faults = [str(s.fault) for s in steps]
        before = lab.primaries()
        clients = _start_workloads(lab, schedule, root, seed)
        try:
            _timeline(steps)
        finally:
            for s in steps:
                s.fault.heal()
        for name, (proc, history, log) in clients.items():
            if proc.wait(300) != 0 or not history.exists():
                outcome.anomalies.append(f"{name}: the workload failed ({proc.returncode}): see {log.name}")
            else:
                outcome.anomalies += [f"{name}: {a}" for a in WORKLOADS[name].check(history)]
        outcome.primaries = (before, lab.primaries())
        if outcome.anomalies:
            outcome.kept = _keep(root, schedule.name, seed)
    return outcome


def _start_workloads(lab: Lab, schedule: Schedule, root: Path, seed: int
                     ) -> dict[str, tuple[subprocess.Popen[bytes], Path, Path]]:
    started = {}
    for i, name in enumerate(schedule.workloads):
        host = lab.clients[i % len(lab.clients)]
        history, log = root / f"{name}.history", root / "logs" / f"{host.name}-{name}.log"
        with log.open("wb") as out:
            proc = host.popen(WORKLOADS[name].argv(lab, history, schedule.seconds, seed), stdout=out,
                              stderr=subprocess.STDOUT)
        started[name] = (proc, history, log)
    return started


def _timeline(steps: list[Step]) -> None:
    """Start and heal each fault at its moment: the schedule is a clock, so sleeping is what it does."""
    t0 = time.monotonic()
    events = sorted([(s.at, 0, s) for s in steps] + [(s.at + s.hold, 1, s) for s in steps], key=lambda e: e[:2])
    for at, heal, step in events:
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        step.fault.heal() if heal else step.fault.start()


def _keep(root: Path, name: str, seed: int) -> Path:
    kept = ARTIFACTS / f"{name}-{seed}-{time.strftime('%Y%m%dT%H%M%S')}"
    kept.mkdir(parents=True, exist_ok=True)
    for f in root.glob("*.history"):
        shutil.copy(f, kept)
    shutil.copytree(root / "logs", kept / "logs", dirs_exist_ok=True)
    return kept


# ---- the schedules

def _gateway(lab: Lab, rng: random.Random) -> Host:
    return rng.choice(lab.gateways)


def primary_isolated(lab: Lab, rng: random.Random) -> list[Step]:
    return [Step(rng.uniform(3, 6), faults.isolate_primary(lab), 10)]


def primary_paused(lab: Lab, rng: random.Random) -> list[Step]:
    return [Step(rng.uniform(3, 6), faults.Pause(faults.primary_service(lab)), 8)]


def gateway_cut_off(lab: Lab, rng: random.Random) -> list[Step]:
    g = _gateway(lab, rng)
    other = next(h for h in lab.gateways if h is not g)
    return [Step(rng.uniform(2, 4), faults.isolate_gateway(lab, g), 8),
            Step(rng.uniform(12, 13), faults.one_way([other], lab.redis), 5)]


def replication_cut_and_loss(lab: Lab, rng: random.Random) -> list[Step]:
    primary = lab.primary()
    replicas = [h for h in lab.redis if h is not primary]
    return [Step(rng.uniform(2, 4), faults.one_way([primary], replicas), 6),
            Step(rng.uniform(10, 11), faults.loss(lab, [_gateway(lab, rng)], 30), 6)]


def clocks_and_kills(lab: Lab, rng: random.Random) -> list[Step]:
    g1, g2 = lab.gateways
    return [Step(rng.uniform(2, 4), faults.ClockJump(lab, g1, rng.choice([3600, -3600])), 8),
            Step(rng.uniform(5, 7), faults.ClockJump(lab, g2, rng.choice([600, -600])), 6),
            Step(rng.uniform(12, 13), faults.Kill(lab, _gateway(lab, rng).services["gateway"]), 1)]


def cluster_primary_lost(lab: Lab, rng: random.Random) -> list[Step]:
    host = rng.choice(lab.redis)
    return [Step(rng.uniform(2, 4), faults.Kill(lab, host.services["redis-6379"]), 6),
            Step(rng.uniform(10, 11), faults.Delay(lab, _gateway(lab, rng), 150), 6)]


FAILING_OVER = ("smoke-acks1-failover",)  # where a primary may fail over: acks=1 may lose
STAYING = ("smoke-acks1",)  # where the primary stays: acks=1 loses nothing acknowledged
# each history workload runs under at least two kinds of fault
SCHEDULES = [
    Schedule("primary-isolated", "sentinel", 1, primary_isolated, seconds=19,
             fails_over=True, workloads=("idempotent", "groups-consumer", "native", *FAILING_OVER),
             why="the Sentinel primary and one gateway cut off with one Sentinel: the majority fails over "
                 "while clients still write through the gateway stuck with the old primary"),
    Schedule("primary-paused", "sentinel", 2, primary_paused, seconds=17,
             fails_over=True, workloads=("transactional", "groups-classic", "share", *FAILING_OVER),
             why="the primary SIGSTOPped past the Sentinels' patience, then resumed as if nothing happened"),
    Schedule("gateway-cut-off", "sentinel", 3, gateway_cut_off, seconds=21,
             workloads=("transactional", "share", "native", *STAYING),
             why="a gateway cut off from Redis while clients reach it, then another's requests to Redis lost one way"),
    Schedule("replication-cut-and-loss", "sentinel", 4, replication_cut_and_loss, seconds=20,
             workloads=("idempotent", "groups-classic", "share", *FAILING_OVER),
             why="the primary's packets to the other Redis hosts lost (acks=all must wait; their Sentinels, "
                 "hearing nothing, may fail it over), then packet loss at a gateway"),
    Schedule("clocks-and-kills", "sentinel", 5, clocks_and_kills, seconds=18,
             workloads=("transactional", "groups-consumer", "native", *STAYING),
             why="gateway clocks stepped an hour and ten minutes either way, then a gateway SIGKILLed and restarted"),
    Schedule("cluster-primary-lost", "cluster", 6, cluster_primary_lost, seconds=20,
             fails_over=True, workloads=("idempotent", "transactional", "groups-consumer", *FAILING_OVER),
             why="a Redis Cluster primary SIGKILLed (its replica takes over) and a gateway's Redis traffic delayed"),
]
