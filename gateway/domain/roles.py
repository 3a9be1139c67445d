"""Background roles run by one gateway at a time, each under a lease with an epoch.

The transaction reaper, the delay scheduler, retention, the log cleaner, watermark snapshots and the
lag sampler each need one runner, not one per gateway. Every gateway tries to take or renew each
role's lease every third of its length; the holder runs the role, the others wait, so a role moves
within about a lease of its holder's death (a clean stop hands it over at once). A lease taken anew
comes with a higher epoch. Where a holder paused past its lease could still do harm, its writes
carry the epoch and the partition's script refuses one older than the newest it has seen
(`lua/includes/role.lua`); the role also stops acting once its lease may have run out by its own
clock.

A role is anything with `run()` and `stop()`; `RoleLeases.role(name, start)` wraps one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.errors import GatewayError
from gateway.store import Store
from gateway.store.roles import RoleHolder

log = logging.getLogger(__name__)


class Role(Protocol):
    """A background role: runs until `stop`."""

    async def run(self) -> None: ...

    def stop(self) -> None: ...


@dataclass
class Lease:
    """A role's lease as its holder sees it: the epoch its writes carry, and until when (on this
    gateway's clock, with a margin) it may act."""

    role: str
    epoch: int
    until: float
    clock: Callable[[], float] = time.monotonic

    def held(self) -> bool:
        return self.clock() < self.until


NO_LEASE = Lease("", -1, float("inf"))
"""For a role run outside any lease (tests, benchmarks, a lone process): never fenced, never lapses."""


class LeasedRole:
    """One role on one gateway: runs `start(lease)` while this gateway holds the role's lease."""

    def __init__(self, leases: RoleLeases, name: str, start: Callable[[Lease], Role]) -> None:
        self.leases = leases
        self.name = name
        self.start = start
        self.lease: Lease | None = None
        self._role: Role | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def holding(self) -> bool:
        return self.lease is not None and self.lease.held()

    async def run(self) -> None:
        every = self.leases.lease_ms / 3000
        try:
            while not self._stop.is_set():
                await self._step()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(every):
                        await self._stop.wait()
        finally:
            await self._drop()
            with contextlib.suppress(GatewayError):
                await self.leases.store.hold(self.name, self.leases.node_id, self.leases.instance,
                                             -1 if self.lease is None else self.lease.epoch, 0)

    async def _step(self) -> None:
        leases = self.leases
        asked = leases.clock()
        held = -1 if self.lease is None else self.lease.epoch
        try:
            epoch = await leases.store.hold(self.name, leases.node_id, leases.instance, held, leases.lease_ms)
        except GatewayError as exc:
            log.warning("role %s: lease not renewed (%s)", self.name, exc)
            if self.lease is not None and not self.lease.held():
                await self._drop()
            return
        if epoch is None:
            if self._role is not None:  # said once: the lease object is kept (its epoch), the role not
                log.warning("role %s: another gateway holds it now", self.name)
                await self._drop()
            return
        # counted from before the call, with a tenth to spare for clocks that drift apart
        until = asked + leases.lease_ms * 0.9 / 1000
        if self.lease is not None and self.lease.epoch == epoch:
            self.lease.until = until
            return
        await self._drop()
        self.lease = Lease(self.name, epoch, until, leases.clock)
        log.info("role %s: held by this gateway with epoch %d", self.name, epoch)
        self._role = self.start(self.lease)
        self._task = asyncio.create_task(self._role.run(), name=f"role {self.name}")

    async def _drop(self) -> None:
        role, task = self._role, self._task
        self._role = self._task = None
        if role is not None:
            role.stop()  # a cancel alone can be absorbed inside a Redis call
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if self.lease is not None:
            self.lease.until = 0.0  # anything still holding the lease object stops acting

    def stop(self) -> None:
        self._stop.set()


class RoleLeases:
    """The roles of one gateway, over the role leases in Redis."""

    def __init__(self, store: Store, node_id: int, instance: str, *, lease_ms: int = 6000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store.roles
        self.node_id = node_id
        self.instance = instance
        self.lease_ms = lease_ms
        self.clock = clock
        self.roles: list[LeasedRole] = []

    def role(self, name: str, start: Callable[[Lease], Role]) -> LeasedRole:
        leased = LeasedRole(self, name, start)
        self.roles.append(leased)
        return leased

    async def holders(self) -> list[RoleHolder | None]:
        return await self.store.holders([r.name for r in self.roles])
