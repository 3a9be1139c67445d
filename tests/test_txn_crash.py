"""SIGKILL at each step of a commit: the transaction ends the same way on every partition,
nothing lost, nothing twice. The coordinator runs in its own process that kills itself with
SIGKILL at the chosen step (GATEWAY_CRASH_AT); a fresh coordinator then takes over. The same for
a group commit of several transactions at one point of no return, and for a Kafka producer's
transaction on transactions V2 (KIP-890 part 2: partitions added as Produce v12 adds them, the epoch
bumped by EndTxn v5 in the point of no return, so a write of the old epoch is fenced after the
takeover whenever the commit got that far)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from gateway.clock import now_ms
from gateway.domain.fence import FenceService
from gateway.domain.log import LogService, committed_entries
from gateway.domain.producer_txn import TransactionalProducers
from gateway.domain.txn import ABORTED, COMMITTED, TransactionCoordinator
from gateway.errors import ProducerFenced
from gateway.formats.records import iter_records
from gateway.store import Store

COMMITTER = textwrap.dedent("""
    import asyncio, sys
    from gateway.domain.log import LogService
    from gateway.formats.records import BatchBuilder
    from gateway.store import Store
    from gateway.domain.txn import TransactionCoordinator
    from gateway.domain.fence import FenceService
    from gateway.domain.producer_txn import TransactionalProducers

    async def main(url: str, count: int) -> None:
        store = Store.open(url)
        logs = LogService(store, auto_create=False)
        tc = TransactionCoordinator(store, default_timeout_ms=1000)
        if count == 0:  # a Kafka producer on transactions V2
            producers = TransactionalProducers(store, tc, FenceService(store, tc))
            pid, epoch = await producers.init("crash-v2", 1000)
            parts = [("crash", 0), ("crash", 1), ("crash", 2)]
            await producers.add_partitions("crash-v2", pid, epoch, parts)  # what Produce v12 does
            for t, p in parts:
                b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
                b.append(b"t0-v%d" % p)
                await logs.append([(t, p, b.build())])
            print((await producers.fence.get("", "crash-v2")).txn, flush=True)
            await producers.end("crash-v2", pid, epoch, True, bump=True)
            return
        txns = []
        for n in range(count):
            txn = await tc.begin()
            info = await tc.describe(txn)
            parts = [("crash", 0), ("crash", 1), ("crash", 2)]
            await tc.add_partitions(txn, parts)
            for t, p in parts:
                b = BatchBuilder(producer_id=info.producer_id, producer_epoch=info.producer_epoch,
                                 base_sequence=0, transactional=True)
                b.append(b"t%d-v%d" % (n, p))
                await logs.append([(t, p, b.build())])
            txns.append(str(txn))
        print(" ".join(txns), flush=True)
        if count == 1:
            await tc.end(txns[0], commit=True)
        else:
            await tc.commit_group(txns)

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
""")

STEPS = {
    "before-point-of-no-return": ABORTED,  # COMMITTING never became durable: the timeout aborts it
    "after-point-of-no-return": COMMITTED,
    "after-first-marker": COMMITTED,
    "before-finish": COMMITTED,
}


@pytest.mark.parametrize("count", [1, 3, 0], ids=["one", "group", "kafka-v2"])
@pytest.mark.parametrize("step", list(STEPS))
async def test_sigkill_during_commit(redis_url, step, count):
    store = Store.open(redis_url)
    logs = LogService(store, auto_create=False)
    await logs.create_topic("crash", 3)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", COMMITTER, redis_url, str(count), stdout=subprocess.PIPE,
        env={**os.environ, "GATEWAY_CRASH_AT": step},
    )
    out, _ = await proc.communicate()
    assert proc.returncode == -signal.SIGKILL, f"the committer was to die at {step}"
    txns = out.decode().split()

    takeover = TransactionCoordinator(store)

    async def states() -> set[str]:
        return {(await takeover.describe(t)).state for t in txns}

    deadline = asyncio.get_running_loop().time() + 10
    while await states() - {COMMITTED, ABORTED}:
        assert asyncio.get_running_loop().time() < deadline, "a transaction was never ended"
        await takeover.recover()
        await asyncio.sleep(0.05)
    assert await states() == {STEPS[step]}  # all of them the same way
    if count == 0:
        # the epoch moved on in the point of no return alone; a write of the epoch before is fenced then
        producers = TransactionalProducers(store, takeover, FenceService(store, takeover))
        state = await producers.fence.get("", "crash-v2")
        bumped = step != "before-point-of-no-return"
        assert state is not None and state.epoch == (1 if bumped else 0)
        if bumped:
            with pytest.raises(ProducerFenced):
                await producers.add_partitions("crash-v2", state.producer_id, 0, [("crash", 0)])
    seen = []
    transactions = max(count, 1)
    for p in range(3):
        sl = await logs.read("crash", p, 0, 100, read_committed=True)
        assert sl.stable == sl.high_watermark == 2 * transactions  # the data batches and exactly one marker each
        seen += [r.value for e in committed_entries(sl) for r in iter_records(e.batch, e.base_offset)]
    expected = sorted(b"t%d-v%d" % (n, p) for n in range(transactions) for p in range(3))
    assert sorted(seen) == (expected if STEPS[step] == COMMITTED else [])
    await store.close()


async def _past(ms: int) -> None:
    """Until the wall clock, which transaction deadlines count in, is past `ms`."""
    while now_ms() <= ms:
        await asyncio.sleep(0.001)


async def test_a_reaper_taking_over_gives_open_transactions_their_timeout_again(redis_url):
    """The coordinator's gateway dies with transactions open, whose timeout runs out before a reaper
    takes over (a restart slower than the timeout): the new reaper's first pass aborts neither, so a
    producer reconnecting carries on, not fenced; one timeout later it aborts the abandoned one."""
    store = Store.open(redis_url)
    logs = LogService(store, auto_create=False)
    await logs.create_topic("takeover", 1)
    dead = TransactionCoordinator(store)
    producers = TransactionalProducers(store, dead, FenceService(store, dead))
    ids = {}
    for tid in ("reconnecting", "abandoned"):
        ids[tid] = await producers.init(tid, 1)  # a timeout of 1 ms: past before anyone takes over
        await producers.add_partitions(tid, *ids[tid], [("takeover", 0)])
    await _past(now_ms())
    takeover = TransactionCoordinator(store)
    again = TransactionalProducers(store, takeover, FenceService(store, takeover))
    reap = takeover.reaper()
    await reap()
    taken = now_ms()
    assert {(await again.describe(tid)).kafka_state for tid in ids} == {"Ongoing"}
    await again.add_offsets("reconnecting", *ids["reconnecting"], "g")  # not fenced
    assert (await again.end("reconnecting", *ids["reconnecting"], True))[0] == COMMITTED
    await _past(taken + 1)
    await reap()
    assert (await again.describe("abandoned")).kafka_state == "CompleteAbort"
    await store.close()
