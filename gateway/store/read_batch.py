"""Reads started in one turn of the event loop share one pipeline: a Fetch of 16 partitions is one
round trip on one Redis connection rather than 16 pipelines on 16 pooled ones, and with a read mark
one PUBLISH and one WAIT rather than 16 of each.

Measured on a Kafka consumer of 16 partitions (issue 35): each partition's read was its own
redis-py pipeline (a pooled connection each), so Redis paid a read and a write system call and the
gateway a pipeline's set-up per partition per fetch, and with replicas a WAIT each, which also
blocks its connection. Nothing is held longer than that one turn: a read is never delayed for
another that is not already on its way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from gateway.store.connection import RedisClient, storage_errors

Command = tuple[Any, ...]


class _Batch:
    def __init__(self, tail: tuple[Command, ...]) -> None:
        self.tail = tail
        self.commands: list[Command] = []
        self.replies: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.replies.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, if no waiter stayed


class ReadBatches:
    """Pipelines shared by the reads of one loop turn that end in the same `tail` (the read mark's
    commands, or none)."""

    def __init__(self, redis: RedisClient) -> None:
        self.redis = redis
        self._open: dict[tuple[Command, ...], _Batch] = {}
        self._sending: set[asyncio.Task[list[Any]]] = set()  # held until done: the loop keeps weak references

    async def run(self, commands: Sequence[Command], tail: Sequence[Command]) -> tuple[list[Any], list[Any]]:
        """The replies of `commands` (errors in place, as redis-py's `raise_on_error=False`), and those
        of `tail`, sent once after every read of the batch on its one connection: a read mark then
        covers them all. StorageUnavailable when the round trip fails."""
        key = tuple(tail)
        batch = self._open.get(key)
        if batch is None:
            batch = self._open[key] = _Batch(key)
            asyncio.get_running_loop().call_soon(self._send, batch)
        start = len(batch.commands)
        batch.commands.extend(commands)
        replies = await asyncio.shield(batch.replies)  # a reader giving up leaves the others theirs
        return replies[start:start + len(commands)], replies[len(batch.commands):]

    def _send(self, batch: _Batch) -> None:
        del self._open[batch.tail]
        task = asyncio.ensure_future(self._execute(batch))
        self._sending.add(task)

        def done(t: asyncio.Task[list[Any]]) -> None:
            self._sending.discard(t)
            if t.cancelled():
                batch.replies.cancel()
            elif (exc := t.exception()) is not None:
                batch.replies.set_exception(exc)
            else:
                batch.replies.set_result(t.result())

        task.add_done_callback(done)

    async def _execute(self, batch: _Batch) -> list[Any]:
        pipe = self.redis.pipeline(transaction=False)
        for command in (*batch.commands, *batch.tail):
            pipe.execute_command(*command)
        async with storage_errors():
            return list(await pipe.execute(raise_on_error=False))
