"""The transactional workload's way out of librdkafka's wait on a group coordinator it decommissioned
(the soak's sentinel:602139520 and its family): on two gateway processes the group's coordinator is
killed and left out of the survivor's Metadata, as Kafka leaves out a broker fenced after
`broker.session.timeout.ms`; the real librdkafka transactional producer, told so, destroys that
broker's handle while its coordinator cache still names it, and its next send_offsets_to_transaction
waits on it past its own timeout (librdkafka issues 5511 and 5456). The workload fences it with a new
producer of the same transactional.id, as a user must, and processes the batch again: the checker
finds the history clean, every input committed once."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.jepsen.history import History, read
from tests.jepsen.schedules import WORKLOADS
from tests.jepsen.workloads.common import Feed, final_read
from tests.jepsen.workloads.transactional import Watchdog, Worker
from tests.test_gateway_failover import coordinator, gateway_pair, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SOURCE, SINK, PARTITIONS, SEED = "txn-in", "txn-out", 4, 5
TIMEOUT = 5.0  # the worker's API timeouts; send_offsets_to_transaction ignores its own, the watchdog does not


def test_a_step_blocked_on_a_decommissioned_group_coordinator_is_fenced_and_done_again(redis_url, tmp_path: Path):
    with gateway_pair(redis_url, tmp_path, ["--lease-ms", "1500", "--log-level", "WARNING"],
                      {SOURCE: PARTITIONS, SINK: PARTITIONS}) as (a, b):
        group = f"transactional-{SEED}"  # the worker's group and transactional.id
        if coordinator(a, group, 0) == b.node_id:
            a, b = b, a  # `a` is the one to kill: the group's coordinator
        args = argparse.Namespace(bootstrap=f"{a.kafka_bootstrap},{b.kafka_bootstrap}", seed=SEED,
                                  partitions=PARTITIONS)
        path = tmp_path / "transactional.history"
        with History(path) as history:
            feed = Feed(args, history, SOURCE)
            worker = Worker(args, history, SOURCE, SINK, timeout=TIMEOUT)
            steps = Watchdog(worker, stuck=60, grace=5)
            while worker.n < 3:  # transactions through both gateways: the producer's handles of both are up
                feed.send(PARTITIONS, lambda i: i % PARTITIONS)
                assert steps.step()

            a.kill()
            admin = AdminClient({"bootstrap.servers": b.kafka_bootstrap})
            wait_for(lambda: a.node_id not in admin.list_topics(timeout=10).brokers, 30, "a dropped from Metadata")
            worker.producer.list_topics(timeout=10)  # the producer learns it: librdkafka decommissions a's handle
            done = worker.n
            while worker.n == done:
                feed.send(PARTITIONS, lambda i: i % PARTITIONS)
                assert steps.step()
            assert steps.replaced == 1  # the first transaction since waited on the destroyed handle
            done = worker.n
            while worker.n < done + 3:  # the new producer's transactions
                feed.send(PARTITIONS, lambda i: i % PARTITIONS)
                assert steps.step()
            feed.flush()
            worker.close()
            final_read(history, args, SOURCE, SINK)
        assert WORKLOADS["transactional"].check(path) == []
        abandoned = [op for op in read(path) if op.f == "txn" and op.type == "info" and "error" in op.value]
        assert len(abandoned) == 1 and steps.replaced == 1
        assert sum(op.f == "txn" and op.type == "ok" and op.index > abandoned[0].index for op in read(path)) > 0
