"""Idempotent acks=all producers on many partitions, unique values, and a consumer polling beside them
(read_uncommitted), then the final read: nothing acknowledged lost, no duplicate, each partition in the
order each producer sent, polls where the log has them.

    python -m tests.jepsen.workloads.idempotent --bootstrap H:P[,H:P] --history FILE --seconds N --seed S
"""

from __future__ import annotations

import os
import random
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.jepsen.history import History
from tests.jepsen.workloads.common import arguments, create, delivered, final_read, record

PRODUCERS = 2
READER = "reader"


def topic(seed: int) -> str:
    return f"idempotent-{seed}"


def _poll(history: History, reader: Consumer) -> None:
    got = [record(m) for m in reader.consume(500, 0) if m.error() is None]
    if got:
        history.ok(READER, "poll", {"isolation": "read_uncommitted", "records": got})


def main() -> None:
    args = arguments(__doc__ or "")
    rng, name = random.Random(args.seed), topic(args.seed)
    with History(args.history) as history:
        create(args, name)
        producers = [Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True,
                               "linger.ms": 5, "message.timeout.ms": 60000, "request.timeout.ms": 10000,
                               # librdkafka says why it drains or bumps its epoch ("eos", a few lines a run;
                               # the soak's cluster:1039740058 left no word of it); JEPSEN_RDKAFKA_DEBUG=eos,msg
                               # adds every batch's error and retry, "" turns it off
                               **({"debug": debug} if (debug := os.environ.get("JEPSEN_RDKAFKA_DEBUG", "eos")) else {})})
                     for _ in range(PRODUCERS)]
        callbacks = [delivered(history, process) for process in range(PRODUCERS)]
        reader = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"reader-{args.seed}",
                           "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
        reader.assign([TopicPartition(name, p, 0) for p in range(args.partitions)])
        deadline, i = time.monotonic() + args.seconds, 0
        while time.monotonic() < deadline:
            process = rng.randrange(PRODUCERS)
            v, partition = f"{args.seed}-{i}", rng.randrange(args.partitions)
            history.invoke(process, "send", {"v": v, "t": name, "p": partition})
            try:
                producers[process].produce(name, value=v.encode(), partition=partition,
                                           on_delivery=callbacks[process])
            except KafkaException as exc:  # a fatal error (a sequence the partition lost): named, then the read
                history.info(process, "fatal", {"error": str(exc)})
                break
            i += 1
            producers[process].poll(0.002)
            if i % 20 == 0:
                _poll(history, reader)
        for producer in producers:
            producer.flush(180)
        reader.close()
        final_read(history, args, name)


if __name__ == "__main__":
    main()
