"""Pulsar's pattern consumer (topicsPattern): one consumer of every topic whose name matches a
regular expression, those created later included.

The gateway matches the names (ListTopics, RE2 syntax as the Kafka face's KIP-848 regex
subscriptions, the whole name); the consumer asks again every `pattern_auto_discovery_period`
seconds (Pulsar's patternAutoDiscoveryPeriod), subscribes to the topics new since and leaves those
gone. A topic found after the start is read from its earliest message: it is new to the
subscription, and whatever was sent to it before it was found belongs to it too. The subscription's
own dead-letter and retry-letter topics (`<topic>-<subscription>-DLQ`, `-RETRY`) are never taken as
matches: their messages come through the retry consumer, or not at all, and a retry topic of a retry
topic would follow every period. Messages of all the topics come out of one `receive`, taken from
each topic in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from gateway.client.consumer import Consumer, Position, _id, receive_first
from gateway.client.errors import ClientClosed
from gateway.client.message import Message
from gateway.client.transaction import Transaction
from gateway.errors import GatewayError

log = logging.getLogger(__name__)

Subscriber = Callable[[str, str], Awaitable[Consumer]]
"""Subscribes to a topic from an initial position ("earliest" or "latest")."""


class PatternConsumer:
    def __init__(self, pattern: str, subscription: str, topics: Callable[[], Awaitable[list[str]]],
                 subscribe: Subscriber, period: float, alive: Callable[[], bool] = lambda: True) -> None:
        """`alive`: whether the client is still open (discovery stops with it)."""
        self.pattern = pattern
        self.subscription = subscription
        self.consumers: dict[str, Consumer] = {}
        """The consumer of each topic the pattern matches now."""
        self._topics = topics
        self._subscribe = subscribe
        self._period = period
        self._alive = alive
        self._arrived = asyncio.Event()
        self._turn = 0
        self._closed: GatewayError | None = None
        self._discovery: asyncio.Task[None] | None = None

    async def start(self, initial_position: str) -> None:
        await self.discover(initial_position)
        self._discovery = asyncio.create_task(self._discover_every_period())

    async def discover(self, initial_position: str = "earliest") -> None:
        """Subscribe to the matching topics not subscribed yet, and leave those that match no more."""
        letters = (f"-{self.subscription}-DLQ", f"-{self.subscription}-RETRY")
        names = [t for t in await self._topics() if not t.endswith(letters)]
        for topic in [t for t in names if t not in self.consumers]:
            consumer = await self._subscribe(topic, initial_position)
            if self._closed is not None:
                await consumer.close()
                return
            consumer.share_arrivals(self._arrived)
            self.consumers[topic] = consumer
            self._arrived.set()  # what it prefetched before sharing
        for topic in [t for t in self.consumers if t not in names]:
            await self.consumers.pop(topic).close()

    async def _discover_every_period(self) -> None:
        while True:
            await asyncio.sleep(self._period)
            if self._closed is not None or not self._alive():
                return
            try:
                await self.discover()
            except GatewayError as exc:  # tried again next period
                log.info("topics matching %r not discovered: %s", self.pattern, exc)

    def _in_turn(self) -> list[Consumer]:
        """Every consumer, starting one further each time, so no topic starves the others."""
        consumers = list(self.consumers.values())
        self._turn = (self._turn + 1) % max(1, len(consumers))
        return consumers[self._turn:] + consumers[:self._turn]

    def _of(self, message: Position) -> Consumer:
        topic = _id(message).topic
        consumer = self.consumers.get(topic)
        if consumer is None:
            raise ClientClosed(f"no longer subscribed to {topic!r}")
        return consumer

    async def receive(self, timeout: float | None = None) -> Message:
        """The next message of any matching topic; Timeout when none arrives within `timeout` seconds."""
        return await receive_first(self._in_turn, self._arrived, lambda: self._closed, timeout)

    async def acknowledge(self, message: Position, txn: Transaction | None = None) -> None:
        await self._of(message).acknowledge(message, txn)

    async def acknowledge_cumulative(self, message: Position, txn: Transaction | None = None) -> None:
        await self._of(message).acknowledge_cumulative(message, txn)

    async def negative_acknowledge(self, message: Position) -> None:
        await self._of(message).negative_acknowledge(message)

    async def reconsume_later(self, message: Position, delay: float | timedelta = 0.0) -> None:
        await self._of(message).reconsume_later(message, delay)

    async def close(self) -> None:
        """Stop discovering and close the consumer of every topic."""
        self._closed = ClientClosed("the consumer is closed")
        self._arrived.set()
        if self._discovery is not None:
            self._discovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._discovery
        for consumer in list(self.consumers.values()):
            with contextlib.suppress(GatewayError):
                await consumer.close()

    async def __aenter__(self) -> PatternConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
