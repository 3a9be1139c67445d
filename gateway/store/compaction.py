"""The log cleaner's side of a compacted partition (see docs/compaction.md).

Below its clean boundary `cb` a compacted partition's batches are in the cleaned stream of the
current generation `cg` (`keys.clean_log`), from `cb` on in the main stream. A cleaner pass builds
the next generation beside the current one (`clean-begin-2`, then `clean-add-2` per batch) and
makes it current in one step (`clean-switch-4`), every script fenced by the cleaner role's epoch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from gateway.errors import ErrorCode, error_for
from gateway.formats.records import RECORD_COUNT, RECORD_COUNT_AT
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.log import AbortedRange, _aborted, _pairs, last_stable_offset
from gateway.store.scripts import Scripts

SCAN_ENTRIES = 64  # batches read per XRANGE of a pass


@dataclass(frozen=True)
class StoredBatch:
    """One entry of a partition's log as the cleaner reads it (or, without its bytes, as it knows
    it from an earlier read)."""

    base_offset: int
    span: int  # the offsets it covers: its entry's `n`
    max_ts: int  # its entry's `t`: the running maximum timestamp of the log up to it
    batch: bytes | None  # None: not read
    appended_before: int = -1  # its entry's `c` in the main stream: bytes appended before it
    known_size: int = -1  # the batch's size and record count when it is not read
    known_records: int = -1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.span

    @property
    def size(self) -> int:
        return self.known_size if self.batch is None else len(self.batch)

    @property
    def records(self) -> int:
        return self.known_records if self.batch is None else RECORD_COUNT.unpack_from(self.batch, RECORD_COUNT_AT)[0]


@dataclass(frozen=True)
class CleanState:
    """What a pass decides from: the partition's bounds, its two parts and the cleaner's counters."""

    high_watermark: int
    log_start: int
    last_stable_offset: int
    boundary: int  # cb: offsets below it are in the cleaned stream
    generation: int  # cg
    appended_bytes: int  # every byte ever appended (the meta's `bytes`)
    clean_bytes: int  # the size of the cleaned stream's batches when it was built
    horizon: int  # the earliest delete horizon of a cleaned batch with tombstones, -1 none
    passes: int
    reclaimed: int
    cleaned_at: int


def _batch(entry: tuple[bytes, dict[bytes, bytes]]) -> StoredBatch:
    eid, f = entry
    return StoredBatch(int(eid.split(b"-", 1)[0]), int(f[b"n"]), int(f.get(b"t", b"-1")), f[b"b"],
                       int(f.get(b"c", b"-1")))


class CleanerStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def state(self, topic: str, partition: int) -> CleanState | None:
        """The partition's state, None when it does not exist."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(keys.meta(topic, partition), "hw", "start", "cb", "cg", "bytes", "clean_bytes", "horizon",
                   "clean_passes", "clean_reclaimed", "clean_at")
        pipe.hvals(keys.open_txns(topic, partition))
        async with storage_errors():
            (hw, start, cb, cg, appended, clean, horizon, passes, reclaimed, at), open_txns = await pipe.execute()
        if hw is None:
            return None

        def num(v: Any, default: int = 0) -> int:
            return default if v is None else int(v)

        return CleanState(int(hw), int(start), last_stable_offset(int(hw), open_txns), num(cb), num(cg),
                          num(appended), num(clean), num(horizon, -1), num(passes), num(reclaimed), num(at, -1))

    async def edge(self, topic: str, partition: int, *, generation: int | None = None,
                   last: bool = False) -> StoredBatch | None:
        """The first (or `last`) batch of the main stream, or of the cleaned stream of `generation`."""
        key = keys.log(topic, partition) if generation is None else keys.clean_log(topic, partition, generation)
        async with storage_errors():
            entries: Any = await (self.redis.xrevrange(key, count=1) if last else self.redis.xrange(key, count=1))
        return _batch(entries[0]) if entries else None

    async def scan(self, topic: str, partition: int, *, generation: int | None = None,
                   end: int | None = None) -> AsyncGenerator[StoredBatch, None]:
        """The batches of the main stream (or of the cleaned stream of `generation`) in offset order,
        up to the one starting at `end`, `SCAN_ENTRIES` at a time. The next XRANGE is sent before
        the batches of the last one are handed out, so Redis makes its reply while the caller
        works: at most two replies are held. Iterate it under `contextlib.aclosing` when leaving
        early, so a read ahead is not left running."""
        key = keys.log(topic, partition) if generation is None else keys.clean_log(topic, partition, generation)
        high = "+" if end is None else f"({end}-1"
        ahead: asyncio.Task[Any] | None = asyncio.ensure_future(self._range(key, "-", high))
        try:
            while ahead is not None:
                entries = await ahead
                ahead = None
                if len(entries) == SCAN_ENTRIES:
                    ahead = asyncio.ensure_future(self._range(key, "(" + entries[-1][0].decode(), high))
                    await asyncio.sleep(0)  # the read ahead sends its command
                for entry in entries:
                    yield _batch(entry)
        finally:
            if ahead is not None:
                ahead.cancel()

    async def _range(self, key: str, low: str, high: str) -> Any:
        async with storage_errors():
            return await self.redis.xrange(key, low, high, count=SCAN_ENTRIES)

    async def fetch(self, topic: str, partition: int, runs: list[tuple[int, int]]) -> dict[int, StoredBatch]:
        """The main stream's batches of these runs (the base offsets of a run's first and last
        entries), by base offset, in one round trip. One that is gone is missing."""
        if not runs:
            return {}
        key = keys.log(topic, partition)
        pipe = self.redis.pipeline(transaction=False)
        for first, last in runs:
            pipe.xrange(key, f"{first}-1", f"{last}-1")
        async with storage_errors():
            replies: Any = await pipe.execute()
        return {b.base_offset: b for entries in replies for b in map(_batch, entries)}

    async def memory(self, topic: str, partition: int) -> int:
        """Bytes Redis holds for the partition's log: MEMORY USAGE of its main stream and of both
        cleaned generations (one exists between passes), every entry counted (SAMPLES 0)."""
        streams = [keys.log(topic, partition), *(keys.clean_log(topic, partition, g) for g in (0, 1))]
        pipe = self.redis.pipeline(transaction=False)
        for key in streams:
            pipe.memory_usage(key, samples=0)
        async with storage_errors():
            used = await pipe.execute()
        return sum(int(u or 0) for u in used)

    async def aborted(self, topic: str, partition: int) -> list[AbortedRange]:
        """Every aborted transaction range of the partition."""
        async with storage_errors():
            reply = await self.redis.zrange(keys.aborted_txns(topic, partition), 0, -1, withscores=True)
        return [_aborted(m, int(float(score))) for m, score in _pairs(reply)]

    async def begin(self, topic: str, partition: int, epoch: int, generation: int) -> None:
        """Take the partition for this pass and empty the stream it builds in."""
        await self._call("clean-begin-2", [keys.meta(topic, partition),
                                           keys.clean_log(topic, partition, generation + 1)],
                         [epoch, generation], f"{topic}-{partition}")  # epoch, gen

    async def add(self, topic: str, partition: int, epoch: int, generation: int, batches: list[StoredBatch]) -> None:
        """Add cleaned batches to the generation being built, in one round trip."""
        if not batches:
            return
        meta, build = keys.meta(topic, partition), keys.clean_log(topic, partition, generation)
        async with storage_errors():
            replies = await self.scripts.call_many([
                ("clean-add-2", [meta, build], [epoch, generation, b.base_offset, b.span, b.max_ts, b.batch])
                for b in batches  # epoch, gen, base, span, maxts, batch
            ])
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
            if reply[0] != ErrorCode.OK:
                raise error_for(reply[0], f"{topic}-{partition}: the cleaner's lease moved on")

    async def switch(self, topic: str, partition: int, epoch: int, generation: int, *, boundary: int, start: int,
                     reclaimed: int, now: int, size: int, horizon: int) -> int:
        """Make `generation` current; returns the entries removed from the main stream."""
        reply = await self._call(
            "clean-switch-4",
            [keys.meta(topic, partition), keys.log(topic, partition), keys.clean_log(topic, partition, generation - 1),
             keys.clean_log(topic, partition, generation)],
            # epoch, gen, boundary, start, reclaimed, now_ms, size, horizon
            [epoch, generation, boundary, start, reclaimed, now, size, horizon], f"{topic}-{partition}")
        return int(reply[1])

    async def _call(self, name: str, call_keys: list[str], args: list[Any], what: str) -> list[Any]:
        async with storage_errors():
            reply: list[Any] = await self.scripts.call(name, call_keys, args)
        if reply[0] != ErrorCode.OK:
            raise error_for(reply[0], f"{what}: the cleaner's lease moved on" if reply[0] == 13 else what)
        return reply
