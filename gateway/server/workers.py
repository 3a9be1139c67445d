"""`gateway serve --workers N`: N gateway processes on one machine, as N nodes of one cluster.

One Python process runs on one core; the gateways already share a Redis as peers (node leases,
Metadata spreading partition leadership and coordinators by rendezvous hashing: see
`gateway.domain.registry`), so using every core needs no new protocol, only processes started,
watched and stopped together. The supervisor (this module) holds no client connections: it
starts the embedded Redis when no `--redis-url` is given, then the workers, each a `Gateway`
with its own Kafka and native port (the configured port + its index, each advertised as such,
a port 0 staying any free port) and a node id of its own (`--node-id` + index when one is set,
else the id its advertised address had, which a restarted worker gets back). Worker 0 alone runs
the admin HTTP API (on `--admin-port`): the state it administers is in Redis, shared by all, but
its `/metrics` count worker 0's own traffic.

A worker that dies is restarted after a back-off that doubles while it keeps dying young; it
comes back at its old address, so under its old node id, and rendezvous hashing hands it its old
partitions back. Meanwhile the others serve them: its lease runs out and Metadata stops naming it.
SIGTERM or SIGINT to the supervisor stops the workers (each a clean shutdown that hands its
leases over), then the embedded Redis. Workers get SIGTERM from the kernel if the supervisor
itself dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import os
import signal
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from gateway.config import SETTINGS, Config, memory_size
from gateway.errors import GatewayError
from gateway.server.gateway import EMBEDDED_READY_TIMEOUT, Gateway, loop_factory
from gateway.store.embedded import EmbeddedRedis, die_with_parent

log = logging.getLogger(__name__)

FIRST_BACKOFF = 0.25
"""Seconds before restarting a worker that died; doubled for each death within `YOUNG` of its start."""
MAX_BACKOFF = 30.0
YOUNG = 10.0
STOP_TIMEOUT = 30.0
"""Seconds a worker has to shut down cleanly on SIGTERM before it is killed."""
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def worker_config(config: Config, index: int, redis_url: str) -> Config:
    """Worker `index`'s settings: its own ports, advertised port and node id, the shared Redis."""
    def plus(port: int) -> int:
        return port + index if port else 0

    return dataclasses.replace(
        config, workers=1, redis_url=redis_url, kafka_port=plus(config.kafka_port),
        native_port=plus(config.native_port), advertised_port=plus(config.advertised_port),
        node_id=config.node_id + index if config.node_id >= 0 else -1)


def _worker(config: Config, index: int, ready: Connection) -> None:
    """A worker process's body: one `Gateway` (the admin listener in worker 0 only); its banner, or
    its one-line start-up failure, goes back to the supervisor over `ready`."""
    die_with_parent()
    logging.basicConfig(level=config.log_level.upper(), format=LOG_FORMAT.replace("%(name)s", f"worker {index} %(name)s"))
    gateway = Gateway(config, admin=index == 0)

    def announce(_: str) -> None:
        ports = {name: listener.port for name, listener in gateway.listeners.items()}
        ready.send(("ready", f"node id {config.node_id}, " + ", ".join(f"{n} {p}" for n, p in ports.items())))

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        try:
            runner.run(gateway.run(announce=announce))
        except KeyboardInterrupt:
            pass
        except GatewayError as exc:
            ready.send(("failed", str(exc)))
            raise SystemExit(1) from None


@dataclasses.dataclass
class Worker:
    """One worker as the supervisor knows it: its settings, its current process, when that started
    (a death soon after doubles the back-off) and the line it announced itself with."""

    index: int
    config: Config
    proc: BaseProcess | None = None
    started: float = 0.0
    backoff: float = FIRST_BACKOFF
    banner: str = ""


class Supervisor:
    """Starts the workers (after the embedded Redis, if any), restarts the ones that die, stops all."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.embedded: EmbeddedRedis | None = None
        self.workers: list[Worker] = []
        self._spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this loop shared
        self._stopping = asyncio.Event()

    def _check_ports(self) -> None:
        last = self.config.workers - 1
        for name in ("kafka_port", "native_port", "advertised_port"):
            port = getattr(self.config, name)
            if port and port + last > 65535:
                raise GatewayError(f"{SETTINGS['workers'].label} {self.config.workers} needs {name.replace('_', ' ')}s "
                                   f"{port}-{port + last}, past 65535: choose a lower {SETTINGS[name].label}")

    async def run(self) -> None:
        """Serve until SIGINT or SIGTERM, then stop the workers and the embedded Redis."""
        cfg = self.config
        self._check_ports()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stopping.set)
        try:
            if not cfg.redis_url:
                self.embedded = EmbeddedRedis(cfg.data_dir, fsync=cfg.redis_fsync,
                                              maxmemory=memory_size(cfg.redis_maxmemory))
                self.embedded.launch(owner=f"gateway supervisor of {cfg.workers} workers, kafka port {cfg.kafka_port}")
                await asyncio.to_thread(self.embedded.wait_ready, EMBEDDED_READY_TIMEOUT)
            url = cfg.redis_url or (self.embedded.url if self.embedded else "")
            self.workers = [Worker(i, worker_config(cfg, i, url)) for i in range(cfg.workers)]
            starting = asyncio.gather(*(self._start(w) for w in self.workers))
            stopping: asyncio.Future[Any] = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not starting.done():  # stopped while starting
                starting.cancel()
                return
            failures = [f for f in starting.result() if f]
            if failures:
                raise GatewayError(failures[0])
            for w in self.workers:
                self._announce(w)
            print(self.describe(), flush=True)
            await asyncio.gather(*(self._supervise(w) for w in self.workers))
        finally:
            self._stopping.set()
            await asyncio.gather(*(self._stop(w) for w in self.workers))
            if self.embedded is not None:
                await asyncio.to_thread(self.embedded.stop)

    def describe(self) -> str:
        """The banner: where each worker listens (the workers' lines above give each one's node id)."""
        redis = self.config.redis_url or f"embedded redis-server in {self.config.data_dir} ({self.embedded and self.embedded.url})"
        return (f"gateway listening on {self.config.host} with {len(self.workers)} workers: "
                + "; ".join(f"worker {w.index} (pid {w.proc and w.proc.pid}): {w.banner}" for w in self.workers)
                + f"; storage: {redis}")

    async def _start(self, w: Worker) -> str | None:
        """Start worker `w` and wait for its banner; None once it listens, else why it did not start."""
        theirs, ours = self._spawn.Pipe(duplex=False)
        proc = w.proc = self._spawn.Process(target=_worker, args=(w.config, w.index, ours),
                                            name=f"gateway worker {w.index}", daemon=False)
        proc.start()
        ours.close()  # the child holds the only sending end: its death reads as end-of-file here
        w.started = time.monotonic()
        try:
            await _readable(theirs.fileno())
            kind, text = theirs.recv()
        except EOFError:
            kind, text = "failed", f"exited with {await self._reap(proc)} before listening"
        finally:
            theirs.close()
        if kind != "ready":
            return f"worker {w.index}: {text}"
        w.banner = text
        return None

    @staticmethod
    def _announce(w: Worker) -> None:
        print(f"worker {w.index} (pid {w.proc and w.proc.pid}): {w.banner}", flush=True)

    async def _supervise(self, w: Worker) -> None:
        """Until the supervisor stops: wait for `w` to die, and start it again after its back-off."""
        while not self._stopping.is_set():
            assert w.proc is not None
            died = asyncio.ensure_future(_readable(w.proc.sentinel))
            stopping = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait([died, stopping], return_when=asyncio.FIRST_COMPLETED)
            died.cancel()
            stopping.cancel()
            if self._stopping.is_set():
                return
            code = await self._reap(w.proc)
            w.backoff = min(w.backoff * 2, MAX_BACKOFF) if time.monotonic() - w.started < YOUNG else FIRST_BACKOFF
            log.warning("worker %d (pid %d) exited with %s: restarting it in %g s", w.index, w.proc.pid, code, w.backoff)
            while not self._stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), w.backoff)
                if self._stopping.is_set():
                    return
                failure = await self._start(w)
                if failure is None:
                    self._announce(w)
                    break
                w.backoff = min(w.backoff * 2, MAX_BACKOFF)
                log.warning("%s: trying again in %g s", failure, w.backoff)

    async def _reap(self, proc: BaseProcess) -> int | str:
        """The exit code of a process whose sentinel is readable (it has ended), or the signal's name."""
        await asyncio.to_thread(proc.join)
        code = proc.exitcode
        return signal.Signals(-code).name if code is not None and code < 0 else (code if code is not None else "?")

    async def _stop(self, w: Worker) -> None:
        """SIGTERM (a clean shutdown), SIGKILL if the worker is still up `STOP_TIMEOUT` seconds later."""
        proc = w.proc
        if proc is None or proc.pid is None or proc.exitcode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(_readable(proc.sentinel), STOP_TIMEOUT)
        except TimeoutError:
            log.warning("worker %d (pid %d) did not stop within %g s: killing it", w.index, proc.pid, STOP_TIMEOUT)
            proc.kill()
        await self._reap(proc)


async def _readable(fd: int) -> None:
    """Until `fd` is readable: a pipe with data or at its end, a process sentinel once it has ended."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await done
    finally:
        loop.remove_reader(fd)
