"""Spark calls a data source synchronously, from processes that run no event loop. A `Session` runs
the asyncio client on a loop in a thread of its own: the caller's thread converts rows (or waits for
Spark to hand it more) while the client's sends and reads go on. Nothing outlives the call, and
nothing of it has to cross to an executor."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from gateway.client import Client
from gateway.spark.options import Endpoint

T = TypeVar("T")

CLIENT_NAME = "spark"
_DONE = object()


class Session:
    """A connected client on a private event loop thread; `run` waits for a coroutine there."""

    def __init__(self, gateway: Endpoint, *, transaction_key: str | None = None, incarnation: str = "") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gateway-client", daemon=True)
        self._thread.start()
        try:
            self.client = self.run(Client.connect(gateway.url, client_name=CLIENT_NAME, reconnect=False,
                                                  transaction_key=transaction_key, incarnation=incarnation,
                                                  **gateway.connect_args()))
        except BaseException:
            self._stop()
            raise

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def iterate(self, items: AsyncIterator[T], prefetch: int = 2) -> Iterator[T]:
        """The items, fetched up to `prefetch` ahead of the caller."""
        queue: asyncio.Queue[Any] = asyncio.Queue(prefetch)

        async def pump() -> None:
            try:
                async for item in items:
                    await queue.put(item)
                await queue.put(_DONE)
            except Exception as exc:  # to the caller; a cancellation (the caller left) ends the pump
                await queue.put(exc)

        pumping = asyncio.run_coroutine_threadsafe(pump(), self._loop)
        try:
            while True:
                item = self.run(queue.get())
                if item is _DONE:
                    return
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            pumping.cancel()
            with contextlib.suppress(BaseException):
                pumping.result()

    def close(self) -> None:
        try:
            self.run(self.client.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def call(gateway: Endpoint, work: Callable[[Client], Awaitable[T]], *, transaction_key: str | None = None,
         incarnation: str = "") -> T:
    """`work` with a client connected to the gateway (holding a transaction key when given), to completion."""

    async def run(client: Client) -> T:
        return await work(client)

    with Session(gateway, transaction_key=transaction_key, incarnation=incarnation) as session:
        return session.run(run(session.client))
