"""Dead-letter and retry-letter topics for native consumers (Pulsar's DeadLetterPolicy and
reconsumeLater), done by the gateway: a message negatively acknowledged past max_redeliver_count
lands in `<topic>-<subscription>-DLQ` once; one reconsumed later comes back from
`<topic>-<subscription>-RETRY` with Pulsar's properties, and past the count goes to the DLQ too.
Across a gateway SIGKILL nothing is lost and no copy is written twice."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from gateway.client import Client, Consumer, DeadLetterPolicy, GatewayError, Message
from gateway.store import Store
from tests.conftest import GatewayProcess, eventually
from tests.test_gateway_failover import _drain

REDIS_BACKENDS = ("single", "cluster")  # the copy and its origin in different slots: each test on both
TIMEOUT = 30.0


async def test_a_message_nacked_past_the_count_is_dead_lettered_once(client: Client) -> None:
    dlq = await client.subscribe("jobs-work-DLQ", "audit", initial_position="earliest")
    consumer = await client.subscribe("jobs", "work", "shared", negative_ack_delay=0,
                                      dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2))
    producer = await client.create_producer("jobs")
    await producer.send(b"bad")
    seen = []
    while len(seen) < 3:  # delivered max_redeliver_count + 1 times, nacked each time
        msg = await consumer.receive(TIMEOUT)
        seen.append(msg.redelivery_count)
        await consumer.negative_acknowledge(msg)
    dead = await dlq.receive(TIMEOUT)
    await dlq.acknowledge(dead)
    await producer.send(b"good")  # what comes next on the subscription: the dead message does not
    good = await consumer.receive(TIMEOUT)
    assert seen == [0, 1, 2] and good.value == b"good"
    assert dead.value == b"bad"
    assert (dead.headers["REAL_TOPIC"], dead.headers["ORIGIN_MESSAGE_ID"]) == (b"jobs", b"jobs-0@0")


async def test_reconsume_later_comes_back_from_the_retry_topic_then_goes_to_the_dlq(client: Client) -> None:
    dlq = await client.subscribe("jobs-work-DLQ", "audit", initial_position="earliest")
    consumer = await client.subscribe("jobs", "work", "shared", retry_enable=True,
                                      dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2))
    producer = await client.create_producer("jobs")
    await producer.send(b"later", key=b"k", headers={"trace": b"t1"})
    got = []
    for _ in range(3):
        msg = await consumer.receive(TIMEOUT)
        got.append((msg.topic, msg.headers.get("RECONSUMETIMES"), msg.headers.get("DELAY_TIME")))
        await consumer.reconsume_later(msg, 0.2)
    dead = await dlq.receive(TIMEOUT)
    assert got == [("jobs", None, None), ("jobs-work-RETRY", b"1", b"200"), ("jobs-work-RETRY", b"2", b"200")]
    assert (dead.value, dead.key, dead.headers) == (b"later", b"k", {
        "trace": b"t1", "REAL_TOPIC": b"jobs", "ORIGIN_MESSAGE_ID": b"jobs-0@0", "RECONSUMETIMES": b"3",
        "DELAY_TIME": b"200"})


async def test_reconsume_later_needs_a_policy(client: Client) -> None:
    from gateway.client import NotAllowed

    consumer = await client.subscribe("jobs", "plain", "shared")
    producer = await client.create_producer("jobs")
    await producer.send(b"x")
    msg = await consumer.receive(TIMEOUT)
    with pytest.raises(NotAllowed, match="dead-letter policy"):
        await consumer.reconsume_later(msg, 1)
    await consumer.acknowledge(msg)  # the refusal lost nothing


N = 8  # messages of each kind


def start(gp: GatewayProcess) -> None:
    """Start (or start again on its ports) a gateway process whose output is read all along."""
    gp.start()
    _drain(gp)


async def _all(client: Client, topic: str) -> list[Message]:
    out: list[Message] = []
    for p in await client.list_partitions(topic):
        out += [m async for m in client.read_range(topic, p.partition, p.log_start)]
    return out


async def _acked(store: Store, topic: str, partition: int, offset: int) -> bool:
    """Whether subscription "work" has recorded the message's acknowledgement."""
    subs = store.subscriptions
    cursor = (await subs.positions(topic, range(partition + 1)))["work"][partition]
    return offset < cursor or offset in (await subs.acked_in(topic, "work", {partition: (offset, offset + 1)}))[partition]


async def _work(consumer: Consumer, history: list[tuple[str, bytes, int, bytes | None]], done: set[bytes],
                store: Store) -> None:
    """ok: acknowledged; bad: always nacked; retry: reconsumed later twice, then acknowledged. A step
    the gateway's death cut short leaves its message to come again; but an acknowledgement may have
    been recorded with only its answer cut off: that message is done once the subscription shows it."""
    unanswered: dict[bytes, tuple[str, int, int]] = {}
    while True:
        for value, (topic, partition, offset) in unanswered.items():
            if value not in done and await _acked(store, topic, partition, offset):
                done.add(value)
        if len(done) >= 2 * N:
            return
        msg = await consumer.receive(TIMEOUT)
        value = msg.value or b""
        history.append((msg.topic, value, msg.redelivery_count, msg.headers.get("RECONSUMETIMES")))
        try:
            if value.startswith(b"bad"):
                await consumer.negative_acknowledge(msg)
            elif value.startswith(b"retry") and msg.headers.get("RECONSUMETIMES") != b"2":
                await consumer.reconsume_later(msg, 0.3)
            else:
                unanswered[value] = (msg.topic, msg.partition, msg.offset)
                await consumer.acknowledge(msg)
                done.add(value)
        except GatewayError:
            with contextlib.suppress(GatewayError):
                await consumer.negative_acknowledge(msg)


@pytest.mark.slow
async def test_dead_and_retry_letters_across_a_gateway_sigkill(redis_url: str, tmp_path: Path, store: Store) -> None:
    gp = GatewayProcess(tmp_path / "a", redis_url, args=["--lease-ms", "1500", "--log-level", "WARNING"])
    start(gp)
    try:
        async with await Client.connect(gp.native_url) as client:
            consumer = await client.subscribe("jobs", "work", "shared", negative_ack_delay=0.05, retry_enable=True,
                                              dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2))
            producer = await client.create_producer("jobs", batching=False)
            for i in range(N):
                for kind in (b"ok", b"bad", b"retry"):
                    await producer.send(kind + b"-%d" % i)
            history: list[tuple[str, bytes, int, bytes | None]] = []
            done: set[bytes] = set()
            work = asyncio.create_task(_work(consumer, history, done, store))
            await eventually(lambda: len(history) >= 2 * N or work.done(), TIMEOUT, "a third of the work")

            def restart() -> None:
                gp.kill()
                start(gp)

            await asyncio.to_thread(restart)  # while the consumer works on: steps in flight fail
            await asyncio.wait_for(work, 4 * TIMEOUT)
            dead = await eventually(lambda: _dead(client), TIMEOUT, "every bad message dead-lettered")
            retried = await _all(client, "jobs-work-RETRY")
    finally:
        gp.kill()
    assert done == {kind + b"-%d" % i for i in range(N) for kind in (b"ok", b"retry")}  # nothing lost
    assert isinstance(dead, list)
    assert sorted(m.value or b"" for m in dead) == sorted(b"bad-%d" % i for i in range(N))  # each once
    assert all(m.headers["REAL_TOPIC"] == b"jobs" and m.headers["ORIGIN_MESSAGE_ID"].startswith(b"jobs-0@")
               for m in dead)
    # each retry copy once: one with RECONSUMETIMES 1, one with 2, whatever the kill interrupted
    assert sorted((m.value, m.headers["RECONSUMETIMES"]) for m in retried) == sorted(
        (b"retry-%d" % i, n) for i in range(N) for n in (b"1", b"2"))
    # a bad message went out at most max_redeliver_count + 1 times, counted across the restart
    bad = [(v, c) for t, v, c, _ in history if v.startswith(b"bad")]
    assert all(c <= 2 for _, c in bad), bad


async def _dead(client: Client) -> list[Message] | None:
    dead = await _all(client, "jobs-work-DLQ")
    return dead if len(dead) >= N else None


@pytest.mark.slow
@pytest.mark.parametrize("step", ["before-point-of-no-return", "after-point-of-no-return"])
async def test_a_reconsume_cut_short_by_a_crash_is_done_once(redis_url: str, tmp_path: Path, step: str) -> None:
    """The gateway dies inside a reconsume's transaction: before its point of no return the
    transaction times out and the original comes again, to be reconsumed anew; after it, the next
    gateway rolls it forward. Either way one retry copy, and the original is acknowledged. The next
    gateway does not deliver the original while the transaction the crash left open holds it (its
    reconsume could only fail, and each try would count towards the dead-letter limit)."""
    gp = GatewayProcess(tmp_path / "a", redis_url, args=["--lease-ms", "1500", "--log-level", "WARNING"])
    gp.env = {**gp.env, "GATEWAY_CRASH_AT": step}
    start(gp)
    try:
        async with await Client.connect(gp.native_url) as client:
            # one redelivery, after the transaction the crash left open has ended
            consumer = await client.subscribe("jobs", "work", "shared", retry_enable=True,
                                              dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1))
            producer = await client.create_producer("jobs")
            await producer.send(b"once")
            msg = await consumer.receive(TIMEOUT)
            with pytest.raises(GatewayError):
                await consumer.reconsume_later(msg)
            assert gp.proc is not None and gp.proc.wait(10) == -9  # killed itself at the step
            gp.env.pop("GATEWAY_CRASH_AT")
            start(gp)
            if (msg := await consumer.receive(TIMEOUT)).topic == "jobs":  # the original, once its transaction ended
                assert step == "before-point-of-no-return"
                await consumer.reconsume_later(msg)
                msg = await consumer.receive(TIMEOUT)
            await consumer.acknowledge(msg)
            await producer.send(b"end")
            after = await consumer.receive(TIMEOUT)
            retried = await _all(client, "jobs-work-RETRY")
    finally:
        gp.kill()
    assert (msg.value, after.value) == (b"once", b"end")  # the original is not delivered again
    assert [(m.value, m.headers["RECONSUMETIMES"]) for m in retried] == [(b"once", b"1")]
