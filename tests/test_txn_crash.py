"""SIGKILL at each step of a commit: the transaction ends the same way on every partition,
nothing lost, nothing twice. The coordinator runs in its own process that kills itself with
SIGKILL at the chosen step (GATEWAY_CRASH_AT); a fresh coordinator then takes over."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from gateway.log import LogService, committed_entries
from gateway.records import iter_records
from gateway.store import Store
from gateway.txn import ABORTED, COMMITTED, TransactionCoordinator

COMMITTER = textwrap.dedent("""
    import asyncio, sys
    from gateway.log import LogService
    from gateway.records import BatchBuilder
    from gateway.store import Store
    from gateway.txn import TransactionCoordinator

    async def main(url: str) -> None:
        store = Store.open(url)
        logs = LogService(store, auto_create=False)
        tc = TransactionCoordinator(store, default_timeout_ms=1000)
        txn = await tc.begin()
        info = await tc.describe(txn)
        parts = [("crash", 0), ("crash", 1), ("crash", 2)]
        await tc.add_partitions(txn, parts)
        for t, p in parts:
            b = BatchBuilder(producer_id=info.producer_id, producer_epoch=info.producer_epoch,
                             base_sequence=0, transactional=True)
            b.append(b"v%d" % p)
            await logs.append([(t, p, b.build())])
        print(txn, flush=True)
        await tc.end(txn, commit=True)

    asyncio.run(main(sys.argv[1]))
""")

STEPS = {
    "before-point-of-no-return": ABORTED,  # COMMITTING never became durable: the timeout aborts it
    "after-point-of-no-return": COMMITTED,
    "after-first-marker": COMMITTED,
    "before-finish": COMMITTED,
}


@pytest.mark.parametrize("step", list(STEPS))
async def test_sigkill_during_commit(redis_url, step):
    store = Store.open(redis_url)
    logs = LogService(store, auto_create=False)
    await logs.create_topic("crash", 3)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", COMMITTER, redis_url, stdout=subprocess.PIPE,
        env={**os.environ, "GATEWAY_CRASH_AT": step},
    )
    out, _ = await proc.communicate()
    assert proc.returncode == -signal.SIGKILL, f"the committer was to die at {step}"
    txn = out.decode().strip()

    takeover = TransactionCoordinator(store)
    deadline = asyncio.get_running_loop().time() + 10
    while (await takeover.describe(txn)).state not in (COMMITTED, ABORTED):
        assert asyncio.get_running_loop().time() < deadline, "the transaction was never ended"
        await takeover.recover()
        await asyncio.sleep(0.05)
    final = (await takeover.describe(txn)).state
    assert final == STEPS[step]
    seen = []
    for p in range(3):
        sl = await logs.read("crash", p, 0, 100, read_committed=True)
        assert sl.stable == sl.high_watermark == 2  # one data batch and exactly one marker each
        seen += [r.value for e in committed_entries(sl) for r in iter_records(e.batch, e.base_offset)]
    assert seen == ([b"v0", b"v1", b"v2"] if final == COMMITTED else [])
    await store.close()
