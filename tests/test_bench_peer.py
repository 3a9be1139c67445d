"""`gateway bench --peer` with Apache Kafka 4.4 as the peer: a short run's table has Kafka's rows
and every server's CPU per record (figures, not their size: nothing here is timed), as `--txn`'s
table has it per transaction; the CPU read from /proc over a measured interval, and a checkout
without Kafka's jars told what to run."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gateway.bench import kafka_broker, peer, txn
from gateway.bench.common import CpuSpan, Progress, Server, bench_redis, print_table


def test_a_span_counts_the_cpu_of_a_server_over_its_interval_alone():
    me = [Server("this", os.getpid())]
    spans = [CpuSpan(me), CpuSpan(me)]
    for span in spans:
        span.start()
        deadline = time.process_time() + 0.1  # CPU this process spends, which the span must see
        while time.process_time() < deadline:
            pass
        span.stop()
    assert all(span.per(1)["this"] >= 0.05e6 for span in spans)  # /proc counts in clock ticks: roughly
    joined = CpuSpan.union(spans)
    assert (joined.started, joined.stopped) == (spans[0].started, spans[1].stopped)
    assert joined.per(1)["this"] >= max(span.per(1)["this"] for span in spans)


def test_a_span_counts_the_processes_a_server_forked_and_reaped():
    """As Redis forks its AOF rewrites: the child's CPU is the server's."""
    span = CpuSpan([Server("this", os.getpid(), tree=True)])
    span.start()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child burns CPU and leaves
        deadline = time.process_time() + 0.2
        while time.process_time() < deadline:
            pass
        os._exit(0)
    os.waitpid(child, 0)
    span.stop()
    assert span.per(1)["this"] >= 0.1e6  # the child's, which this process did not spend itself


def test_without_kafkas_jars_the_bench_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setattr(kafka_broker, "JVM_MODULE", tmp_path)
    with pytest.raises(kafka_broker.KafkaMissing) as missing:
        kafka_broker.classpath()
    assert "./dev gateway bench --peer" in str(missing.value)
    assert str(tmp_path / "target" / "classpath.txt") in str(missing.value)


@pytest.mark.jvm
@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_short_peer_run_has_kafkas_rows_and_the_cpu_of_every_server(capsys):
    with Progress(0.2), bench_redis(None, False) as url:
        rows = peer.measure_peer(url, [100], 0.2, partition_counts=(1,))
    by_name = {r.what: r for r in rows}
    for verb in ("produce", "consume"):
        kafka, gateway = by_name[f"kafka {verb}, 1 partition"], by_name[f"gateway {verb}, 1 partition"]
        assert kafka.records_per_s > 0 and set(kafka.cpu_us) == {"kafka"} and kafka.cpu_us["kafka"] > 0
        assert gateway.baseline == "kafka" and gateway.baseline_records_per_s == kafka.records_per_s
        # /proc counts CPU in clock ticks (10 ms): a server busy for less in a short run reads 0
        assert set(gateway.cpu_us) == {"gateway", "redis"} and sum(gateway.cpu_us.values()) > 0
    for producers in ("1 producer", "8 producers"):
        txns = by_name[f"kafka txns/s, {producers}, 1 partition"]
        assert txns.records_per_s > 0 and txns.cpu_us["kafka"] > 0
        assert by_name[f"gateway txns/s, {producers}, 1 partition"].baseline == "kafka"
    assert set(by_name["raw redis: XADD of blobs, 1 partition"].cpu_us) == {"redis"}
    capsys.readouterr()
    print_table(rows)
    table = capsys.readouterr().out.splitlines()
    assert "cpu µs/rec" in table[0]
    kafka_line = next(line for line in table if line.startswith("kafka produce, 1 partition"))
    column = table[0].index("cpu µs/rec") + len("cpu µs/rec")
    assert float(kafka_line[:column].split()[-1]) == round(by_name["kafka produce, 1 partition"].cpu_us["kafka"], 2)
    assert any(line.strip().startswith("cpu: µs/rec gateway ") and ", redis " in line for line in table)


def test_the_bench_kafka_is_the_broker_a_user_starts(tmp_path):
    """config/server.properties' settings and kafka-server-start.sh's heap, not the suite's test settings."""
    broker = kafka_broker.KafkaBroker(Path(tmp_path))
    props = dict(line.split("=", 1) for line in broker.properties().splitlines())
    assert props["num.io.threads"] == "8" and props["log.dirs"] == str(tmp_path / "data")
    assert "group.initial.rebalance.delay.ms" not in props and "authorizer.class.name" not in props
    assert "-Xmx1G" in broker.jvm_options and broker.features == []


@pytest.mark.kafka
def test_the_txn_table_has_the_servers_cpu_per_transaction():
    with bench_redis(None, False) as url:
        rows = txn.measure_txn(url, 0.2, producers=2)
    assert [set(r.cpu_us) for r in rows] == [{"redis"}, {"gateway", "redis"}, {"gateway", "redis"}] * 2
    assert all(sum(r.cpu_us.values()) > 0 for r in rows if r.what.startswith("kafka"))
