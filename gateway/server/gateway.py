"""One gateway process: embedded Redis (unless given a URL), the three listeners, background roles.

Shutdown is staged: stop accepting, let connections finish their current request for a bounded
time, cancel what remains, then stop Redis last.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.admin.http import start_admin_server
from gateway.admin.schemas import start_schema_registry
from gateway.config import SETTINGS, Config, memory_size
from gateway.domain.compaction import LogCleaner
from gateway.domain.registry import Registry
from gateway.domain.roles import Role
from gateway.domain.services import Services
from gateway.domain.tiering import TierCopier
from gateway.errors import GatewayError, StorageUnavailable
from gateway.kafka.server import start_kafka_server
from gateway.native.server import start_native_server
from gateway.net import server_ssl_context
from gateway.server.periodic import Periodic
from gateway.server.wiring import wired_services
from gateway.store import Store
from gateway.store.embedded import EmbeddedRedis

log = logging.getLogger(__name__)

REDIS_REACH_TIMEOUT = 4.0
"""Seconds a Redis named by --redis-url has to answer at start-up (longer while it says it is loading)."""
EMBEDDED_READY_TIMEOUT = 15.0
"""Seconds the embedded redis-server has to answer (longer while it loads its AOF)."""
CLOCK_SYNC_INTERVAL = 5.0
"""Seconds between readings of Redis's clock (see gateway.clock); the monotonic clock carries it between."""


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed: about three times asyncio's round trips per second."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


class Listener(Protocol):
    @property
    def port(self) -> int: ...

    async def close(self, grace: float) -> None: ...


StartListener = Callable[[Services, str, int], Awaitable[Listener]]


class Gateway:
    def __init__(self, config: Config, *, admin: bool = True) -> None:
        self.config = config
        self.admin = admin  # the admin listener: off in all workers of `gateway serve --workers` but the first
        self.embedded: EmbeddedRedis | None = None
        self.store: Store | None = None  # the process's alone: the faces are given `services`
        self.services: Services | None = None
        self._closing = contextlib.AsyncExitStack()  # the services, then the store
        self.listeners: dict[str, Listener] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._roles: list[Role] = []
        self._stopped = asyncio.Event()
        self.cleaner: LogCleaner | None = None
        self.tiering: TierCopier | None = None  # with an object store (--tier-store)

    @property
    def redis_url(self) -> str:
        return self.config.redis_url or (self.embedded.url if self.embedded else "")

    async def start(self) -> None:
        """Every failure a user can act on (a port in use, a Redis out of reach, a certificate that
        does not load) is a `GatewayError` of one line naming the setting to change, raised after
        whatever was started is stopped again."""
        cfg = self.config
        self._check_tls()
        if not cfg.redis_url:
            self.embedded = EmbeddedRedis(cfg.data_dir, fsync=cfg.redis_fsync,
                                              maxmemory=memory_size(cfg.redis_maxmemory))
            # started from this thread, which lives as long as the process: the child's death signal follows it
            self.embedded.launch(owner=f"kafka port {cfg.kafka_port}, admin port {cfg.admin_port}")
        self._closing = contextlib.AsyncExitStack()
        host, port = cfg.kafka_advertised
        try:
            if self.embedded is not None:
                await asyncio.to_thread(self.embedded.wait_ready, EMBEDDED_READY_TIMEOUT)
            store = self.store = Store.open(self.redis_url)
            self._closing.push_async_callback(store.close)
            await self._wait_for_redis(store)
            await store.sync_clock()  # before anything stores a time: every deadline counts on Redis's clock
            registry = Registry(store, lease_ms=cfg.lease_ms)
            # before anything uses it: transaction ids, group and subscription leases carry it
            cfg.node_id = await registry.claim(cfg.node_id, host, port, cfg.native_port,
                                               cfg.admin_port if self.admin else 0)
            self.services = await self._closing.enter_async_context(wired_services(cfg, store, registry))
            starts: dict[str, StartListener] = {
                "kafka": start_kafka_server, "native": start_native_server, "admin": start_admin_server}
            if self.admin and cfg.schema_registry_port:
                starts["schema_registry"] = start_schema_registry
            if not self.admin:
                del starts["admin"]
            for name, start in starts.items():
                self.listeners[name] = await self._listen(name, start, self.services)
            port = cfg.advertised_port or self.listeners["kafka"].port
            admin = self.listeners["admin"].port if "admin" in self.listeners else 0
            await registry.advertise(host, port, self.listeners["native"].port, admin)
        except BaseException:
            await self.stop()
            raise
        self.services.groups.advertise(host, port)
        self.services.groups.start()  # session expiry, rebalance deadlines, groups left by a previous run
        svc, leased = self.services, self.services.roles.role
        cleaner = self.cleaner = LogCleaner(svc.log, stop_at=cfg.debug_cleaner_stop_at)
        tiering = self.tiering = TierCopier(svc.log, stop_at=cfg.debug_tier_stop_at) if svc.log.remote else None
        # one gateway at a time runs each of these (see gateway.domain.roles); every gateway renews its own registration
        self._roles = [
            registry,
            Periodic("clock", CLOCK_SYNC_INTERVAL, store.sync_clock, first_after=CLOCK_SYNC_INTERVAL),
            # a pass every interval, the first one interval after the role is taken, not at once
            leased("retention", lambda lease: Periodic(
                "retention", cfg.retention_check_interval, lambda: svc.log.retention_pass(lease),
                first_after=cfg.retention_check_interval)),
            leased("log cleaner", lambda lease: Periodic(
                "log cleaner", cfg.cleaner_interval, lambda: cleaner.clean_pass(lease),
                first_after=cfg.cleaner_interval)),
            leased("transaction reaper", lambda lease: Periodic(
                "transaction reaper", cfg.txn_reaper_interval, svc.txn.reaper())),
            leased("watermark snapshots", lambda lease: Periodic(
                "watermark snapshots", cfg.watermark_snapshot_interval, svc.watermark.snapshot_pass)),
            leased("delay scheduler", lambda lease: svc.delay.scheduler(lease=lease)),
            leased("lag sampler", lambda lease: Periodic(
                "lag sampler", cfg.lag_sample_interval, svc.lag.sample_pass, first_after=cfg.lag_sample_interval)),
        ]
        if tiering is not None:
            self._roles.append(leased("tiering", lambda lease: Periodic(
                "tiering", cfg.tier_interval, lambda: tiering.tier_pass(lease), first_after=cfg.tier_interval)))
        self._tasks += [asyncio.create_task(role.run()) for role in self._roles]
        self._tasks.append(asyncio.create_task(svc.memory.run()))  # every gateway samples for its own produce
        self._tasks.append(asyncio.create_task(self.store.follow_primary()))  # behind Sentinel: a failover's new primary

    async def _wait_for_redis(self, store: Store) -> None:
        """A Redis the user named gets a few seconds to answer, so a wrong URL is reported while they
        wait; the embedded one, which answered PING already, gets its whole ready timeout."""
        given = bool(self.config.redis_url)
        try:
            await store.wait_reachable(self.redis_url, REDIS_REACH_TIMEOUT if given else EMBEDDED_READY_TIMEOUT)
        except StorageUnavailable as exc:
            fix = f"check {SETTINGS['redis_url'].label}" if given else f"see {self.config.data_dir}/redis.log"
            raise GatewayError(f"{exc}: {fix}") from None

    async def _listen(self, name: str, start: StartListener, services: Services) -> Listener:
        """Start one listener; a port or address it cannot have is named with the flag that sets it."""
        cfg = self.config
        setting = SETTINGS[f"{name}_port"]
        port = getattr(cfg, setting.name)
        try:
            return await start(services, cfg.host, port)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else (exc.strerror or str(exc))
            name = name.replace("_", " ")  # schema_registry: "schema registry port 8081 is in use"
            host = SETTINGS["host"]
            if exc.errno == errno.EADDRINUSE:
                problem, fix = f"{name} port {port} is in use", f"choose another with {setting.label}"
            elif exc.errno == errno.EACCES:
                problem, fix = f"{name} port {port}: {reason}", f"choose another with {setting.label}"
            elif exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
                problem, fix = f"cannot listen on {cfg.host}: {reason}", f"choose another with {host.label}"
            else:
                problem, fix = f"cannot listen on {cfg.host} port {port} ({name}): {reason}", \
                    f"check {host.label} and {setting.label}"
            raise GatewayError(f"{problem}: {fix}") from None

    def _check_tls(self) -> None:
        """Load the certificate once before starting anything, so a wrong path is one line, not a
        traceback from the first listener."""
        cfg = self.config
        try:
            server_ssl_context(cfg.tls_cert_file, cfg.tls_key_file)
        except (OSError, ssl.SSLError) as exc:
            cert, key = SETTINGS["tls_cert_file"], SETTINGS["tls_key_file"]
            reason = exc.strerror or getattr(exc, "reason", None) or str(exc)
            raise GatewayError(f"cannot load the TLS certificate {cfg.tls_cert_file} (key "
                               f"{cfg.tls_key_file or 'in the same file'}): {reason}: check {cert.label} "
                               f"and {key.label}") from None

    def describe(self) -> str:
        ports = {name: lst.port for name, lst in self.listeners.items()}
        redis = self.config.redis_url or f"embedded redis-server in {self.config.data_dir} ({self.redis_url})"
        registry = f", schema registry {ports['schema_registry']}" if "schema_registry" in ports else ""
        return (
            f"gateway listening on {self.config.host}: kafka {ports.get('kafka')}, "
            f"native {ports.get('native')}, admin {ports.get('admin')}{registry}; storage: {redis}; "
            f"node id {self.config.node_id}"
        )

    async def stop(self, grace: float = 5.0) -> None:
        for role in self._roles:
            role.stop()  # a cancel alone can be absorbed inside a Redis call
        if self.services is not None:
            self.services.memory.stop()
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

    async def run(self, announce: Callable[[str], None] | None = None) -> None:
        """Serve until SIGINT or SIGTERM, then shut down cleanly; once listening, `describe()` goes to
        `announce` (default: stdout)."""
        await self.start()
        (announce or (lambda line: print(line, flush=True)))(self.describe())
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("shutting down")
        await self.stop()
