"""Faults on a lab's hosts (tests/jepsen/lab.py), each undone by its `heal()`.

Network faults are nftables rules in the namespaces of the hosts they cut, one table per fault
(`jf<n>`), dropped whole on heal: only the lab's own addresses are ever named, and the root
namespace is never touched. Packets are dropped, not refused, so a cut link looks as it does in a
real partition: a silent connection, never a reset. Loss is nftables' random drop (`numgen random`);
delay is the gateway's relay (tests/jepsen/relay.py), since this kernel has no netem. Process faults
signal the lab's own processes by pid: SIGSTOP/SIGCONT for a pause, SIGKILL and the same command
again for a kill. A clock jump rewrites the offset libfaketime reads for a gateway.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Iterable

from tests.jepsen.lab import Host, Lab, Service, wait_for

_tables = itertools.count(1)


class Fault:
    """Something done to the lab, and its undoing; `heal` is safe to call twice."""

    name = "fault"

    def start(self) -> None:
        raise NotImplementedError

    def heal(self) -> None:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.name


class Drop(Fault):
    """Packets from each host of `sources` to each host of `targets` are dropped (on the way out of a
    source and on the way into a target, so either end alone would do it)."""

    def __init__(self, name: str, sources: Iterable[Host], targets: Iterable[Host], percent: int = 100) -> None:
        self.name = name
        self.sources, self.targets = list(sources), list(targets)
        self.percent = percent
        self.table = f"jf{next(_tables)}"
        self.touched: list[Host] = []

    def _rule(self, direction: str, peers: list[Host]) -> str:
        ips = ", ".join(h.ip for h in peers)
        chance = f"numgen random mod 100 < {self.percent} " if self.percent < 100 else ""
        return f"  ip {direction} {{ {ips} }} {chance}drop\n"

    def start(self) -> None:
        for host in {*self.sources, *self.targets}:
            out = self._rule("daddr", self.targets) if host in self.sources else ""
            into = self._rule("saddr", self.sources) if host in self.targets else ""
            host.nft(f"table ip {self.table} {{\n"
                     f" chain out {{\n  type filter hook output priority 0;\n{out} }}\n"
                     f" chain in {{\n  type filter hook input priority 0;\n{into} }}\n}}\n")
            self.touched.append(host)

    def heal(self) -> None:
        while self.touched:
            host = self.touched.pop()
            host.run("nft", "delete", "table", "ip", self.table)


class Partition(Fault):
    """The hosts split into sides that do not reach each other; a host on no side reaches all."""

    def __init__(self, name: str, *sides: Iterable[Host]) -> None:
        self.name = name
        groups = [list(s) for s in sides]
        self.drops = [Drop(name, a, b) for i, a in enumerate(groups) for j, b in enumerate(groups) if i != j]

    def start(self) -> None:
        for d in self.drops:
            d.start()

    def heal(self) -> None:
        for d in self.drops:
            d.heal()


def one_way(sources: Iterable[Host], targets: Iterable[Host]) -> Fault:
    """What `sources` send to `targets` is lost; the other way gets through."""
    s, t = list(sources), list(targets)
    return Drop(f"one-way {'+'.join(h.name for h in s)} -> {'+'.join(h.name for h in t)}", s, t)


def isolate_primary(lab: Lab) -> Fault:
    """The Sentinel primary's host with the first gateway (and the one Sentinel there, a minority)
    cut off from the other Redis hosts and the other gateways; clients still reach every gateway, so
    some keep writing through the gateway stuck with the old primary while the majority fails over."""
    primary = lab.primary()
    minority = [primary, lab.gateways[0]]
    majority = [h for h in (*lab.redis, *lab.gateways) if h not in minority]
    return Partition(f"isolate primary {primary.name}+{lab.gateways[0].name}", minority, majority)


def isolate_gateway(lab: Lab, gateway: Host) -> Fault:
    """A gateway cut off from every Redis host while its clients still reach it."""
    return Partition(f"isolate {gateway.name} from redis", [gateway], lab.redis)


def loss(lab: Lab, hosts: Iterable[Host], percent: int) -> Fault:
    """`percent` of the packets between `hosts` and the other server hosts dropped at random, both ways."""
    chosen = list(hosts)
    others = [h for h in (*lab.redis, *lab.gateways) if h not in chosen]
    fault = Partition(f"{percent}% loss {'+'.join(h.name for h in chosen)}", chosen, others)
    for d in fault.drops:
        d.percent = percent
    return fault


class Delay(Fault):
    """Everything between a gateway and Redis held `ms` milliseconds each way (its relay)."""

    def __init__(self, lab: Lab, gateway: Host, ms: int) -> None:
        self.name = f"{ms} ms delay {gateway.name}<->redis"
        self.file = lab.delay_file(gateway)
        self.ms = ms

    def start(self) -> None:
        self._set(self.ms)

    def heal(self) -> None:
        self._set(0)

    def _set(self, ms: int) -> None:
        """Write the delay, and wait for the relay to say it holds it."""
        self.file.write_text(str(ms))
        seen = self.file.with_name(self.file.name + ".seen")
        wait_for(lambda: seen.read_text() == str(ms), f"the relay's {ms} ms", 10)


class Pause(Fault):
    """SIGSTOP, then SIGCONT: the process resumes as if nothing happened, stale state and all."""

    def __init__(self, service: Service) -> None:
        self.name = f"pause {service.host.name} {service.name}"
        self.service = service

    def start(self) -> None:
        self.service.signal(signal.SIGSTOP)

    def heal(self) -> None:
        self.service.signal(signal.SIGCONT)


class Kill(Fault):
    """SIGKILL, then the same command again (a gateway waited for until it listens)."""

    def __init__(self, lab: Lab, service: Service) -> None:
        self.name = f"kill {service.host.name} {service.name}"
        self.lab, self.service = lab, service
        self.killed = False

    def start(self) -> None:
        self.service.kill()
        self.killed = True

    def heal(self) -> None:
        if self.killed:
            self.killed = False
            self.lab.restart(self.service)


class ClockJump(Fault):
    """A gateway's wall clock stepped by `seconds` (either way), as a bad NTP step does; monotonic
    time goes on. Heal steps it back."""

    def __init__(self, lab: Lab, gateway: Host, seconds: int) -> None:
        self.name = f"clock {seconds:+d} s {gateway.name}"
        self.file = lab.clock_file(gateway)
        self.seconds = seconds

    def start(self) -> None:
        self.file.write_text(f"{self.seconds:+d}\n")

    def heal(self) -> None:
        self.file.write_text("+0\n")


def primary_service(lab: Lab) -> Service:
    """The Sentinel topology's current primary redis-server."""
    return lab.primary().services["redis-6379"]
