"""The gateways sharing one Redis: each registered under a lease in one hash (`keys.GATEWAYS`).

Lease ends are read and written in Redis's clock by the scripts, so gateways whose clocks differ
still agree on who is alive; a renewal returns every live gateway in the same round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from gateway.errors import ErrorCode, NotAllowed
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts


@dataclass(frozen=True)
class GatewayEntry:
    """One registered gateway: where its listeners are, and how long its lease still runs."""

    node_id: int
    host: str
    kafka_port: int
    native_port: int
    admin_port: int
    lease_left_ms: int

    @classmethod
    def parse(cls, node: bytes | str, entry: bytes | str, now_ms: int) -> GatewayEntry:
        text = entry.decode() if isinstance(entry, bytes) else entry
        ends, _, host, kafka, native, admin = text.split(" ")
        return cls(int(node), host, int(kafka), int(native), int(admin), int(ends) - now_ms)


@dataclass(frozen=True)
class Placement:
    """A partition a reassignment placed: its replicas (the first preferred) and the gateway leading it."""

    leader: int
    replicas: tuple[int, ...]

    def encode(self) -> str:
        return f"{self.leader} {','.join(map(str, self.replicas))}"

    @classmethod
    def decode(cls, raw: bytes | str) -> Placement:
        leader, _, replicas = (raw.decode() if isinstance(raw, bytes) else raw).partition(" ")
        return cls(int(leader), tuple(int(r) for r in replicas.split(",")))


PartitionKey = tuple[str, int]


def address(host: str, kafka_port: int, native_port: int, admin_port: int) -> str:
    if not host or " " in host:
        raise NotAllowed(f"cannot register the advertised host {host!r}")
    return f"{host} {kafka_port} {native_port} {admin_port}"


def _taken(node: int, reply: list[Any]) -> NotAllowed:
    holder = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
    _, _, host, kafka, *_ = holder.split(" ")
    return NotAllowed(f"node id {node} is in use by a live gateway at {host}:{kafka}; give each gateway its own")


class RegistryStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def claim(self, node: int, instance: str, addr: str, ttl_ms: int) -> int:
        """Register under `node` (-1: the id this address had last, else a new one); the id."""
        async with storage_errors():
            reply = await self.scripts.call(
                "node-claim-3", [keys.GATEWAYS, keys.NODE_IDS, keys.NODE_ADDRESSES],
                [node, instance, addr, ttl_ms],  # node, instance, address, ttl_ms
            )
        if reply[0] != ErrorCode.OK:
            raise _taken(node, reply)
        return int(reply[1])

    async def renew(self, node: int, instance: str, addr: str, ttl_ms: int) -> list[GatewayEntry]:
        """Renew the lease (ttl 0 gives it up); every gateway whose lease runs, by node id."""
        async with storage_errors():
            reply = await self.scripts.call("node-lease-1", [keys.GATEWAYS], [node, instance, addr, ttl_ms])
        if reply[0] != ErrorCode.OK:
            raise _taken(node, reply)
        now = int(reply[1])
        flat = reply[2:]
        return sorted((GatewayEntry.parse(n, e, now) for n, e in zip(flat[::2], flat[1::2], strict=True)),
                      key=lambda g: g.node_id)

    async def placements(self) -> dict[PartitionKey, Placement]:
        """Every partition a reassignment placed (topic names hold no ':', so the last one splits)."""
        async with storage_errors():
            raw: dict[bytes, bytes] = await self.redis.hgetall(keys.LEADERS)  # type: ignore[assignment]
        out: dict[PartitionKey, Placement] = {}
        for field, value in raw.items():
            topic, _, partition = field.decode().rpartition(":")
            out[topic, int(partition)] = Placement.decode(value)
        return out

    async def place(self, changes: Sequence[tuple[PartitionKey, Placement | None, Placement | None]],
                    *, expect: bool = True) -> list[bool]:
        """Set each partition's placement (None removes it) where it still is what was read (`expect`),
        else anyway; whether each was set. One script, so a gateway acting on a stale view loses."""
        triples = [[f"{topic}:{partition}", "*" if not expect else "" if old is None else old.encode(),
                     "" if new is None else new.encode()] for (topic, partition), old, new in changes]
        if not triples:
            return []
        async with storage_errors():
            reply = await self.scripts.call("leaders-set-1", [keys.LEADERS],
                                            [msgpack.packb(triples, use_bin_type=False)])  # changes
        return [bool(r) for r in reply]
