"""Users, tokens and ACLs in Redis. Credentials arrive already derived (never a password); a token
arrives as its digest. Changes that touch several keys are one script each."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgpack

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts

MECHANISM_FIELDS = {"SCRAM-SHA-256": "scram-sha-256", "SCRAM-SHA-512": "scram-sha-512"}


@dataclass(frozen=True)
class UserRecord:
    name: str
    credentials: dict[str, str]  # mechanism (SCRAM-SHA-256, ...) -> its stored credential
    tokens: dict[str, int] = field(default_factory=dict)  # token id -> created ms
    created_ms: int = 0


AclEntry = tuple[str, ...]
"""principal, resource type, pattern, resource name, operation, and host and permission unless they
are "*" and "allow" (entries written before hosts and DENY existed have the first five alone)."""


def _entries(entries: list[AclEntry]) -> bytes:
    """A script's array of entries: each packed as stored, the array without msgpack's bin type
    (which Redis's cmsgpack cannot read)."""
    return bytes(msgpack.packb([msgpack.packb(list(e)) for e in entries], use_bin_type=False))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class SecurityStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def set_user(self, name: str, credentials: dict[str, str], now_ms: int) -> bool:
        """Create the user or replace its credentials; True when it was created."""
        async with storage_errors():
            created = await self.scripts.call(
                "user-set-2",
                [keys.sec_user(name), keys.SEC_USERS],
                # name, now, sha256, sha512
                [name, now_ms, credentials.get("SCRAM-SHA-256", ""), credentials.get("SCRAM-SHA-512", "")],
            )
        return bool(created)

    async def get_user(self, name: str) -> UserRecord | None:
        async with storage_errors():
            h = await self.redis.hgetall(keys.sec_user(name))
        if not h:
            return None
        fields = {_text(k): _text(v) for k, v in h.items()}
        creds = {mech: fields[f] for mech, f in MECHANISM_FIELDS.items() if f in fields}
        tokens = {k[6:]: int(v.split(" ")[1]) for k, v in fields.items() if k.startswith("token:")}
        return UserRecord(name, creds, tokens, int(fields.get("created", 0)))

    async def user_names(self) -> list[str]:
        async with storage_errors():
            return sorted(_text(m) for m in await self.redis.smembers(keys.SEC_USERS))

    async def delete_user(self, name: str) -> bool:
        async with storage_errors():
            gone = await self.scripts.call(
                "user-delete-3", [keys.sec_user(name), keys.SEC_USERS, keys.SEC_TOKENS], [name]  # name
            )
        return bool(gone)

    async def add_token(self, name: str, token_id: str, digest: str, now_ms: int) -> bool:
        async with storage_errors():
            added = await self.scripts.call(
                "token-add-2",
                [keys.sec_user(name), keys.SEC_TOKENS],
                [name, token_id, digest, now_ms],  # name, id, digest, now
            )
        return bool(added)

    async def delete_token(self, name: str, token_id: str) -> bool:
        async with storage_errors():
            gone = await self.scripts.call("token-delete-2", [keys.sec_user(name), keys.SEC_TOKENS], [token_id])  # id
        return bool(gone)

    async def token_owner(self, digest: str) -> str | None:
        async with storage_errors():
            name = await self.redis.hget(keys.SEC_TOKENS, digest)
        return _text(name) if name is not None else None

    async def set_credential(self, name: str, mechanism: str, credential: str, now_ms: int) -> None:
        async with storage_errors():
            await self.scripts.call(
                "user-credential-2",
                [keys.sec_user(name), keys.SEC_USERS],
                [name, now_ms, MECHANISM_FIELDS[mechanism], credential],  # name, now, field, credential
            )

    async def delete_credential(self, name: str, mechanism: str) -> bool:
        """False when the user had no such credential."""
        async with storage_errors():
            gone = await self.scripts.call(
                "user-credential-2",
                [keys.sec_user(name), keys.SEC_USERS],
                [name, 0, MECHANISM_FIELDS[mechanism], ""],  # name, now, field, credential
            )
        return bool(gone)

    async def acls(self) -> list[AclEntry]:
        async with storage_errors():
            members = await self.redis.smembers(keys.SEC_ACLS)
        return [tuple(msgpack.unpackb(m)) for m in members]

    async def change_acls(self, remove: list[AclEntry], add: list[AclEntry]) -> tuple[list[bool], list[bool]]:
        """Remove and add entries in one step: (per removal whether it was there, per addition whether new)."""
        if not remove and not add:
            return [], []
        async with storage_errors():
            removed, added = await self.scripts.call(
                "acl-change-1",
                [keys.SEC_ACLS],
                [_entries(remove), _entries(add)],  # remove, add
            )
        return [bool(r) for r in removed], [bool(a) for a in added]
