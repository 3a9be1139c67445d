"""The blocking client, for scripts and notebooks: the asyncio client with the same names, each
call waiting for its answer, as Pulsar's Python client is blocking first.

    from gateway.client.blocking import Client

    with Client.connect("gateway://localhost:6650") as client:
        consumer = client.subscribe("orders", "billing", mode="shared")
        producer = client.create_producer("orders")
        producer.send(b"hello", key=b"customer-7")
        msg = consumer.receive(timeout=10)
        consumer.acknowledge(msg)

It wraps the async client rather than copying it (redis-py's way with its sync and async faces):
the async client runs on an event loop of its own in a background thread, and every method of a
client, producer, consumer or transaction is run there, the caller waiting for its result. An
async iterator (`read_range`, `watermarks`) comes back as a plain iterator. Callbacks
(`on_watermark`) run on that thread. A Ctrl-C while waiting cancels the call.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, TypeVar

from gateway.client.client import Client as AsyncClient
from gateway.client.consumer import Consumer
from gateway.client.producer import Producer
from gateway.client.transaction import Transaction

T = TypeVar("T")
_WRAPPED = (AsyncClient, Producer, Consumer, Transaction)


class _Loop:
    """One event loop on a daemon thread, shared by a client and everything made from it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="gateway-client", daemon=True)
        self.thread.start()

    def run(self, work: Awaitable[T]) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("a blocking call from the client's own thread (a callback) would wait forever")

        async def awaited() -> T:
            return await work

        future = asyncio.run_coroutine_threadsafe(awaited(), self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C, say: the call stops too
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class Blocking:
    """An object of the async client (a producer, consumer or transaction) with its methods blocking."""

    def __init__(self, target: object, loop: _Loop) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            async def run() -> Any:
                result = attr(*map(_unwrap, args), **{k: _unwrap(v) for k, v in kwargs.items()})
                return await result if inspect.isawaitable(result) else result

            return self._wrap(self._loop.run(run()))

        call.__name__ = name
        call.__doc__ = attr.__doc__
        return call

    def _wrap(self, result: Any) -> Any:
        if isinstance(result, _WRAPPED):
            return Blocking(result, self._loop)
        if hasattr(result, "__aiter__"):
            return self._iterate(result)
        return result

    def _iterate(self, items: AsyncIterator[Any]) -> Iterator[Any]:
        it = items.__aiter__()
        while True:
            try:
                yield self._wrap(self._loop.run(it.__anext__()))
            except StopAsyncIteration:
                return

    def __repr__(self) -> str:
        return f"blocking {self._target!r}"

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unwrap(value: Any) -> Any:
    """What a blocking object stands for, where one is passed back in (a transaction, say)."""
    return value._target if isinstance(value, Blocking) else value


class Client(Blocking):
    """The blocking face of `gateway.client.Client`: `Client.connect(url, ...)` takes the same options,
    and every method the same arguments."""

    @classmethod
    def connect(cls, url: str, **options: Any) -> Client:
        loop = _Loop()
        try:
            client = loop.run(AsyncClient.connect(url, **options))
        except BaseException:
            loop.stop()
            raise
        return cls(client, loop)

    def close(self) -> None:
        """Close the client and everything made from it, and stop its thread."""
        try:
            self._loop.run(self._target.close())  # type: ignore[attr-defined]
        finally:
            self._loop.stop()

    def __enter__(self) -> Client:
        return self
