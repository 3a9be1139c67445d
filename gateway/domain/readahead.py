"""Read-ahead for sequential readers of a partition.

A Kafka consumer has one fetch in flight per broker: without read-ahead, each round trip waits for
Redis, then for the network and the client, in turn. Reading the next slice while the last one
crosses the network overlaps the two, and reading the one after it as soon as the next is in keeps
a slow Redis read (a megabyte batch) off the round trip too. Stored batches never change, so an
early read is the same read; only the bounds it carries may be a little behind, which readers
already tolerate (they are never ahead of the truth). Bounded in count and age, so a reader that stops costs one slice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from gateway.store.log import Entry, Slice

Key = tuple[str, int, int, bool]  # topic, partition, offset, read_committed


class ReadAhead:
    def __init__(self, read: Callable[[str, int, int, int, bool], Awaitable[Slice]], *,
                 limit: int = 32, max_age: float = 1.0) -> None:
        self._read = read
        self._limit = limit
        self._max_age = max_age
        self._pending: OrderedDict[Key, tuple[float, int, asyncio.Task[Slice]]] = OrderedDict()

    def take(self, key: Key, max_entries: int) -> asyncio.Task[Slice] | None:
        """The early read of `key`, when one is fresh and asked for at least as many entries."""
        item = self._pending.pop(key, None)
        if item is None:
            return None
        born, entries, task = item
        if entries < max_entries or asyncio.get_running_loop().time() - born > self._max_age:
            task.cancel()
            return None
        return task

    def start(self, key: Key, max_entries: int, depth: int = 2, held: Slice | None = None, skip: int = 0) -> None:
        """Read `key` early, and with `depth` 2 the slice after it once this one is in. `held`: a
        slice read already whose entries from `skip` on begin at `key`'s offset (they did not fit in
        the reader's last answer); they are kept and only what follows them is read."""
        if held is not None and skip < len(held.entries):
            tail = held.entries[skip:]
            if key in self._pending:  # as the chain of an earlier read guessed: that one is stale
                self._pending.pop(key)[2].cancel()
            read: Awaitable[Slice] = self._joined(key, held, tail, max_entries)
        elif key in self._pending:
            if depth > 1:
                self._pending[key][2].add_done_callback(lambda t: self._then(t, key, max_entries, depth - 1))
            return
        else:
            read = self._read(*key[:3], max_entries, key[3])
        while len(self._pending) >= self._limit:
            _, (_, _, old) = self._pending.popitem(last=False)
            old.cancel()
        task = asyncio.ensure_future(read)
        task.add_done_callback(_quiet)
        self._pending[key] = (asyncio.get_running_loop().time(), max_entries, task)
        if depth > 1:
            task.add_done_callback(lambda t: self._then(t, key, max_entries, depth - 1))

    async def _joined(self, key: Key, held: Slice, tail: list[Entry], max_entries: int) -> Slice:
        """`tail` followed by the batches after it, with the bounds of the later read (or `held`'s,
        when the tail reaches them). A read of them started earlier (the chain of the slice before)
        is taken rather than made again."""
        topic, partition, _, committed = key
        after = tail[-1].next_offset
        more = max_entries - len(tail)
        if more <= 0 or after >= (held.stable if committed else held.high_watermark):
            return dataclasses.replace(held, entries=tail)
        early = self.take((topic, partition, after, committed), 1)
        sl = None
        if early is not None:
            with contextlib.suppress(Exception):  # read again below, where the error reaches the reader
                sl = await early
        if sl is None:
            sl = await self._read(topic, partition, after, more, committed)
        if sl.entries and sl.entries[0].base_offset == after:
            return dataclasses.replace(sl, entries=tail + sl.entries)
        return dataclasses.replace(sl, entries=tail)  # the log changed under it: the tail alone, fresher bounds

    def _then(self, task: asyncio.Task[Slice], key: Key, max_entries: int, depth: int) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        following = task.result().following(key[3])
        if following is not None:
            self.start((key[0], key[1], following, key[3]), max_entries, depth)

    def forget(self, topic: str) -> None:
        """Drop early reads of a topic whose log just lost its head or its whole self."""
        for key in [k for k in self._pending if k[0] == topic]:
            self._pending.pop(key)[2].cancel()


def _quiet(task: asyncio.Task[Slice]) -> None:
    """A failed early read is retried by the reader itself; nothing to report here."""
    if not task.cancelled():
        task.exception()
