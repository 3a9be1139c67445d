"""Delegation tokens (KIP-48, with KIP-373's owner and requester), as Kafka 4.4's
DelegationTokenControlManager issues, renews and expires them and DelegationTokenManager describes
them and logs clients in with them.

A token's HMAC is HMAC-SHA512 of its id under `delegation.token.secret.key`. That key is given to
every gateway, as to every Kafka broker, and never stored: Redis keeps each token's record and a
SHA-256 of its HMAC, so nothing read from Redis (a replica, a backup) can log anyone in. A token
logs in with SCRAM (`tokenauth=true`): its id the user name, its HMAC in base64 the password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.clock import now_ms
from gateway.store import Store
from gateway.store.delegation_tokens import TokenRecord

__all__ = ["USER_TYPE", "DelegationTokens", "IssuedToken", "TokenRecord"]

USER_TYPE = "User"  # KafkaPrincipal.USER_TYPE: the only principal type a renewer may have


@dataclass(frozen=True)
class IssuedToken:
    record: TokenRecord
    hmac: bytes


def _digest(token_hmac: bytes) -> str:
    return hashlib.sha256(token_hmac).hexdigest()


class DelegationTokens:
    """Issuing and checking delegation tokens; `enabled` only with a secret key."""

    def __init__(self, store: Store, secret_key: str, *, expiry_time_ms: int, max_lifetime_ms: int) -> None:
        self.store = store.delegation_tokens
        self.secret_key = secret_key
        self.expiry_time_ms = expiry_time_ms
        self.max_lifetime_ms = max_lifetime_ms

    @property
    def enabled(self) -> bool:
        return bool(self.secret_key)

    def hmac(self, token_id: str) -> bytes:
        """DelegationTokenControlManager.createHmac: HmacSHA512 of the id under the secret key."""
        return hmac.new(self.secret_key.encode(), token_id.encode(), "sha512").digest()

    async def create(self, owner: str, requester: str, renewers: list[str], max_lifetime_ms: int) -> IssuedToken:
        """A new token: it lives `delegation.token.expiry.time.ms` unless renewed, and at most the
        smaller of `max_lifetime_ms` (when above 0) and `delegation.token.max.lifetime.ms`."""
        now = now_ms()
        lifetime = min(self.max_lifetime_ms, max_lifetime_ms) if max_lifetime_ms > 0 else self.max_lifetime_ms
        max_ms = now + lifetime
        record = TokenRecord(str(uuid.uuid4()), owner, requester, renewers, now, max_ms,
                             min(max_ms, now + self.expiry_time_ms))
        token_hmac = self.hmac(record.token_id)
        await self.store.create(record, _digest(token_hmac), now)
        return IssuedToken(record, token_hmac)

    async def renew(self, token_hmac: bytes, principal: str, renew_period_ms: int) -> tuple[str, int]:
        """("ok", new expiry) or the refusal ("not-found", "expired", "owner-mismatch"); a renewal
        lasts `delegation.token.expiry.time.ms`, or less when the request asks less."""
        lifetime = min(self.expiry_time_ms, renew_period_ms) if renew_period_ms > 0 else self.expiry_time_ms
        return await self.store.extend(_digest(token_hmac), principal, now_ms(), lifetime)

    async def expire(self, token_hmac: bytes, principal: str, expiry_period_ms: int) -> tuple[str, int]:
        """As `renew`, to now + the period (capped at the max); a negative period removes the token
        at once (its answer's expiry: now, as Kafka 4.4's)."""
        return await self.store.extend(_digest(token_hmac), principal, now_ms(), expiry_period_ms)

    async def describe(self, requester: str, owners: list[str] | None,
                       may_describe: Callable[[TokenRecord], Awaitable[bool]]) -> list[IssuedToken]:
        """DelegationTokenManager.filterToken: the tokens of the owners asked for (None: all) that the
        requester owns, asked for or may renew, or else may see (`may_describe`: DESCRIBE on the
        token or DESCRIBE_TOKENS on its owner)."""
        out = []
        for token in await self.store.all():
            if owners is not None and not any(_owner_or_renewer(token, o) for o in owners):
                continue
            if _owner_or_renewer(token, requester) or await may_describe(token):
                out.append(IssuedToken(token, self.hmac(token.token_id)))
        return out

    async def login(self, token_id: str) -> tuple[str, str] | None:
        """(owner, SCRAM password) of a live token; None for an unknown or expired one, which
        Kafka's ScramSaslServer refuses alike."""
        if not self.enabled:
            return None
        token = await self.store.get(token_id)
        if token is None or token.expiry_ms < now_ms():
            return None
        return token.owner, base64.b64encode(self.hmac(token_id)).decode()


def _owner_or_renewer(token: TokenRecord, principal: str) -> bool:
    """TokenInformation.ownerOrRenewer: the owner, the requester or a renewer."""
    return principal in (token.owner, token.requester) or principal in token.renewers
