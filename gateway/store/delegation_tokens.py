"""Delegation tokens (KIP-48) in Redis, shared by every gateway: each token's record under the
{gw:dt} hash tag, found by id or by the SHA-256 of its HMAC. The HMAC itself is never stored: a
gateway derives it from the id with the secret key it was given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts
from gateway.store.security import _text


@dataclass(frozen=True)
class TokenRecord:
    token_id: str
    owner: str  # principals, "User:alice"
    requester: str
    renewers: list[str]
    issue_ms: int
    max_ms: int
    expiry_ms: int


class DelegationTokenStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def create(self, token: TokenRecord, digest: str, now_ms: int) -> None:
        """Keep a new token (forgetting those already expired)."""
        renewers = bytes(msgpack.packb(token.renewers, use_bin_type=False))
        async with storage_errors():
            await self.scripts.call(
                "dtoken-create-2", [keys.DT_IDS, keys.DT_HMACS],
                # id, digest, owner, requester, renewers, issue, max, expiry, now
                [token.token_id, digest, token.owner, token.requester, renewers, token.issue_ms, token.max_ms,
                 token.expiry_ms, now_ms],
            )

    async def extend(self, digest: str, principal: str, now_ms: int, lifetime_ms: int) -> tuple[str, int]:
        """Renew or (negative lifetime) remove the token whose HMAC has this digest: ("ok", expiry)
        or ("not-found" | "expired" | "owner-mismatch", 0)."""
        async with storage_errors():
            answer = await self.scripts.call(
                "dtoken-extend-2", [keys.DT_IDS, keys.DT_HMACS],
                [digest, principal, now_ms, lifetime_ms],  # digest, principal, now, lifetime
            )
        outcome = _text(answer[0])
        return outcome, int(answer[1]) if len(answer) > 1 else 0

    async def get(self, token_id: str) -> TokenRecord | None:
        async with storage_errors():
            h = await self.redis.hgetall(keys.dt_token(token_id))
        return _record(token_id, h) if h else None

    async def all(self) -> list[TokenRecord]:
        async with storage_errors():
            ids = sorted(_text(i) for i in await self.redis.smembers(keys.DT_IDS))
        pipe = self.redis.pipeline(transaction=False)
        for token_id in ids:
            pipe.hgetall(keys.dt_token(token_id))
        async with storage_errors():
            rows: Any = await pipe.execute()
        return [_record(i, h) for i, h in zip(ids, rows, strict=True) if h]


def _record(token_id: str, h: dict[Any, Any]) -> TokenRecord:
    f = {_text(k): v for k, v in h.items()}
    return TokenRecord(token_id, _text(f["owner"]), _text(f["requester"]), [_text(r) for r in msgpack.unpackb(f["renewers"], raw=False)],
                       int(f["issue"]), int(f["max"]), int(f["expiry"]))
