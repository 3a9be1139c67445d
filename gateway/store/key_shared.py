"""Key_Shared subscriptions' shared state: who the consumers are across gateways, and per partition
which consumer holds unacknowledged messages of each key hash (so a hash that moved waits for them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.clock import now_ms
from gateway.errors import ErrorCode, error_for
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts

HashRange = tuple[int, int]
"""Key hashes from the first to the last, both included."""


@dataclass(frozen=True)
class Member:
    id: str
    name: str  # the consumer's name: where it sits on the consistent-hashing ring
    ranges: tuple[HashRange, ...] = ()  # fixed ranges instead (Pulsar's sticky mode)


@dataclass(frozen=True)
class Members:
    """The live consumers of a subscription, sorted by id, the set's generation, and the members
    asked to join that were refused (their ranges conflict with a live member's)."""

    generation: int
    members: tuple[Member, ...]
    refused: frozenset[str] = frozenset()


Claim = tuple[int, list[int]]
"""One group to claim: a key hash and its offsets, ascending."""


class KeySharedStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def members(
        self, topic: str, name: str, *, ttl_ms: int, join: Sequence[Member] = (),
        leave: Sequence[str] = (), bump: bool = False,
    ) -> Members:
        """Join or renew `join` for `ttl_ms`, drop `leave`; the set as it is then."""
        ops = [f"+{m.id}={m.name.encode().hex()}={','.join(f'{a}-{b}' for a, b in m.ranges)}" for m in join]
        ops += [f"-{m}" for m in leave]
        async with storage_errors():
            # now_ms, ttl_ms, bump, ops
            r = await self.scripts.call("ks-members-1", [keys.key_shared_members(topic, name)],
                                        [now_ms(), ttl_ms, 1 if bump else 0, " ".join(ops)])
        n = int(r[1])
        refused = frozenset(m.decode() for m in r[2:2 + n])
        rest = r[2 + n:]
        members = tuple(
            Member(rest[i].decode(), bytes.fromhex(rest[i + 1].decode()).decode(),
                   tuple((int(a), int(b)) for a, b in (x.split("-") for x in rest[i + 2].decode().split(",") if x)))
            for i in range(0, len(rest), 3))
        return Members(int(r[0]), members, refused)

    async def claim(
        self, topic: str, name: str, generation: int, live: Sequence[str],
        claims: list[tuple[str, int, list[Claim]]], released: dict[tuple[int, str], dict[int, int]] | None = None,
    ) -> list[list[list[int] | None]]:
        """For each (member, partition, groups), per group in order: the offsets granted to the member
        (acknowledged ones left out), or None while another member still holds messages of its hash.
        `released` ((partition, member) -> {key hash: messages it no longer holds}) is recorded
        first, in the same round trip."""
        calls: list[tuple[str, list[str], list[Any]]] = [
            # member, counts
            ("ks-release-1", [keys.key_shared_sticky(topic, p, name)],
             [member, " ".join(f"{h}:{n}" for h, n in counts.items())])
            for (p, member), counts in (released or {}).items()
        ]
        calls += [
            # member, gen, live, groups
            ("ks-claim-3",
             [keys.subscription(topic, p, name), keys.sub_acks(topic, p, name), keys.key_shared_sticky(topic, p, name)],
             [member, generation, " ".join(live), ";".join(f"{h} {' '.join(map(str, offs))}" for h, offs in groups)])
            for member, p, groups in claims
        ]
        if not calls:
            return []
        async with storage_errors():
            replies = await self.scripts.call_many(calls)
        failed = [r for r in replies if isinstance(r, Exception)]
        if failed:
            raise failed[0]
        out: list[list[list[int] | None]] = []
        for (_, p, _), reply in zip(claims, replies[len(replies) - len(claims):], strict=True):
            if reply and not isinstance(reply[0], list):
                raise error_for(ErrorCode(int(reply[0])), f"{topic}-{p}")
            out.append([[int(o) for o in g[1:]] if int(g[0]) else None for g in reply])
        return out

    async def forget_holders(self, topic: str, partitions: Sequence[int], name: str) -> None:
        """Who holds which key hash, forgotten on these partitions (a seek starts every key afresh)."""
        async with storage_errors():
            for p in partitions:
                await self.redis.delete(keys.key_shared_sticky(topic, p, name))

    async def delete(self, topic: str, partitions: range, name: str) -> None:
        """Forget the subscription's Key_Shared state (its members and every partition's holders)."""
        await self.forget_holders(topic, partitions, name)
        async with storage_errors():
            await self.redis.delete(keys.key_shared_members(topic, name))
