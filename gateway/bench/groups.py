"""`gateway bench --groups`: how long a consumer group of N members takes to settle after one more
member joins, with the classic protocol (eager `range`, and `cooperative-sticky`) against KIP-848's
consumer protocol, in the same run on the same gateway.

N-1 confluent-kafka consumers form a group over a topic of 2N partitions and settle; then the Nth
subscribes, and the clock runs until every member owns its share as the clients themselves report
it (each partition owned by exactly one member, every member two). Client and gateway settings
are the defaults users get, so the figures include the heartbeat intervals that pace each protocol:
a classic member hears of a rebalance on its next heartbeat (librdkafka's 3 s), a consumer-protocol
member on its next heartbeat at the interval the gateway gives (5 s, Kafka's default).
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

from gateway.bench.common import CLEAR_LINE, Progress, create_kafka_topic, running_gateway

PROTOCOLS = (
    ("classic, range (eager)", {"group.protocol": "classic", "partition.assignment.strategy": "range"}),
    ("classic, cooperative-sticky",
     {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"}),
    ("consumer (KIP-848), uniform", {"group.protocol": "consumer"}),
)
SETTLE_TIMEOUT = 120.0
"""Seconds a group may take to settle before the measurement is given up."""


class _Member:
    """A consumer polling in its own thread, publishing the partitions it owns after each poll."""

    def __init__(self, bootstrap: str, group: str, topic: str, conf: dict[str, str]) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  **conf})
        self.topic = topic
        self.owned: frozenset[int] = frozenset()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench member", daemon=True)

    def start(self) -> None:
        self.consumer.subscribe([self.topic])
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.05)
            self.owned = frozenset(tp.partition for tp in self.consumer.assignment())
        self.consumer.close()


def _settled(members: list[_Member], partitions: int) -> bool:
    """Every partition owned by exactly one member, and the members' shares differ by one at most."""
    owned = [m.owned for m in members]
    sizes = [len(o) for o in owned]
    return sum(sizes) == partitions and len(frozenset().union(*owned)) == partitions and max(sizes) - min(sizes) <= 1


def _wait_settled(members: list[_Member], partitions: int) -> float | None:
    """Seconds until the group settles, polled every 5 ms; None past `SETTLE_TIMEOUT`."""
    start = time.monotonic()
    while time.monotonic() - start < SETTLE_TIMEOUT:
        if _settled(members, partitions):
            return time.monotonic() - start
        time.sleep(0.005)
    return None


@dataclass(frozen=True)
class GroupRow:
    protocol: str
    members: int
    seconds: float | None  # None: not settled within SETTLE_TIMEOUT


def measure_join(bootstrap: str, members: int, conf: dict[str, str]) -> float | None:
    """Seconds for a group of `members` to settle after its last member joins."""
    topic, group = f"bench-groups-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    partitions = 2 * members
    create_kafka_topic(bootstrap, topic, partitions)
    group_members = [_Member(bootstrap, group, topic, conf) for _ in range(members)]
    try:
        Progress.doing_else(f"forming a group of {members - 1}")
        for m in group_members[:-1]:
            m.start()
        if _wait_settled(group_members[:-1], partitions) is None:
            return None
        Progress.doing_else("")
        group_members[-1].start()
        return _wait_settled(group_members, partitions)
    finally:
        for m in group_members:
            m.stop.set()
        for m in group_members:
            if m.thread.is_alive():
                m.thread.join(60)


def measure_groups(url: str, sizes: list[int]) -> list[GroupRow]:
    """Every row of `gateway bench --groups`: each protocol at each group size, on one gateway."""
    rows: list[GroupRow] = []
    with running_gateway(url) as ports:
        bootstrap = f"127.0.0.1:{ports['kafka']}"
        for n in sizes:
            for name, conf in PROTOCOLS:
                rows.append(GroupRow(name, n, measure_join(bootstrap, n, conf)))
                progress = Progress.active
                if progress is not None:
                    progress.stream.write(f"{CLEAR_LINE if progress.tty else ''}measured {name}, {n} members\n")
    return rows


def format_rows(rows: list[GroupRow]) -> str:
    """The table: one line per group size and protocol, seconds to settle after the last join."""
    width = max(len(r.protocol) for r in rows) if rows else 8
    lines = [f"{'members':>7}  {'protocol':<{width}}  seconds to settle after one member joins",
             "-" * (width + 52)]
    for r in rows:
        took = f"not settled in {SETTLE_TIMEOUT:.0f} s" if r.seconds is None else f"{r.seconds:.2f}"
        lines.append(f"{r.members:>7}  {r.protocol:<{width}}  {took}")
    return "\n".join(lines)
