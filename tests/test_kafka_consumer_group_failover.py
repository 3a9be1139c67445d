"""Consumer groups of the consumer protocol (confluent-kafka, `group.protocol=consumer`) through a
SIGKILL of the gateway coordinating them, two gateway processes over one Redis: the survivor takes
the group over from Redis (committed offsets kept, no partition given to two members, every record
consumed exactly once past committed offsets); and a consume-transform-produce loop whose offsets go
with the transaction (`send_offsets_to_transaction`, carrying the member epoch) goes on exactly once
through a SIGKILL and restart of its group's coordinator."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest

from gateway.store import Store
from tests import conftest
from tests.conftest import GatewayProcess
from tests.test_gateway_failover import _drain, gateway_pair
from tests.test_kafka_consumer_groups import Log, Member, consumed_once
from tests.test_kafka_txn import ck_read
from tests.test_kafka_txn_restart import transform

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TOPIC = "events"
SETTINGS = [
    "--lease-ms", "1500",  # a dead gateway drops out of Metadata and FindCoordinator within about this
    "--group-consumer-session-timeout-ms", "6000", "--group-consumer-heartbeat-interval-ms", "250",
    "--log-level", "WARNING",
]

eventually = functools.partial(conftest.eventually, timeout=60.0)


@pytest.fixture
def pair(redis_url: str, tmp_path: Path) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    with gateway_pair(redis_url, tmp_path, SETTINGS, {TOPIC: 4, "eos-out": 4}) as p:
        yield p


async def coordinator_of(store: Store, group: str, pair: tuple[GatewayProcess, GatewayProcess]) -> GatewayProcess:
    """The gateway holding the group's coordinator lease."""
    holder = await conftest.eventually(lambda: store.groups.owner(group), what=f"a coordinator for {group}")
    port = int(str(holder).split(" ")[2])
    return next(gp for gp in pair if gp.kafka_port == port)


def produce(bs: str, start: int, stop: int) -> None:
    p = ck.Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    for i in range(start, stop):
        p.produce(TOPIC, key=f"k{i}".encode(), value=f"m-{i}".encode())
    assert p.flush(30) == 0


async def test_a_group_survives_the_sigkill_of_its_coordinator(
    pair: tuple[GatewayProcess, GatewayProcess], store: Store
) -> None:
    bs = ",".join(gp.kafka_bootstrap for gp in pair)
    log = Log()
    members = [Member(n, bs, "gf", log, [TOPIC]).start() for n in ("a", "b")]
    await asyncio.to_thread(produce, bs, 0, 100)
    await eventually(lambda: all(len(m.owned) == 2 for m in members), what="two members sharing")
    await eventually(lambda: consumed_once(log, 100), what="the first 100 records")
    dead = await coordinator_of(store, "gf", pair)
    survivor = next(gp for gp in pair if gp is not dead)
    dead.kill()
    await asyncio.to_thread(produce, survivor.kafka_bootstrap, 100, 200)
    await eventually(lambda: consumed_once(log, 200), what="the records produced after the kill")
    assert await coordinator_of(store, "gf", pair) is survivor
    for m in members:
        await m.close()
    assert sorted(v for *_, v, _ in log.records) == sorted(f"m-{i}".encode() for i in range(200))
    log.check_single_owner()
    # the offsets committed through either gateway are all there: each partition's end
    committed_offsets = await store.groups.offsets("gf")
    assert sum(c.offset for c in committed_offsets.values()) == 200


INPUTS = 60


async def test_exactly_once_with_the_consumer_protocol_through_a_sigkill(
    pair: tuple[GatewayProcess, GatewayProcess], store: Store
) -> None:
    bs = ",".join(gp.kafka_bootstrap for gp in pair)
    await asyncio.to_thread(produce, bs, 0, INPUTS)
    kill, killed, failure = threading.Event(), threading.Event(), []

    def after_batch(n: int) -> None:
        if n == 2:  # produced, not yet committed: the test kills the group's coordinator now
            kill.set()
            assert killed.wait(30)

    def run() -> None:
        try:
            transform(bs, TOPIC, "eos-out", "eos", INPUTS, after_batch=after_batch, **{"group.protocol": "consumer"})
        except BaseException as exc:  # handed to the test's thread
            failure.append(exc)

    # librdkafka may block inside one call past its timeout: a thread of its own lets the test end
    worker = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    worker.start()
    await asyncio.to_thread(kill.wait, 30)
    # librdkafka keeps sending a transaction's offsets to the group coordinator it found first, even
    # once that broker is gone (see test_kafka_txn_restart): the killed gateway comes back at its address
    restarted = await coordinator_of(store, "eos", pair)
    restarted.kill()  # mid-transaction: its records sent, its offsets not
    await asyncio.to_thread(restarted.start)
    _drain(restarted)
    killed.set()
    await asyncio.to_thread(worker.join, 90)
    assert not worker.is_alive(), f"the loop stalled (still running after {time.monotonic() - started:.0f} s)"
    if failure:
        raise failure[0]
    out = await asyncio.to_thread(
        ck_read, restarted.kafka_bootstrap, "eos-out", 4, "read_committed", INPUTS, settle=0.5
    )
    assert sorted(out) == sorted(f"M-{i}".encode() for i in range(INPUTS))
