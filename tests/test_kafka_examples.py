"""The Kafka examples run as a user runs them: a separate process against a gateway."""

from __future__ import annotations

import pytest

from gateway.domain.log import committed_entries
from gateway.formats.records import iter_records
from tests.conftest import kafka_bootstrap, run_example

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("script", ["kafka_aiokafka.py", "kafka_confluent.py"])
async def test_example_produces_and_consumes(gateway, script):
    await gateway.services.log.create_topic("example", 3)
    code, text = await run_example(script, "--bootstrap", kafka_bootstrap(gateway), "--topic", "example",
                                   "--count", "12")
    assert code == 0, text
    assert "done: produced 12, consumed 12" in text, text
    assert sum([(await gateway.services.log.bounds("example", p))[1] for p in range(3)]) == 12


async def test_transactions_example_transforms_each_input_once(gateway):
    await gateway.services.log.create_topic("words", 2)
    await gateway.services.log.create_topic("shouts", 2)
    code, text = await run_example("kafka_transactions.py", "--bootstrap", kafka_bootstrap(gateway),
                                   "--seed", "30", "--idle-seconds", "2")
    assert code == 0, text
    assert "done: transformed 30" in text, text
    values = []
    for p in range(2):
        sl = await gateway.services.log.read("shouts", p, 0, 1000, read_committed=True)
        values += [r.value for e in committed_entries(sl) for r in iter_records(e.batch, e.base_offset)]
    assert sorted(values) == sorted(f"WORD {i}".encode() for i in range(30))
