"""The embedded `redis-server`: AOF on, files in the data dir, gone when the gateway goes.

The child gets SIGTERM when the gateway dies (even by SIGKILL), and Redis answers SIGTERM by
flushing its AOF, so nothing acknowledged is lost and the next start finds the data dir free.
The data dir belongs to one gateway at a time: an exclusive `flock` on `gateway.lock`, held for the
gateway's life and released by the kernel when the process dies, however it dies. A second gateway on
the same dir refuses and names the holder; it never signals a process it did not start.
`EmbeddedCluster` starts a local Redis Cluster the same way, for tests and benchmarks.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from gateway.errors import GatewayError

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel send this process SIGTERM when the thread that started it ends (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether `port` can be bound now (a `--workers` gateway needs its port + index free too)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if not found:
        raise GatewayError(
            "redis-server is not installed: install it (Debian: apt-get install redis-server) "
            "or pass --redis-url to use an existing Redis"
        )
    return found


class EmbeddedRedis:
    """A redis-server child process bound to loopback on a free port."""

    def __init__(
        self, data_dir: Path, *, port: int | None = None, fsync: str = "everysec", cluster: bool = False,
        replica_of: int | None = None, node_timeout_ms: int = 5000, maxmemory: int = 0,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port()
        self.fsync = fsync
        self.cluster = cluster  # a node in cluster mode, to be joined by `EmbeddedCluster`
        self.node_timeout_ms = node_timeout_ms  # a cluster node's silence before its replica takes over
        self.cluster_port = free_port() if cluster else 0  # the cluster bus's, kept across restarts
        self.replica_of = replica_of  # the port of a loopback primary this server replicates
        self.maxmemory = maxmemory  # bytes; 0: no limit. Either way Redis never evicts (noeviction)
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock: int | None = None  # the data dir's lock file, open while this process owns the dir

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> None:
        """`launch`, then `wait_ready`: for callers with no event loop to keep serving meanwhile."""
        self.launch()
        self.wait_ready(timeout)

    def launch(self, owner: str = "") -> None:
        """Take the data dir and start the server; call it from the thread that lives as long as the
        process (the main one), since the child's death signal follows the thread that started it.
        `owner` says who holds the dir, for a second gateway's refusal."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GatewayError(f"cannot use data dir {self.data_dir}: {exc.strerror}: "
                               "give this gateway another --data-dir") from None
        self._take_data_dir(owner)
        try:
            self._wait_for_leftover()
            self._spawn()
        except BaseException:
            self._release_data_dir()
            raise

    def _take_data_dir(self, owner: str) -> None:
        path = self.data_dir / "gateway.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise GatewayError(
                f"data dir {self.data_dir} is in use by {holder}: stop it, or give this one another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"gateway pid {os.getpid()}{', ' + owner if owner else ''}\n".encode(), 0)
        self._lock = fd

    def _release_data_dir(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # closing the only descriptor drops the lock
            self._lock = None

    def _wait_for_leftover(self, timeout: float = 20.0) -> None:
        """A server left by a gateway that died is flushing its AOF on the death signal it got:
        wait for it to go rather than signal a process this gateway did not start."""
        pid = self._leftover_pid()
        deadline = time.monotonic() + timeout
        while pid is not None and _alive(pid):
            if time.monotonic() > deadline:
                raise GatewayError(
                    f"redis-server pid {pid}, left by an earlier gateway, still runs on data dir {self.data_dir}: "
                    "stop it, or give this gateway another --data-dir"
                )
            time.sleep(0.02)

    def _leftover_pid(self) -> int | None:
        """The pid in the pid file, if that process is a redis-server on this data dir."""
        try:
            pid = int((self.data_dir / "redis.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        return pid if os.fsencode(str(self.data_dir)) in cmdline else None

    def _spawn(self) -> None:
        args = [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", self.fsync,
            "--save", "",
            "--pidfile", str(self.data_dir / "redis.pid"),
            "--logfile", str(self.data_dir / "redis.log"),
            "--protected-mode", "yes",
            "--maxmemory", str(self.maxmemory),
            "--maxmemory-policy", "noeviction",
        ]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", str(self.data_dir / "nodes.conf"),
                     "--cluster-node-timeout", str(self.node_timeout_ms), "--cluster-port", str(self.cluster_port)]
        if self.replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        self.proc = subprocess.Popen(args, preexec_fn=die_with_parent, stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Until the server answers PING; a server that exits, or stays silent for `timeout` seconds, is
        an error. While it answers that it is loading its AOF it is slow, not stuck: it is waited for."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise GatewayError(f"embedded redis-server exited with {code}: {self._last_log_line()}: "
                                   f"see {self.data_dir / 'redis.log'}")
            answer = self._ping()
            if answer.startswith(b"+PONG"):
                return
            if answer.startswith(b"-LOADING"):
                deadline = time.monotonic() + timeout
            time.sleep(0.02)
        self.stop()
        raise GatewayError(f"embedded redis-server did not answer within {timeout:g} s: "
                           f"see {self.data_dir / 'redis.log'}")

    def _last_log_line(self) -> str:
        try:
            lines = (self.data_dir / "redis.log").read_text(errors="replace").splitlines()
        except OSError:
            return "no log"
        return next((line.strip() for line in reversed(lines) if line.strip()), "an empty log")

    def _ping(self) -> bytes:
        """The server's first answer to PING, or b"" when it does not answer."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64)
        except OSError:
            return b""

    def stop_leftover(self) -> None:
        """For a test harness that owns the data dir: stop a server its killed gateway left behind."""
        pid = self._leftover_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
            self._wait_for_leftover()

    def stop(self, timeout: float = 10.0) -> None:
        try:
            if self.proc is None or self.proc.poll() is not None:
                return
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        finally:
            self._release_data_dir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: a check, nothing is sent
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class EmbeddedCluster:
    """A Redis Cluster of `primaries` redis-server children on free loopback ports, each with
    `replicas` more (none by default), created with `redis-cli --cluster create` as an operator would."""

    def __init__(self, data_dir: Path, *, primaries: int = 3, replicas: int = 0, fsync: str = "everysec",
                 node_timeout_ms: int = 5000, maxmemory: int = 0) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.replicas = replicas
        self.nodes = [EmbeddedRedis(self.data_dir / f"node-{i}", fsync=fsync, cluster=True, node_timeout_ms=node_timeout_ms,
                                    maxmemory=maxmemory)
                      for i in range(primaries * (1 + replicas))]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    @property
    def node_urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def start(self, timeout: float = 30.0) -> None:
        try:
            for node in self.nodes:
                node.start()
            cli = shutil.which("redis-cli")
            if not cli:
                raise GatewayError("redis-cli is not installed (Debian: apt-get install redis-tools)")
            addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
            created = subprocess.run(
                [cli, "--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
            )
            if created.returncode != 0:
                raise GatewayError(f"redis-cli --cluster create failed: {created.stdout[-2000:]}{created.stderr}")
            self._wait_ok(cli, timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ok(self, cli: str, timeout: float) -> None:
        """Every node reports `cluster_state:ok`: each knows the others and every slot is served."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = [
                subprocess.run([cli, "-p", str(n.port), "cluster", "info"], capture_output=True, text=True,
                               timeout=5).stdout
                for n in self.nodes
            ]
            if all("cluster_state:ok" in s for s in states):
                return
            time.sleep(0.05)
        raise GatewayError("the local Redis Cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
