"""One gateway process: embedded Redis (unless given a URL), the three listeners, background roles.

Shutdown is staged: stop accepting, let connections finish their current request for a bounded
time, cancel what remains, then stop Redis last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Protocol

from gateway.admin.http import start_admin_server
from gateway.config import Config
from gateway.domain.registry import Registry
from gateway.domain.roles import Role
from gateway.domain.services import Services
from gateway.errors import GatewayError
from gateway.kafka.server import start_kafka_server
from gateway.native.server import start_native_server
from gateway.server.periodic import Periodic
from gateway.server.wiring import wired_services
from gateway.store import Store
from gateway.store.embedded import EmbeddedRedis

log = logging.getLogger(__name__)


class Listener(Protocol):
    @property
    def port(self) -> int: ...

    async def close(self, grace: float) -> None: ...


class Gateway:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.embedded: EmbeddedRedis | None = None
        self.store: Store | None = None  # the process's alone: the faces are given `services`
        self.services: Services | None = None
        self._closing = contextlib.AsyncExitStack()  # the services, then the store
        self.listeners: dict[str, Listener] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._roles: list[Role] = []
        self._stopped = asyncio.Event()

    @property
    def redis_url(self) -> str:
        return self.config.redis_url or (self.embedded.url if self.embedded else "")

    async def start(self) -> None:
        cfg = self.config
        if not cfg.redis_url:
            self.embedded = EmbeddedRedis(cfg.data_dir, fsync=cfg.redis_fsync)
            # started from this thread, which lives as long as the process: the child's death signal follows it
            self.embedded.launch(owner=f"kafka port {cfg.kafka_port}, admin port {cfg.admin_port}")
            await asyncio.to_thread(self.embedded.wait_ready)
        self._closing = contextlib.AsyncExitStack()
        store = self.store = Store.open(self.redis_url)
        self._closing.push_async_callback(store.close)
        registry = Registry(store, lease_ms=cfg.lease_ms)
        host, port = cfg.kafka_advertised
        try:
            await self._wait_for_redis(store)
            # before anything uses it: transaction ids, group and subscription leases carry it
            cfg.node_id = await registry.claim(cfg.node_id, host, port, cfg.native_port, cfg.admin_port)
            self.services = await self._closing.enter_async_context(wired_services(cfg, store, registry))
            self.listeners["kafka"] = await start_kafka_server(self.services, cfg.host, cfg.kafka_port)
            self.listeners["native"] = await start_native_server(self.services, cfg.host, cfg.native_port)
            self.listeners["admin"] = await start_admin_server(self.services, cfg.host, cfg.admin_port)
            port = cfg.advertised_port or self.listeners["kafka"].port
            await registry.advertise(host, port, self.listeners["native"].port, self.listeners["admin"].port)
        except BaseException:
            await self.stop()
            raise
        self.services.groups.advertise(host, port)
        self.services.groups.start()  # session expiry, rebalance deadlines, groups left by a previous run
        svc, leased = self.services, self.services.roles.role
        # one gateway at a time runs each of these (see gateway.domain.roles); every gateway renews its own registration
        self._roles = [
            registry,
            # a pass every interval, the first one interval after the role is taken, not at once
            leased("retention", lambda lease: Periodic(
                "retention", cfg.retention_check_interval, lambda: svc.log.retention_pass(lease),
                first_after=cfg.retention_check_interval)),
            leased("transaction reaper", lambda lease: Periodic(
                "transaction reaper", cfg.txn_reaper_interval, svc.txn.recover)),
            leased("watermark snapshots", lambda lease: Periodic(
                "watermark snapshots", cfg.watermark_snapshot_interval, svc.watermark.snapshot_pass)),
            leased("delay scheduler", lambda lease: svc.delay.scheduler(lease=lease)),
        ]
        self._tasks += [asyncio.create_task(role.run()) for role in self._roles]

    async def _wait_for_redis(self, store: Store, timeout: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                await store.ping()
                return
            except Exception as exc:
                if asyncio.get_running_loop().time() > deadline:
                    raise GatewayError(f"cannot reach Redis at {self.redis_url}: {exc}") from exc
                await asyncio.sleep(0.2)

    def describe(self) -> str:
        ports = {name: lst.port for name, lst in self.listeners.items()}
        redis = self.config.redis_url or f"embedded redis-server in {self.config.data_dir} ({self.redis_url})"
        return (
            f"gateway listening on {self.config.host}: kafka {ports.get('kafka')}, "
            f"native {ports.get('native')}, admin {ports.get('admin')}; storage: {redis}; node id {self.config.node_id}"
        )

    async def stop(self, grace: float = 5.0) -> None:
        for role in self._roles:
            role.stop()  # a cancel alone can be absorbed inside a Redis call
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=grace)
        self._roles.clear()
        self._tasks.clear()
        await asyncio.gather(*(lst.close(grace) for lst in self.listeners.values()), return_exceptions=True)
        self.listeners.clear()
        await self._closing.aclose()
        self.services = None
        self.store = None
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
            self.embedded = None
        self._stopped.set()

    async def run(self) -> None:
        """Serve until SIGINT or SIGTERM, then shut down cleanly."""
        await self.start()
        print(self.describe(), flush=True)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("shutting down")
        await self.stop()
