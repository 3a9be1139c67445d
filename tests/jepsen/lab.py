"""The test hosts: Redis nodes, gateways and clients, each in a network namespace of its own on one
bridge, so that faults (tests/jepsen/faults.py) hit the links between them and nothing else.

A lab is named after the process that built it: namespaces `jepsen-<pid>-<serial><host>`, a bridge
`jb<pid hex>.<serial>`, veths `jv<pid hex>.<serial>.<index>`, and addresses in 10.231.<n>.0/24 with the bridge at .254,
so the test process (in the root namespace) can watch every node. Faults only ever change these
namespaces' own nftables rulesets, and processes started in them; a lab left by a process that died
(a killed test run) is swept when the next one starts, by those names alone.

Two topologies, both with two gateways (`g1`, `g2`) and client hosts (`c1`...):
- `sentinel`: hosts `r1`..`r3`, each a redis-server on 6379 and a redis-sentinel on 26379 (as Redis's
  own docs deploy them); `r1` starts as the primary, the others replicate it, and the gateways find
  it by `redis+sentinel://`.
- `cluster`: hosts `r1`..`r3`, each a redis-server in cluster mode on 6379 (a primary) and one on 6380
  (a replica of another host's primary, as `redis-cli --cluster create` places them), and the
  gateways find them by `redis+cluster://`.

Every gateway runs under libfaketime, its wall clock offset by what its clock file says (reread at
each reading: libfaketime 0.9.10's FAKETIME_CACHE_DURATION misses changes when monotonic time is not
faked), monotonic time left alone, as an NTP step leaves it (libfaketime 0.9.10 then fails
`time.sleep` with EINVAL, which the gateway, all asyncio, never calls with a Redis URL). It reaches
Redis through a relay in its namespace (tests/jepsen/relay.py) that a delay fault slows down.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis as redis_sync

from gateway.store.embedded import die_with_parent

PREFIX = "jepsen-"
SERVICE = "mymaster"
REPO = Path(__file__).resolve().parents[2]
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
RELAY_PORT = 16379
RELAY_MARK = 0x4A  # the relay's own connections carry it, so the redirect lets them through
REDIS_PORTS = (6379, 6380, 26379)  # what a gateway's relay stands in front of
KAFKA_PORT, NATIVE_PORT, ADMIN_PORT = 9092, 6650, 8080
TIMEOUT = 60.0
_serials = itertools.count()


def sh(*argv: str, check: bool = True, stdin: str | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, input=stdin, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def wait_for(check: Callable[[], object], what: str, timeout: float = TIMEOUT) -> object:
    """Poll `check` until it answers something true (an error counts as not yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = check()
        except (OSError, redis_sync.RedisError):
            answer = None
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def sweep() -> None:
    """Remove what labs of processes no longer alive left behind: only names with the lab prefixes."""
    for line in sh("ip", "netns", "list").splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{PREFIX}(\d+)-\w+", name)
        if m and not _alive(int(m.group(1))):
            for pid in sh("ip", "netns", "pids", name, check=False).split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            sh("ip", "netns", "delete", name, check=False)
    for line in sh("ip", "-o", "link", "show", "type", "bridge").splitlines():
        m = re.match(r"\d+: (jb([0-9a-f]+)\.\d+):", line)
        if m and not _alive(int(m.group(2), 16)):
            sh("ip", "link", "delete", m.group(1), check=False)


def _free_subnet(pid: int) -> str:
    """10.231.<n> that no bridge on this machine has yet, starting from one the pid chooses."""
    taken = set(re.findall(r"inet 10\.231\.(\d+)\.", sh("ip", "-o", "-4", "addr")))
    n = next(n for i in range(250) if str(n := (pid + i) % 250 + 1) not in taken)
    return f"10.231.{n}"


@dataclass(eq=False)
class Service:
    """A process on a host, started again with the same command after a kill."""

    host: Host
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.host.lab.root / "logs" / f"{self.host.name}-{self.name}.log"

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = self.host.popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.running():
            os.kill(self.pid, sig)

    def kill(self) -> None:
        if self.proc is not None and self.running():
            os.kill(self.pid, signal.SIGCONT)
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (SIGCONT first, for one a fault left stopped), SIGKILL when it does not go."""
        if self.proc is None or not self.running():
            return
        os.kill(self.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass(eq=False)
class Host:
    """A network namespace with one address on the lab's bridge."""

    lab: Lab
    name: str
    index: int
    services: dict[str, Service] = field(default_factory=dict)

    @property
    def ns(self) -> str:
        return f"{PREFIX}{self.lab.pid}-{self.lab.serial}{self.name}"

    @property
    def veth(self) -> str:
        """Its root-side interface (at most 15 characters; the dots keep two labs' names apart)."""
        return f"jv{self.lab.pid:x}.{self.lab.serial}.{self.index}"

    @property
    def ip(self) -> str:
        return f"{self.lab.subnet}.{self.index}"

    def popen(self, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        """`argv` run in this namespace (`ip netns exec` execs it: the pid is the program's own)."""
        env = {**os.environ, **kwargs.pop("env", {})}  # type: ignore[dict-item]
        return subprocess.Popen(["ip", "netns", "exec", self.ns, *argv], env=env, preexec_fn=die_with_parent,
                                stdin=subprocess.DEVNULL, cwd=REPO, **kwargs)  # type: ignore[call-overload]

    def run(self, *argv: str) -> str:
        return sh("ip", "netns", "exec", self.ns, *argv)

    def nft(self, script: str) -> None:
        """Apply an nftables script to this namespace's own ruleset."""
        sh("ip", "netns", "exec", self.ns, "nft", "-f", "-", stdin=script)

    def service(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Service:
        s = self.services[name] = Service(self, name, argv, env or {})
        s.start()
        return s


class Lab:
    """Build with `with Lab(root, "sentinel") as lab:`; everything goes when the block ends, however."""

    def __init__(self, root: Path, topology: str, *, gateways: int = 2, clients: int = 1,
                 gateway_args: tuple[str, ...] = ()) -> None:
        assert topology in ("sentinel", "cluster")
        self.root = root
        self.topology = topology
        self.pid = os.getpid()
        self.serial = next(_serials) % 100  # labs one process builds one after another (the soak)
        self.subnet = _free_subnet(self.pid)
        self.bridge = f"jb{self.pid:x}.{self.serial}"
        self.gateway_args = gateway_args
        self.redis = [Host(self, f"r{i}", i) for i in (1, 2, 3)]
        self.gateways = [Host(self, f"g{i}", 10 + i) for i in range(1, gateways + 1)]
        self.clients = [Host(self, f"c{i}", 20 + i) for i in range(1, clients + 1)]
        self.hosts = [*self.redis, *self.gateways, *self.clients]

    def __enter__(self) -> Lab:
        sweep()
        try:
            self._network()
            self._redis()
            started = [self._gateway(host) for host in self.gateways]  # started together: each takes seconds
            for service in started:
                self.wait_gateway(service)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the network

    def _network(self) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for host in self.hosts:
            sh("ip", "netns", "add", host.ns)
            sh("ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.ns)
            sh("ip", "link", "set", host.veth, "master", self.bridge, "up")
            host.run("ip", "addr", "add", f"{host.ip}/24", "dev", "eth0")
            host.run("ip", "link", "set", "eth0", "up")
            host.run("ip", "link", "set", "lo", "up")

    def close(self) -> None:
        for host in self.hosts:
            for s in host.services.values():
                with contextlib.suppress(Exception):
                    s.kill()
            # the veth first: a namespace goes when the kernel gets round to it, and its veth with it
            sh("ip", "link", "delete", host.veth, check=False)
            sh("ip", "netns", "delete", host.ns, check=False)
        sh("ip", "link", "delete", self.bridge, check=False)

    # ---- Redis

    def _redis_server(self, host: Host, port: int, *extra: str) -> Service:
        """A node on the settings README's "Production" recommends: `appendfsync always`, since a
        killed primary restarted before its replica is promoted hands that replica its own AOF in a
        full resync, and everysec's AOF can lack acknowledged writes (soak cluster:270253204)."""
        data = self.root / f"{host.name}-{port}"
        data.mkdir(parents=True, exist_ok=True)
        return host.service(f"redis-{port}", [
            "redis-server", "--port", str(port), "--bind", host.ip, "--protected-mode", "no",
            "--dir", str(data), "--appendonly", "yes", "--appendfsync", "always", "--save", "",
            "--maxmemory-policy", "noeviction", "--repl-diskless-sync-delay", "0", *extra,
        ])

    def _redis(self) -> None:
        if self.topology == "sentinel":
            primary = self.redis[0]
            for host in self.redis:
                extra = () if host is primary else ("--replicaof", primary.ip, "6379")
                self._redis_server(host, 6379, *extra)
            wait_for(lambda: self.online_replicas(primary.ip) == 2, "the replicas' links")
            for host in self.redis:
                self._sentinel(host, primary)
            wait_for(lambda: all(self._sentinel_sees_all(h) for h in self.redis), "the Sentinels to meet")
        else:
            for host in self.redis:
                for port in (6379, 6380):
                    self._redis_server(host, port, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                                       "--cluster-config-file", str(self.root / f"{host.name}-{port}" / "nodes.conf"))
            for host in self.redis:
                for port in (6379, 6380):
                    wait_for(lambda h=host, p=port: self.node(h.ip, p).ping(), f"{host.name}:{port}")
            # primaries first: redis-cli makes the first N addresses the primaries
            addresses = [f"{h.ip}:6379" for h in self.redis] + [f"{h.ip}:6380" for h in self.redis]
            sh("redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes")
            wait_for(lambda: all("cluster_state:ok" in self.node(h.ip, p).execute_command("CLUSTER", "INFO").decode()
                                 for h in self.redis for p in (6379, 6380)), "cluster_state:ok")

    def _sentinel(self, host: Host, primary: Host) -> None:
        folder = self.root / f"{host.name}-sentinel"
        folder.mkdir(parents=True, exist_ok=True)
        conf = folder / "sentinel.conf"  # Sentinel rewrites it with what it learns
        conf.write_text(
            f"port 26379\nbind {host.ip}\nprotected-mode no\ndir {folder}\n"
            f"sentinel myid {host.index:040x}\n"
            f"sentinel monitor {SERVICE} {primary.ip} 6379 2\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 3000\n"
            + "".join(f"sentinel known-replica {SERVICE} {h.ip} 6379\n" for h in self.redis if h is not primary)
            + "".join(f"sentinel known-sentinel {SERVICE} {h.ip} 26379 {h.index:040x}\n"
                      for h in self.redis if h is not host)
        )
        host.service("sentinel", ["redis-sentinel", str(conf)])

    def _sentinel_sees_all(self, host: Host) -> bool:
        state = self.node(host.ip, 26379).sentinel_master(SERVICE)
        return int(state["num-other-sentinels"]) == 2 and int(state["num-slaves"]) == 2

    def node(self, ip: str, port: int) -> redis_sync.Redis:
        return redis_sync.Redis(host=ip, port=port, socket_connect_timeout=1, socket_timeout=2)

    def online_replicas(self, ip: str, port: int = 6379) -> int:
        info = self.node(ip, port).info("replication")
        return sum(1 for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
                   and v.get("state") == "online")

    def primary(self) -> Host:
        """The Sentinel topology's primary as the Sentinels that answer name it (most of them)."""
        named: list[str] = []
        for host in self.redis:
            with contextlib.suppress(OSError, redis_sync.RedisError):
                named.append(self.node(host.ip, 26379).sentinel_get_master_addr_by_name(SERVICE)[0].decode())
        ip = max(set(named), key=named.count)
        return next(h for h in self.redis if h.ip == ip)

    def primaries(self) -> frozenset[str]:
        """The Redis primaries now, as `ip:port`: the Sentinels' choice, or the Cluster's masters as
        the first node that answers sees them."""
        if self.topology == "sentinel":
            return frozenset({f"{self.primary().ip}:6379"})
        for host in self.redis:
            with contextlib.suppress(OSError, redis_sync.RedisError):
                nodes = self.node(host.ip, 6379).execute_command("CLUSTER", "NODES").decode()
                return frozenset(line.split()[1].split("@")[0] for line in nodes.splitlines()
                                 if "master" in line.split()[2] and "fail" not in line.split()[2])
        return frozenset()

    @property
    def redis_url(self) -> str:
        if self.topology == "sentinel":
            return "redis+sentinel://" + ",".join(f"{h.ip}:26379" for h in self.redis) + f"/{SERVICE}"
        return f"redis+cluster://{self.redis[0].ip}:6379"

    # ---- gateways

    def clock_file(self, host: Host) -> Path:
        return self.root / f"{host.name}-clock"

    def delay_file(self, host: Host) -> Path:
        return self.root / f"{host.name}-delay"

    def _gateway(self, host: Host) -> Service:
        """Start `host`'s relay and gateway; the caller waits for the gateway to listen. Its log is at
        DEBUG: every produce's outcome with the batch's producer id, epoch and sequences, and every
        request's timing, from which a duplicate or a loss in a history is traced to its answers."""
        self.delay_file(host).write_text("0")
        host.service("relay", [sys.executable, "-m", "tests.jepsen.relay", "--port", str(RELAY_PORT),
                               "--mark", str(RELAY_MARK), "--delay-file", str(self.delay_file(host))])
        ports = ", ".join(str(p) for p in REDIS_PORTS)
        host.nft(
            "table ip jepsen_relay {\n chain out {\n  type nat hook output priority -100;\n"
            f"  meta mark {RELAY_MARK} return\n"
            f"  ip daddr {self.subnet}.0/24 tcp dport {{ {ports} }} redirect to :{RELAY_PORT}\n }}\n}}\n"
        )
        self.clock_file(host).write_text("+0\n")
        env = {"LD_PRELOAD": str(FAKETIME), "FAKETIME_TIMESTAMP_FILE": str(self.clock_file(host)),
               "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
               **{k: "" for k in os.environ if k.startswith("GATEWAY_")}}
        data = self.root / f"{host.name}-data"
        return host.service("gateway", [
            sys.executable, "-m", "gateway", "serve", "--host", host.ip, "--advertised-host", host.ip,
            "--kafka-port", str(KAFKA_PORT), "--native-port", str(NATIVE_PORT), "--admin-port", str(ADMIN_PORT),
            "--schema-registry-port", "0", "--data-dir", str(data), "--redis-url", self.redis_url,
            "--node-id", str(host.index), "--log-level", "DEBUG", *self.gateway_args,
        ], env)

    def wait_gateway(self, service: Service) -> None:
        """Until the gateway prints that it listens (or exits, an error with its log)."""
        def up() -> bool:
            if not service.running():
                raise RuntimeError(f"{service.host.name}'s gateway exited:\n{service.log.read_text()[-3000:]}")
            return "gateway listening on" in service.log.read_text(errors="replace")
        wait_for(up, f"{service.host.name}'s gateway")

    def restart(self, service: Service) -> None:
        """Start a killed service again; a gateway is waited for until it listens."""
        if service.name == "gateway" and service.log.exists():  # its old banner is not the new one's
            service.log.rename(service.log.with_suffix(f".{time.time_ns()}.log"))
        service.start()
        if service.name == "gateway":
            self.wait_gateway(service)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h.ip}:{KAFKA_PORT}" for h in self.gateways)

    @property
    def native(self) -> str:
        return ",".join(f"{h.ip}:{NATIVE_PORT}" for h in self.gateways)
