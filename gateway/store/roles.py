"""Leases on background roles: one key per role (`keys.role_holder`) and an epoch counter beside it."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import ErrorCode
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts


@dataclass(frozen=True)
class RoleHolder:
    role: str
    node_id: int
    epoch: int


class RoleStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def hold(self, role: str, node: int, instance: str, epoch: int, ttl_ms: int) -> int | None:
        """Take or renew the role's lease (ttl 0 gives it up): the epoch held, or None while another
        gateway holds it. A lease taken anew comes with an epoch above every earlier one."""
        async with storage_errors():
            reply = await self.scripts.call(
                "role-lease-2", [keys.role_holder(role), keys.role_epochs(role)],
                [node, instance, epoch, ttl_ms],  # node, instance, epoch, ttl_ms
            )
        return int(reply[1]) if reply[0] == ErrorCode.OK else None

    async def holders(self, roles: list[str]) -> list[RoleHolder | None]:
        """Who runs each role now (None: nobody, e.g. between a holder's death and the takeover)."""
        pipe = self.redis.pipeline(transaction=False)
        for role in roles:
            pipe.get(keys.role_holder(role))
        async with storage_errors():
            raw = await pipe.execute()
        out: list[RoleHolder | None] = []
        for role, value in zip(roles, raw, strict=True):
            if value is None:
                out.append(None)
            else:
                node, _, epoch = value.decode().split(" ")
                out.append(RoleHolder(role, int(node), int(epoch)))
        return out
