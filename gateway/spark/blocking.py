"""Spark calls a data source synchronously, from processes that run no event loop: each call opens
a client, does its work on a fresh loop and closes it again, so nothing outlives the call (or has to
cross to an executor)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

from gateway.client import Client

T = TypeVar("T")

CLIENT_NAME = "spark"


def call(url: str, work: Callable[[Client], Awaitable[T]]) -> T:
    """`work` with a client connected to `url`, to completion."""

    async def run() -> T:
        client = await Client.connect(url, client_name=CLIENT_NAME, reconnect=False)
        try:
            return await work(client)
        finally:
            await client.close()

    return asyncio.run(run())


def iterate(url: str, items: Callable[[Client], AsyncIterator[T]]) -> Iterator[T]:
    """The items of an async iterator, pulled one at a time from a private loop between which
    the caller (a Spark task converting rows) runs freely; closed with the generator."""
    loop = asyncio.new_event_loop()
    client: Client | None = None
    source: AsyncIterator[T] | None = None
    try:
        client = loop.run_until_complete(Client.connect(url, client_name=CLIENT_NAME, reconnect=False))
        source = items(client)
        while True:
            try:
                yield loop.run_until_complete(anext(source))
            except StopAsyncIteration:
                return
    finally:
        if isinstance(source, AsyncGenerator):
            loop.run_until_complete(source.aclose())
        if client is not None:
            loop.run_until_complete(client.close())
        loop.close()
