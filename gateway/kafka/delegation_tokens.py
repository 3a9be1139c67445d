"""Delegation tokens (CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken,
DescribeDelegationToken; KIP-48, KIP-373), answered as Kafka 4.4 answers them.

Kafka's order (ControllerApis.allowTokenRequests and the create/renew/expire handlers,
DelegationTokenControlManager, KafkaApis.handleDescribeTokensRequest): a connection that did not
authenticate with SASL (Kafka's PLAINTEXT, or SSL without a client certificate), or that logged in
with a token, is refused first, DELEGATION_TOKEN_REQUEST_NOT_ALLOWED; a token for another owner
needs CREATE_TOKENS on that user (DELEGATION_TOKEN_AUTHORIZATION_FAILED); with no token secret
configured, DELEGATION_TOKEN_AUTH_DISABLED; a renewer that is not a User, INVALID_PRINCIPAL_TYPE.
Renew and expire find the token by its HMAC (DELEGATION_TOKEN_NOT_FOUND), refuse one past its
expiry (DELEGATION_TOKEN_EXPIRED) and anyone but its owner or a renewer
(DELEGATION_TOKEN_OWNER_MISMATCH). The timestamps of a refusal are DelegationTokenManager's -1.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.delegation_tokens import USER_TYPE, DelegationTokens, TokenRecord
from gateway.domain.security import Operation, ResourceType
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, RequestContext, handles

NO_TIME = datetime.fromtimestamp(-0.001, UTC)  # DelegationTokenManager.ErrorTimestamp, -1 ms, as kio writes it
ANONYMOUS = ("User", "ANONYMOUS")  # KafkaPrincipal.ANONYMOUS, the principal of a connection that did not log in
OUTCOMES = {"not-found": KafkaError.delegation_token_not_found, "expired": KafkaError.delegation_token_expired,
            "owner-mismatch": KafkaError.delegation_token_owner_mismatch}


def _tokens(ctx: RequestContext) -> DelegationTokens | None:
    tokens = ctx.services.security.delegation_tokens
    return tokens if tokens is not None and tokens.enabled else None


def _refusal(ctx: RequestContext) -> KafkaError | None:
    """What Kafka answers before looking at the request: no SASL login or a token login, then tokens off."""
    if ctx.connection.principal is None or ctx.connection.token_authenticated:
        return KafkaError.delegation_token_request_not_allowed
    return None if _tokens(ctx) is not None else KafkaError.delegation_token_auth_disabled


def _principal(ctx: RequestContext) -> tuple[str, str]:
    if ctx.connection.principal is None:
        return ANONYMOUS
    kind, _, name = ctx.connection.principal.partition(":")
    return kind, name


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@handles(ApiKey.CREATE_DELEGATION_TOKEN, 1, 3)
async def create_delegation_token(ctx: RequestContext, req: Any) -> Any:
    requester = _principal(ctx)
    owner_name = getattr(req, "owner_principal_name", None)
    owner = (req.owner_principal_type, owner_name) if owner_name else requester
    error = _refusal(ctx)
    if (error != KafkaError.delegation_token_request_not_allowed and owner != requester
            and not await ctx.allowed(ResourceType.USER, f"{owner[0]}:{owner[1]}", Operation.CREATE_TOKENS)):
        error = KafkaError.delegation_token_authorization_failed
    if error is None and any(r.principal_type != USER_TYPE for r in req.renewers):
        error = KafkaError.invalid_principal_type
    values: dict[str, Any] = {
        "error_code": error, "principal_type": owner[0], "principal_name": owner[1],
        "token_requester_principal_type": requester[0], "token_requester_principal_name": requester[1],
        "issue_timestamp": NO_TIME, "expiry_timestamp": NO_TIME, "max_timestamp": NO_TIME,
        "token_id": "", "hmac": b"", "throttle_time": 0,
    }
    tokens = _tokens(ctx)
    if error is None and tokens is not None:
        issued = await tokens.create(
            f"{owner[0]}:{owner[1]}", f"{requester[0]}:{requester[1]}",
            [f"{r.principal_type}:{r.principal_name}" for r in req.renewers],
            int(req.max_lifetime.total_seconds() * 1000))
        t = issued.record
        values.update(error_code=KafkaError.none, issue_timestamp=_time(t.issue_ms), expiry_timestamp=_time(t.expiry_ms),
                      max_timestamp=_time(t.max_ms), token_id=t.token_id, hmac=issued.hmac)
    cls = codec.response_class(ApiKey.CREATE_DELEGATION_TOKEN, ctx.api_version)
    return codec.build(cls, values)


async def _extend(ctx: RequestContext, req: Any, renew: bool) -> Any:
    error = _refusal(ctx)
    expiry = NO_TIME
    tokens = _tokens(ctx)
    if error is None and tokens is not None:
        principal = ctx.connection.principal or ""
        if renew:
            outcome, ms = await tokens.renew(req.hmac, principal, int(req.renew_period.total_seconds() * 1000))
        else:
            outcome, ms = await tokens.expire(req.hmac, principal, int(req.expiry_time_period.total_seconds() * 1000))
        error = OUTCOMES.get(outcome, KafkaError.none)
        if error == KafkaError.none:
            expiry = _time(ms)
    key = ApiKey.RENEW_DELEGATION_TOKEN if renew else ApiKey.EXPIRE_DELEGATION_TOKEN
    return codec.build(codec.response_class(key, ctx.api_version),
                       {"error_code": error, "expiry_timestamp": expiry, "throttle_time": 0})


@handles(ApiKey.RENEW_DELEGATION_TOKEN, 1, 2)
async def renew_delegation_token(ctx: RequestContext, req: Any) -> Any:
    return await _extend(ctx, req, renew=True)


@handles(ApiKey.EXPIRE_DELEGATION_TOKEN, 1, 2)
async def expire_delegation_token(ctx: RequestContext, req: Any) -> Any:
    return await _extend(ctx, req, renew=False)


@handles(ApiKey.DESCRIBE_DELEGATION_TOKEN, 1, 3)
async def describe_delegation_token(ctx: RequestContext, req: Any) -> Any:
    error = _refusal(ctx)
    tokens = _tokens(ctx)
    described: list[dict[str, Any]] = []
    if error is None and tokens is not None and req.owners != ():
        owners = None if req.owners is None else [f"{o.principal_type}:{o.principal_name}" for o in req.owners]

        async def may_describe(token: TokenRecord) -> bool:
            return (await ctx.allowed(ResourceType.DELEGATION_TOKEN, token.token_id, Operation.DESCRIBE)
                    or await ctx.allowed(ResourceType.USER, token.owner, Operation.DESCRIBE_TOKENS))

        for issued in await tokens.describe(ctx.connection.principal or "", owners, may_describe):
            t = issued.record
            owner, requester = _split(t.owner), _split(t.requester)
            described.append({
                "principal_type": owner[0], "principal_name": owner[1],
                "token_requester_principal_type": requester[0], "token_requester_principal_name": requester[1],
                "issue_timestamp": t.issue_ms, "expiry_timestamp": t.expiry_ms, "max_timestamp": t.max_ms,
                "token_id": t.token_id, "hmac": issued.hmac,
                "renewers": [dict(zip(("principal_type", "principal_name"), _split(r), strict=True))
                             for r in t.renewers],
            })
    cls = codec.response_class(ApiKey.DESCRIBE_DELEGATION_TOKEN, ctx.api_version)
    return codec.build(cls, {"error_code": error or KafkaError.none, "tokens": described, "throttle_time": 0})
