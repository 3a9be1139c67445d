"""Memory is the budget: Redis's memory is the log's disk, and produce stops before it is full.

A Kafka broker whose disk fills stops taking writes and loses nothing it acknowledged. Here the disk
is each Redis primary's `maxmemory`, so:

- A primary whose `maxmemory-policy` evicts is refused at start-up, and, found so while running (a
  `CONFIG SET`, a failover to a replica configured otherwise), stops every produce with a retriable
  error until it is `noeviction` again. `volatile-*` policies are refused too: the gateway gives
  TTLs to leases (background roles, group coordination, subscription dispatch, share partitions) and
  to finished transactions kept for retried EndTxns, and evicting a lease before its time hands its
  work to a second gateway while the first still does it.
- Produce (both faces, delayed messages and watermark marks too) is refused with `StorageFull` once
  a primary holds `high_watermark` of its `maxmemory`, which leaves the rest to what unblocks users:
  offset commits, transaction ends and markers, group and share state, retention, deletions.
  Produce resumes by itself once they free memory.

The check costs no Redis round trip on the produce path. Each primary's `INFO memory` is sampled
every `SAMPLE_INTERVAL` near its mark, every `FAR_INTERVAL` far from it (and at once after Redis
refuses a write for memory); between samples the bytes this gateway appended count against the
smallest room left, so one gateway never overshoots its mark by more than the other gateways write
in one interval. Redis itself refusing past
`maxmemory` (OOM, mapped to `StorageFull` in the store) is the backstop: its check comes before a
script's first write, so a refused change wrote nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time

from gateway.errors import AWAY, GatewayError, StorageFull, StorageRefused, log_failure
from gateway.store import Store
from gateway.store.memory import PrimaryMemory

log = logging.getLogger(__name__)

SAMPLE_INTERVAL = 0.1
"""Seconds between samples of each primary's memory near its mark (within `NEAR` of maxmemory below
it, or refusing): in this time one gateway appends at most a few tens of MB (Redis's Lua append tops
out near 280 MB/s), and its own appends count against the room meanwhile."""
FAR_INTERVAL = 1.0
"""Seconds between samples while every primary is far from its mark, or has no maxmemory (its policy
is still checked): sampling ten times a second cost measurable produce throughput."""
NEAR = 0.1
WARN_EVERY = 60.0
"""Seconds between repeated warnings while produce stays refused: one a minute, not one a request."""
DEFAULT_HIGH_WATERMARK = 0.9
RESUME_BELOW = 0.02
"""Produce refused at the mark resumes once the primary is this fraction of maxmemory below it: Redis's
own memory (client buffers, allocator pages) moves by more than that between samples, and produce
would flap on and off with it."""


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


class MemoryBudget:
    """The cached memory state of every primary, and the produce path's check against it."""

    def __init__(self, store: Store, high_watermark: float = DEFAULT_HIGH_WATERMARK,
                 interval: float = SAMPLE_INTERVAL) -> None:
        self._memory = store.memory
        self.high_watermark = high_watermark
        self.interval = interval
        self.primaries: list[PrimaryMemory] = []
        self._room: float = math.inf  # bytes produce may add after a sample before a primary reaches its mark
        self._spent = 0  # bytes this gateway appended since the sample, counted against every primary
        self._added: dict[str, int] = {}  # bytes appended per primary since the sample, once near a mark
        self._full: set[str] = set()  # primaries at or above their mark
        self._evicting: dict[str, str] = {}  # primaries with an evicting policy -> the policy
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._warned = -WARN_EVERY
        self.refused = 0  # produces refused for memory since the gateway started
        self._away = False  # the last sample failed for Redis away: warned once, until one succeeds

    # -- start-up and sampling ----------------------------------------------------------------

    async def check_start(self) -> None:
        """Refuse a Redis that evicts, in one line naming it, its policy and the fix."""
        primaries = await self._memory.primaries(configured=True)
        for address, policy in sorted((p.address, p.policy) for p in primaries if p.evicting):
            raise GatewayError(
                f"Redis at {address} has maxmemory-policy {policy}, which evicts keys the gateway needs "
                f"(acknowledged records among them): set it to noeviction (CONFIG SET maxmemory-policy "
                f"noeviction, and in its redis.conf) or use another Redis")
        self._take(primaries)

    async def sample(self) -> None:
        """Read every primary's memory now, and log what changed for produce."""
        self._take(await self._memory.primaries())

    def _next_sample(self) -> float:
        """Seconds to the next sample: `interval` near a mark, `FAR_INTERVAL` far from every one."""
        near = any(p.maxmemory and p.used >= self._mark(p) - NEAR * p.maxmemory for p in self.primaries)
        return self.interval if near or self._full or self._evicting else max(self.interval, FAR_INTERVAL)

    async def run(self) -> None:
        """Sample until `stop`: every interval, and at once when Redis refused a write for memory."""
        while not self._stop.is_set():
            try:
                await self.sample()
                self._away = False
            except Exception as exc:  # the last state stands; produce finds out for itself
                if not (self._away and isinstance(exc, AWAY)):  # one line an outage, not one a sample
                    log_failure(log, "sampling Redis's memory", exc, "the last sample stands until one succeeds")
                self._away = isinstance(exc, AWAY)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_sample()):
                    await self._wake.wait()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def oom_seen(self) -> None:
        """Redis refused a write for memory: sample again now rather than at the next interval."""
        self._wake.set()

    def _take(self, primaries: list[PrimaryMemory]) -> None:
        was_full, was_evicting = self._full, self._evicting
        self.primaries = primaries
        self._evicting = {p.address: p.policy for p in primaries if p.evicting}
        self._full = {p.address for p in primaries if p.maxmemory and p.used >= self._mark(p) - (
            int(RESUME_BELOW * p.maxmemory) if p.address in was_full else 0)}
        self._added, self._spent = {}, 0
        rooms = [self._mark(p) - p.used for p in primaries if p.maxmemory]
        self._room = -1 if self._full or self._evicting else min(rooms, default=math.inf)
        for address, policy in sorted(self._evicting.items() - was_evicting.items()):
            self._warned = time.monotonic()
            log.error("REDIS AT %s NOW HAS maxmemory-policy %s, WHICH EVICTS ACKNOWLEDGED RECORDS: every produce "
                      "is refused (retriable) until it is set back to noeviction (CONFIG SET maxmemory-policy "
                      "noeviction)", address, policy)
        for address in sorted(was_evicting.keys() - self._evicting.keys()):
            log.warning("Redis at %s has maxmemory-policy noeviction again: produce resumes", address)
        for p in primaries:
            if p.address in self._full - was_full:
                self._warn_full(p, p.used)
            elif p.address in was_full - self._full:
                log.warning("Redis at %s holds %s of its maxmemory %s, below the high-water mark: produce resumes",
                            p.address, _mib(p.used), _mib(p.maxmemory))
        if (self._full or self._evicting) and time.monotonic() - self._warned >= WARN_EVERY:
            self._warned = time.monotonic()
            log.warning("produce still refused for Redis's memory (%s): %d produce(s) refused so far",
                        self.reason(), self.refused)

    def _warn_full(self, p: PrimaryMemory, used: int) -> None:
        self._warned = time.monotonic()
        log.warning("Redis at %s holds %s, %.0f%% of its maxmemory %s, at or above the high-water mark %g "
                    "(--redis-memory-high-watermark): produce is refused (retriable) until retention, DeleteRecords "
                    "or deleted topics free memory, or maxmemory is raised",
                    p.address, _mib(used), 100 * used / p.maxmemory, _mib(p.maxmemory), self.high_watermark)

    def _mark(self, p: PrimaryMemory) -> int:
        return int(p.maxmemory * self.high_watermark)

    # -- the produce path ----------------------------------------------------------------------

    def admit(self, topic: str, partition: int, size: int) -> None:
        """Let `size` bytes be produced to the partition, or raise: `StorageFull` when its primary is
        at its high-water mark, `StorageUnavailable` while any primary's policy evicts. No round trip."""
        if self._spent + size <= self._room:
            self._spent += size
            return
        self._admit_near_mark(topic, partition, size)

    def _admit_near_mark(self, topic: str, partition: int, size: int) -> None:
        if self._evicting:
            self.refused += 1
            address, policy = min(self._evicting.items())
            raise StorageRefused(f"Redis at {address} has maxmemory-policy {policy}, which would evict "
                                     "records: produce is refused until it is noeviction")
        address = self.primary_of(topic, partition)
        p = next((p for p in self.primaries if p.address == address), None)
        if p is None or not p.maxmemory:  # a primary not sampled yet (a cluster grew), or without limit
            return
        added = self._added.get(address, 0)
        if address not in self._full and (estimate := p.used + self._spent + added + size) > self._mark(p):
            # reached between samples by this gateway's own appends: full until a sample says otherwise
            self._full.add(address)
            self._room = -1
            self._warn_full(p, estimate)
        if address in self._full:
            self.refused += 1
            raise StorageFull(f"Redis at {address} is at its high-water mark ({self.high_watermark:g} of "
                              f"maxmemory {_mib(p.maxmemory)}): produce refused until memory is freed")
        self._added[address] = added + size

    def primary_of(self, topic: str, partition: int) -> str:
        """"host:port" of the Redis primary holding the partition."""
        return self._memory.primary_of(topic, partition)

    # -- what operators see --------------------------------------------------------------------

    async def partition_bytes(self, topic: str, partitions: int) -> list[int]:
        """Bytes each partition takes in Redis, estimated by MEMORY USAGE (which samples a stream),
        read when asked: for the admin API and DescribeLogDirs, never on a produce."""
        return await self._memory.partition_bytes(topic, partitions)

    def reason(self) -> str | None:
        """Why produce is refused now, or None when it is not."""
        if self._evicting:
            return "; ".join(f"Redis at {a} has maxmemory-policy {p}" for a, p in sorted(self._evicting.items()))
        if self._full:
            return "; ".join(f"Redis at {a} is at its memory high-water mark" for a in sorted(self._full))
        return None
