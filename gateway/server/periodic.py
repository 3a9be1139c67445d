"""Background roles that run a step every interval until told to stop.

Stopping is an event, not only a cancel: a cancel that lands inside a Redis call can be absorbed
by the client library, and the loop would then sleep out a whole interval before noticing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from gateway.errors import log_failure

log = logging.getLogger(__name__)


class Periodic:
    def __init__(self, name: str, interval: float, step: Callable[[], Awaitable[object]], *,
                 first_after: float = 0.0) -> None:
        self.name = name
        self.interval = interval
        self.step = step
        self.first_after = first_after  # seconds before the first step
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.first_after):
                await self._stop.wait()
        while not self._stop.is_set():
            try:
                await self.step()
            except Exception as exc:
                log_failure(log, self.name, exc, f"trying again in {self.interval:.1f} s")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._stop.wait()
