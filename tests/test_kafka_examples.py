"""The Kafka examples run as a user runs them: the command in each one's header, in a separate
process against a gateway."""

from __future__ import annotations

import pytest

from gateway.domain.log import committed_entries
from gateway.formats.records import iter_records
from tests.conftest import run_example

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("script", ["kafka_aiokafka.py", "kafka_confluent.py"])
async def test_example_produces_and_consumes(gateway, script):
    await gateway.services.log.create_topic("demo", 3)  # keys spread over partitions
    code, text = await run_example(script, gateway)
    assert code == 0, text
    assert "done: produced 10, consumed 10" in text, text
    assert sum([(await gateway.services.log.bounds("demo", p))[1] for p in range(3)]) == 10


async def test_transactions_example_transforms_each_input_once(gateway):
    await gateway.services.log.create_topic("words", 2)
    await gateway.services.log.create_topic("shouts", 2)
    code, text = await run_example("kafka_transactions.py", gateway)
    assert code == 0, text
    assert "done: transformed 30" in text, text
    values = []
    for p in range(2):
        sl = await gateway.services.log.read("shouts", p, 0, 1000, read_committed=True)
        values += [r.value for e in committed_entries(sl) for r in iter_records(e.batch, e.base_offset)]
    assert sorted(values) == sorted(f"WORD {i}".encode() for i in range(30))
