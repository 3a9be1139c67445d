"""Dead-letter and retry-letter topics: one mechanism for the Kafka face's share groups (a record
rejected or over share.delivery.count.limit) and the native face's consumers (Pulsar's
DeadLetterPolicy and reconsumeLater).

A record given up on is copied to a dead-letter topic, then acknowledged on its subscription. The
copy's partition and the subscription are in different hash-tag slots, so the two cannot be one
script; exactly once comes from the copy instead: each record goes as the only batch of an
idempotent producer of its own, derived from where the record is (`letter_producer`). A gateway that
dies between the two leaves the record to be given up on again by the next one (its delivery count
is in Redis), and that second copy is the duplicate the append script's idempotence check drops.

A retry letter is a copy delivered later: it waits in the retry topic's delay buckets (PIP-195),
outside the log and its producer state, so it cannot be deduplicated that way. It is written and
the original acknowledged in one transaction (PIP-31): the delayed copy is held under the
transaction and the acknowledgement locked by it (PENDING_ACK) until the commit makes both real at
one point of no return; a gateway that dies before it leaves the transaction to time out, which
drops the copy and delivers the original again.

Pulsar's names, from PIP-58 (DeadLetterPolicy's retryLetterTopic, reconsumeLater) and its client
(`RetryMessageUtil`: RECONSUMETIMES, DELAY_TIME, REAL_TOPIC,
ORIGIN_MESSAGE_ID and the -RETRY/-DLQ suffixes; `ConsumerImpl.doReconsumeLater`: the first reconsume
sets REAL_TOPIC and ORIGIN_MESSAGE_ID, each one counts RECONSUMETIMES up, and past
maxRedeliverCount the message goes to the dead-letter topic instead; `processPossibleToDLQ`: a
message redelivered more than maxRedeliverCount times goes there with REAL_TOPIC and
ORIGIN_MESSAGE_ID added to its properties; `ConsumerBuilderImpl`: the topics default to
`<topic>-<subscription>-RETRY` and `<topic>-<subscription>-DLQ`). Pulsar's client does this itself
and non-atomically; here the gateway does it, exactly once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from gateway.domain.delay import DelayRequest, DelayService
from gateway.domain.log import LogService
from gateway.domain.subscriptions import Consumer, Delivery, Subscription
from gateway.domain.txn import TransactionCoordinator
from gateway.errors import NotAllowed
from gateway.formats.records import BatchBuilder, Record, iter_records

Header = tuple[str, bytes | None]

RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RETRY_SUFFIX = "-RETRY"
DLQ_SUFFIX = "-DLQ"

RECONSUME_TXN_TIMEOUT_MS = 10_000
"""A reconsume's own transaction is a few steps long: one left open by a gateway that died is
aborted this soon after, and the original delivered again."""


def dead_letter_topic(topic: str, subscription: str) -> str:
    return f"{topic}-{subscription}{DLQ_SUFFIX}"


def retry_letter_topic(topic: str, subscription: str) -> str:
    return f"{topic}-{subscription}{RETRY_SUFFIX}"


def origin_id(topic: str, partition: int, offset: int) -> str:
    """ORIGIN_MESSAGE_ID's value: the message id as the native client prints it."""
    return f"{topic}-{partition}@{offset}"


@dataclass(frozen=True)
class LetterPolicy:
    """A native consumer's DeadLetterPolicy, its topics resolved: after `max_redeliver_count`
    redeliveries (or reconsumes) a message goes to `dead_letter_topic`; `reconsume_later` sends it
    to `retry_letter_topic`."""

    max_redeliver_count: int
    dead_letter_topic: str
    retry_letter_topic: str

    @classmethod
    def resolve(cls, topic: str, subscription: str, max_redeliver_count: int, dead: str = "",
                retry: str = "") -> LetterPolicy:
        return cls(max_redeliver_count, dead or dead_letter_topic(topic, subscription),
                   retry or retry_letter_topic(topic, subscription))


def letter_producer(subscription: str, topic: str, partition: int, offset: int) -> int:
    """The producer id a record's dead-letter copy is written with: derived from where the record
    is, in the upper half of the id space (InitProducerId counts up from 1, never reaching it)."""
    digest = hashlib.blake2b(f"{subscription}\0{topic}\0{partition}\0{offset}".encode(), digest_size=8).digest()
    return (1 << 62) | (int.from_bytes(digest, "big") & ((1 << 62) - 1))


class Letters:
    """Copies records to dead-letter topics (both faces) and retry-letter topics (the native one)."""

    def __init__(self, log: LogService, delay: DelayService | None = None,
                 txn: TransactionCoordinator | None = None) -> None:
        self.log = log
        self.delay = delay
        self.txn = txn

    async def dead_letter(self, target: str, subscription: str, topic: str, d: Delivery, offsets: list[int],
                          headers: Callable[[Record], list[Header]]) -> int:
        """Copy these records of a delivery to `target`, each with the headers `headers(record)` gives;
        how many were written (a copy written before is not written again)."""
        wanted = set(offsets)
        info = await self.log.topic(target)
        batches: list[tuple[str, int, bytes | memoryview]] = []
        for r in iter_records(d.entry.batch, d.entry.base_offset):
            if r.offset not in wanted:
                continue
            b = BatchBuilder(producer_id=letter_producer(subscription, topic, d.partition, r.offset),
                             producer_epoch=0, base_sequence=0)
            b.append(r.value, r.key, headers(r))
            batches.append((target, d.partition % info.partitions, b.build()))
        if not batches:
            return 0
        written = 0
        for produced in await self.log.append(batches, control=True):
            if isinstance(produced.result, Exception):
                raise produced.result
            written += not produced.result.duplicate
        return written

    def attach(self, sub: Subscription, policy: LetterPolicy) -> None:
        """A native consumer's policy on its subscription (the policy attached last counts): a message
        delivered max_redeliver_count + 1 times is dead-lettered instead of delivered again, with
        Pulsar's REAL_TOPIC and ORIGIN_MESSAGE_ID beside its own properties (kept when it has them,
        as a retry letter does)."""
        if policy.max_redeliver_count <= 0:
            return
        sub.delivery_limit = policy.max_redeliver_count + 1

        async def archived(d: Delivery) -> None:
            def why(r: Record) -> list[Header]:
                have = {name for name, _ in r.headers}
                out: list[Header] = list(r.headers)
                if REAL_TOPIC not in have:
                    out.append((REAL_TOPIC, sub.topic.encode()))
                if ORIGIN_MESSAGE_ID not in have:
                    out.append((ORIGIN_MESSAGE_ID, origin_id(sub.topic, d.partition, r.offset).encode()))
                return out

            await self.dead_letter(policy.dead_letter_topic, sub.name, sub.topic, d, sorted(d.offsets), why)

        sub.on_archive = archived

    async def reconsume_later(self, consumer: Consumer, partition: int, offset: int, delay_ms: int,
                              policy: LetterPolicy) -> None:
        """Pulsar's reconsumeLater, done by the gateway: the message the consumer holds goes to the
        retry-letter topic, delivered after `delay_ms`, with RECONSUMETIMES counted up (past the
        policy's max_redeliver_count, to the dead-letter topic instead), and is acknowledged."""
        sub = consumer.subscription
        if sub is None:
            raise NotAllowed("the consumer is closed")
        if not 0 <= partition < sub.partitions:
            raise NotAllowed(f"{sub.topic} has no partition {partition}")
        d = sub.outstanding[partition].get(offset)
        if d is None or d.consumer is not consumer:
            raise NotAllowed(f"message {origin_id(sub.topic, partition, offset)} is not held by this consumer")
        (rec,) = [r for r in iter_records(d.entry.batch, d.entry.base_offset) if r.offset == offset]
        props = dict(rec.headers)
        try:
            times = int((props.get(RECONSUMETIMES) or b"0").decode()) + 1
        except (UnicodeDecodeError, ValueError):
            times = 1
        first: list[Header] = []
        if RECONSUMETIMES not in props:
            first = [(REAL_TOPIC, sub.topic.encode()), (ORIGIN_MESSAGE_ID, origin_id(sub.topic, partition, offset).encode())]
        counts: list[Header] = [(RECONSUMETIMES, str(times).encode()), (DELAY_TIME, str(delay_ms).encode())]
        kept = [(k, v) for k, v in rec.headers if k not in (RECONSUMETIMES, DELAY_TIME)]
        if times > policy.max_redeliver_count:
            await self.dead_letter(policy.dead_letter_topic, sub.name, sub.topic, d, [offset],
                                   lambda r: [*kept, *first, *counts])
            await sub.acknowledge({partition: [offset]}, {})
            return
        assert self.delay is not None and self.txn is not None, "reconsume needs the delay and transaction services"
        b = BatchBuilder()
        b.append(rec.value, rec.key, [*kept, *first, *counts])
        info = await self.log.topic(policy.retry_letter_topic)
        txn_id = str(await self.txn.begin(RECONSUME_TXN_TIMEOUT_MS))
        target = (policy.retry_letter_topic, partition % info.partitions)
        try:
            await self.txn.add_partitions(txn_id, [target])  # its end settles the copy held there
            await self.delay.schedule([DelayRequest(*target, b.build(), self.delay.clock() + delay_ms, txn_id)])
            await self.txn.add_subscriptions(txn_id, [(sub.topic, partition, sub.name)])
            await sub.acknowledge({partition: [offset]}, {}, txn_id)
        except BaseException:
            await self.txn.end(txn_id, False)
            raise
        await self.txn.end(txn_id, True)
