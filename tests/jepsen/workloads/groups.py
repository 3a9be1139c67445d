"""A consumer group committing offsets: an idempotent feed writes the input; two members of one group,
on the classic protocol or KIP-848's consumer protocol (`--protocol`), poll it (read_committed) and
commit synchronously what they read of the partitions they hold; a commit that errs is `info` (it may
have landed). Each assignment is recorded, so the checker holds a member given a partition to resume
no lower than its group committed, and the committed offsets to never go back.

    python -m tests.jepsen.workloads.groups --protocol classic|consumer --bootstrap H:P[,H:P] --history FILE
        --seconds N --seed S
"""

from __future__ import annotations

import argparse

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.jepsen.history import History
from tests.jepsen.workloads.common import arguments, create, fed, record

MEMBERS = 2


class Member:
    def __init__(self, args: argparse.Namespace, history: History, k: int, topic: str, group: str) -> None:
        self.history, self.process, self.group = history, f"member-{k}", group
        self.held: set[tuple[str, int]] = set()  # what the last rebalance left it, as its callbacks say
        self.consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": group,
                                  "group.protocol": args.protocol, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                                  "socket.timeout.ms": 10000,  # a commit the faults hold up is info in 10 s, not 60
                                  **({"session.timeout.ms": 10000} if args.protocol == "classic" else {})})
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)

    def _assigned(self, _: Consumer, parts: list[TopicPartition]) -> None:
        self.held |= {(tp.topic, tp.partition) for tp in parts}
        if parts:
            self.history.ok(self.process, "assign", {"group": self.group,
                                                     "partitions": [[tp.topic, tp.partition] for tp in parts]})

    def _revoked(self, _: Consumer, parts: list[TopicPartition]) -> None:
        self.held -= {(tp.topic, tp.partition) for tp in parts}

    def close(self) -> None:
        self.consumer.close()

    def step(self) -> None:
        got = [record(m) for m in self.consumer.consume(50, 0.1) if m.error() is None]
        if not got:
            return
        self.history.ok(self.process, "poll", {"isolation": "read_committed", "records": got})
        ends = {(t, p): o + 1 for t, p, o, _ in got if (t, p) in self.held}  # a revoked one is not ours to commit
        if not ends:
            return
        value = {"group": self.group, "offsets": [[t, p, o] for (t, p), o in ends.items()]}
        self.history.invoke(self.process, "commit", value)
        try:
            done = self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()],
                                        asynchronous=False)
        except KafkaException as exc:
            self.history.info(self.process, "commit", {**value, "error": str(exc)})
            return
        errors = [str(tp.error) for tp in done or [] if tp.error is not None]
        if errors:
            self.history.info(self.process, "commit", {**value, "error": errors})
        else:
            self.history.ok(self.process, "commit", value)


def main() -> None:
    args = arguments(__doc__ or "", ("--protocol", {"choices": ["classic", "consumer"], "default": "classic"}))
    topic = group = f"group-{args.protocol}-{args.seed}"
    with History(args.history) as history:
        create(args, topic)
        fed(args, history, topic, [Member(args, history, k, topic, group) for k in range(MEMBERS)])


if __name__ == "__main__":
    main()
