"""Transactions V2 through a gateway SIGKILL (issue 34): Kafka 4.4's Java producer, on two gateways
with transaction.version 2 finalized, sends transactions of keyed records while its transaction
coordinator is killed mid-stream and started again. It aborts and resends what an abortable error
cut short and retries a commit that timed out, as its javadoc tells an application to; read_committed
then reads every record exactly once, none of an aborted transaction, and the producer's epoch has
moved at every EndTxn, as only V2 moves it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import eventually
from tests.differential import side
from tests.kafka_jvm import java_command
from tests.test_gateway_failover import _drain, consume_all, gateway_pair, txn_coordinator

pytestmark = [pytest.mark.kafka, pytest.mark.jvm, pytest.mark.slow]

TOPIC, PARTITIONS = "v2-failover", 4
N, CHUNK = 2000, 50
KILL_AT = 600  # records committed before the kill: the next transaction is on its way
TID = "v2-failover"


async def _finalize_v2(bootstrap: str) -> None:
    async with side("gateway", bootstrap) as s:
        answer = await s.call(57, 1, {"timeout": 10_000, "validate_only": False, "feature_updates": [
            {"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1}]})
        assert answer["error_code"] == 0, answer


async def _is_v2(bootstrap: str) -> bool:
    async with side("gateway", bootstrap) as s:
        answer = await s.call(18, 4, {"client_software_name": "test", "client_software_version": "1"})
    return {f["name"]: f["max_version_level"] for f in answer["finalized_features"]}.get("transaction.version") == 2


async def _epoch(bootstrap: str) -> int:
    async with side("gateway", bootstrap) as s:
        answer = await s.call(65, 0, {"transactional_ids": [TID]})
    return int(answer["transaction_states"][0]["producer_epoch"])


async def test_a_v2_java_producer_commits_each_record_once_through_a_gateway_sigkill(
    redis_url: str, tmp_path: Path
) -> None:
    with gateway_pair(redis_url, tmp_path, ["--lease-ms", "1500", "--log-level", "WARNING"], {TOPIC: PARTITIONS}) as (a, b):
        await _finalize_v2(a.kafka_bootstrap)
        for gp in (a, b):  # finalized in Redis, so for both
            await eventually(lambda gp=gp: _is_v2(gp.kafka_bootstrap), 30, "transaction.version 2")
        if await asyncio.to_thread(txn_coordinator, a, TID) == b.node_id:
            a, b = b, a  # `a` is the one to kill: the producer's transaction coordinator
        with (tmp_path / "producer.log").open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                *java_command("gateway.jvm.ProduceExactlyOnce", f"{a.kafka_bootstrap},{b.kafka_bootstrap}", TOPIC,
                              str(N), str(CHUNK), f"transactional.id={TID}", "transaction.timeout.ms=20000",
                              "linger.ms=5"),
                stdout=asyncio.subprocess.PIPE, stderr=log)
            assert proc.stdout is not None
            lines, killed = [], False
            try:
                async with asyncio.timeout(90):
                    async for raw in proc.stdout:
                        lines.append(raw.decode().strip())
                        if not killed and lines[-1].startswith("committed ") and int(lines[-1].split()[1]) >= KILL_AT:
                            a.kill()  # mid-stream: the next transaction's produce or EndTxn in flight to it
                            killed = True
                            await asyncio.to_thread(a.start)  # at its address again, as a restarted broker is
                            _drain(a)
                    assert await proc.wait() == 0, (tmp_path / "producer.log").read_text()[-4000:]
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        assert killed and lines[-1] == f"committed {N}", lines
        got = await asyncio.to_thread(consume_all, b.kafka_bootstrap, TOPIC, PARTITIONS)
        assert sorted(got) == [f"m-{i:05d}".encode() for i in range(N)]
        # V2 moves the epoch at every EndTxn (V1 only at InitProducerId): at least once per transaction
        assert await _epoch(b.kafka_bootstrap) >= N // CHUNK


