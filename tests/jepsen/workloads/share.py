"""A share group (KIP-932): an idempotent feed writes the input; two members (confluent-kafka's
ShareConsumer, explicit acknowledgement) poll it and accept every record. Each poll records its
records' delivery counts and the client's monotonic clock around it, so the checker can tell a record
held by both members under live locks from one redelivered after its lock ran out. The group's lock
is set to its shortest, 15 s, so that a lock a fault left behind runs out within a run.

    python -m tests.jepsen.workloads.share --bootstrap H:P[,H:P] --history FILE --seconds N --seed S
"""

from __future__ import annotations

import time

import confluent_kafka as ck
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tests.jepsen.history import History
from tests.jepsen.workloads.common import arguments, create, fed, record

MEMBERS = 2
LOCK_MS = 15000  # Kafka's group.share.min.record.lock.duration.ms


class Member:
    def __init__(self, bootstrap: str, history: History, k: int, topic: str, group: str) -> None:
        self.history, self.process = history, f"share-{k}"
        self.consumer = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                          "share.acknowledgement.mode": "explicit"})
        self.consumer.subscribe([topic])
        self.since = time.monotonic()  # its previous poll's invocation: the client may acquire one poll ahead

    def close(self) -> None:
        self.consumer.close()

    def step(self) -> None:
        since, self.since = self.since, time.monotonic()
        self.history.invoke(self.process, "share-poll")
        try:
            got = [m for m in self.consumer.poll(0.1) if m.error() is None]
        except KafkaException as exc:
            self.history.info(self.process, "share-poll", {"error": str(exc)})
            return
        records = [record(m) for m in got]
        self.history.ok(self.process, "share-poll", {
            "records": records, "counts": [m.delivery_count() for m in got], "lock_ms": LOCK_MS,
            "since": since, "returned": time.monotonic()})
        if got:
            self.history.invoke(self.process, "share-ack", {"records": records, "at": time.monotonic()})
            for m in got:
                self.consumer.acknowledge(m)


def configure(bootstrap: str, group: str) -> None:
    """From the start of the log, and locks of LOCK_MS."""
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.record.lock.duration.ms", str(LOCK_MS), incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: a handle collected early fails the future
    admin.incremental_alter_configs([resource])[resource].result(60)


def main() -> None:
    args = arguments(__doc__ or "")
    topic = group = f"share-{args.seed}"
    with History(args.history) as history:
        create(args, topic)
        configure(args.bootstrap, group)
        fed(args, history, topic, [Member(args.bootstrap, history, k, topic, group) for k in range(MEMBERS)])


if __name__ == "__main__":
    main()
