"""A gateway's wall-clock step moves nothing it stores or compares (gateway/clock.py): the gateway runs
under libfaketime, its wall clock stepped back two minutes, as the soak's ClockJump does (issue 33:
a transaction begun through such a gateway was reaped as timed out by another gateway 8 s in).

Without Redis's clock, this gateway would store the transaction's deadline two minutes early, so
the test, reading what is due on Redis's clock as any other gateway's reaper does, would find it
due at once; and its LogAppendTime would be two minutes behind."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.clock import now_ms
from gateway.store import Store
from tests.conftest import GatewayProcess
from tests.jepsen.lab import FAKETIME

STEP_S = -120
SLACK_MS = 10_000  # the gateway's reading of Redis's clock is off by half a round trip at most; the step is 120 s


async def test_a_wall_clock_step_moves_no_deadline_and_no_timestamp(tmp_path: Path, redis_url: str,
                                                                     store: Store) -> None:
    clock_file = tmp_path / "clock"
    clock_file.write_text("+0\n")
    gp = GatewayProcess(tmp_path / "data", redis_url)
    gp.env |= {"LD_PRELOAD": str(FAKETIME), "FAKETIME_TIMESTAMP_FILE": str(clock_file),
               "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    gp.start()
    try:
        clock_file.write_text(f"{STEP_S:+d}\n")  # a bad NTP step, after start-up: reread at every reading
        admin = AdminClient({"bootstrap.servers": gp.kafka_bootstrap})
        admin.create_topics([NewTopic("stamped", 1, 1, config={"message.timestamp.type": "LogAppendTime"})])[
            "stamped"].result(30)
        await store.sync_clock()  # this test counts on Redis's clock, as every gateway's reaper does
        producer = Producer({"bootstrap.servers": gp.kafka_bootstrap, "transactional.id": "stepped",
                             "transaction.timeout.ms": 60_000})
        producer.init_transactions(30)
        producer.begin_transaction()
        stamps: list[int] = []
        before = now_ms()
        producer.produce("stamped", b"x", on_delivery=lambda err, m: stamps.append(m.timestamp()[1]))
        assert producer.flush(30) == 0
        after = now_ms()
        assert await store.txn.due(now_ms()) == []  # its deadline is a minute ahead on Redis's clock
        producer.commit_transaction(30)
        assert len(stamps) == 1 and before - SLACK_MS <= stamps[0] <= after + SLACK_MS, (before, stamps, after)
    finally:
        gp.kill()
