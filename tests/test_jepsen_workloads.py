"""tests/jepsen's history workloads, each for a few seconds against an in-process gateway on the
suite's Redis, no faults: the checker finds zero anomalies in what they record, and the history holds
what the workload is there to exercise (acknowledged sends and polls; committed and aborted
transactions; assignments and commits of both group protocols; share-group acquisitions and
acceptances; native deliveries and acknowledgements), so a workload that did nothing cannot pass."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from gateway.server.gateway import Gateway
from tests.conftest import kafka_bootstrap, run_program
from tests.jepsen.history import read
from tests.jepsen.schedules import WORKLOADS

SECONDS = 4


PROGRAMS = {  # each workload's module and own flags, as tests/jepsen/schedules.py registers them
    "idempotent": ["idempotent"], "transactional": ["transactional"],
    "groups-classic": ["groups", "--protocol", "classic"], "groups-consumer": ["groups", "--protocol", "consumer"],
    "share": ["share"], "native": ["native"],
}


async def run_workload(gateway: Gateway, name: str, history: Path) -> Counter[tuple[str, str]]:
    """Run one workload to its end; (f, type) counts of its history."""
    module, *extra = PROGRAMS[name]
    code, out = await run_program(
        sys.executable, "-m", f"tests.jepsen.workloads.{module}", "--bootstrap", kafka_bootstrap(gateway),
        "--native", f"127.0.0.1:{gateway.listeners['native'].port}", "--history", str(history),
        "--seconds", str(SECONDS), "--seed", "7", "--partitions", "6", "--min-insync-replicas", "1", *extra,
        timeout=120)
    assert code == 0, out
    return Counter((op.f, op.type) for op in read(history))


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_a_workload_against_a_healthy_gateway_has_no_anomaly(gateway: Gateway, tmp_path: Path,
                                                                    name: str) -> None:
    history = tmp_path / f"{name}.history"
    ops = await run_workload(gateway, name, history)
    assert WORKLOADS[name].check(history) == []
    assert ops[("final", "ok")] == 1
    assert ops[("send", "ok")] > 20
    if name == "idempotent":
        assert ops[("poll", "ok")] > 0
    elif name == "transactional":
        assert ops[("txn", "ok")] > 0 and ops[("txn", "fail")] > 0 and ops[("seek", "ok")] > 0
    elif name.startswith("groups"):
        assert ops[("assign", "ok")] > 0 and ops[("poll", "ok")] > 0 and ops[("commit", "ok")] > 0
    elif name == "share":
        assert ops[("share-poll", "ok")] > 0 and ops[("share-ack", "invoke")] > 0
    else:
        assert ops[("receive", "ok")] > 0 and ops[("ack", "ok")] > 0
