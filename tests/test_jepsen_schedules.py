"""The named fault schedules of tests/jepsen/schedules.py, each in a fresh lab, on the settings the
README recommends for production (acks=all, min.insync.replicas=2 over two Redis replicas, idempotent
producers): each must end with zero anomalies. A failure names each anomaly and the folder under
tests/jepsen/artifacts where the histories and every process's log were kept."""

from __future__ import annotations

import pytest

from tests.jepsen.schedules import SCHEDULES, Schedule, run

pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=[s.name for s in SCHEDULES])
def test_schedule(schedule: Schedule, tmp_path):
    outcome = run(schedule, tmp_path)
    assert not outcome.anomalies, str(outcome)
    if schedule.fails_over:  # the faults did what they are there for
        assert outcome.primaries[0] != outcome.primaries[1], str(outcome)
