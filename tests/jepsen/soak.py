"""The soak: random fault schedules, one after another in fresh labs, for as long as asked; by hand,
not in CI. Each run's schedule and seed are printed, so an anomaly is replayed with the same seed;
its histories and logs are kept under tests/jepsen/artifacts. Exits 1 if any run found an anomaly.

    python -m tests.jepsen.soak --minutes N --seed S [--workloads idempotent,share,...]

Each run draws MIX of the history workloads from its seed (tests/jepsen/workloads), beside acks=1's smoke workload
that allows for a failover, unless --workloads names the ones to run every time.
    python -m tests.jepsen.soak --minutes 0 --seed 0 --replay sentinel:76739130   (one run again)
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from tests.jepsen import faults
from tests.jepsen.faults import Fault
from tests.jepsen.lab import Lab
from tests.jepsen.schedules import FAILING_OVER, HISTORIES, WORKLOADS, Schedule, Step, run

SECONDS = 40  # each run's write phase
MIX = 3  # history workloads a run draws


def _menu(lab: Lab, rng: random.Random) -> Fault:
    """One fault drawn from all the kinds the topology allows."""
    g = rng.choice(lab.gateways)
    r = rng.choice(lab.redis)
    kinds = [
        lambda: faults.isolate_gateway(lab, g),
        lambda: faults.one_way([g], lab.redis),
        lambda: faults.one_way(lab.redis, [g]),
        lambda: faults.loss(lab, [rng.choice([g, r])], rng.choice([10, 30, 60])),
        lambda: faults.Delay(lab, g, rng.choice([50, 200, 800])),
        lambda: faults.Pause(g.services["gateway"]),
        lambda: faults.Kill(lab, g.services["gateway"]),
        lambda: faults.ClockJump(lab, g, rng.choice([-3600, -60, 60, 3600, 86400])),
        lambda: faults.Pause(r.services["redis-6379"]),
        lambda: faults.Kill(lab, r.services["redis-6379"]),
        lambda: faults.Partition(f"isolate {r.name}", [r], [h for h in (*lab.redis, *lab.gateways) if h is not r]),
    ]
    if lab.topology == "sentinel":
        kinds += [lambda: faults.isolate_primary(lab), lambda: faults.Pause(faults.primary_service(lab))]
    return rng.choice(kinds)()


def random_steps(lab: Lab, rng: random.Random) -> list[Step]:
    """Faults at random moments of the write phase, one at a time (each healed before the next starts,
    so that a Redis killed is started again before another is)."""
    steps, at = [], rng.uniform(1, 4)
    while at < SECONDS - 6:
        hold = min(rng.uniform(2, 10), SECONDS - 2 - at)  # healed before the final reads
        steps.append(Step(at, _menu(lab, rng), hold))
        at += hold + rng.uniform(1, 5)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--replay", metavar="TOPOLOGY:SEED", help="one run again, as a line printed names it")
    parser.add_argument("--workloads", help=f"of {', '.join(WORKLOADS)}: ones that allow for a failover, as random "
                        f"faults cause them (by default each run draws {MIX} of {', '.join(HISTORIES)})")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.minutes * 60
    runs = failed = 0
    while time.monotonic() < deadline or (args.replay and not runs):
        seed = rng.randrange(1 << 30)
        topology = rng.choice(["sentinel", "cluster"])
        if args.replay:
            topology, seed = args.replay.split(":")[0], int(args.replay.split(":")[1])
        schedule = Schedule(f"soak-{topology}", topology, seed, random_steps, seconds=SECONDS,
                            workloads=tuple(args.workloads.split(",")) if args.workloads
                            else (*random.Random(seed).sample(HISTORIES, MIX), *FAILING_OVER))  # as a replay draws
        with tempfile.TemporaryDirectory(prefix="jepsen-soak-") as root:
            try:
                outcome = run(schedule, Path(root))
            except Exception as exc:  # the lab itself: said, and the soak goes on
                print(f"{schedule.name} seed {seed}: the run failed: {exc!r}", flush=True)
                continue
        runs += 1
        failed += bool(outcome.anomalies)
        print(outcome, flush=True)
        if args.replay:
            break
    print(f"{runs} runs, {failed} with anomalies", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
