"""Delegation tokens (CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken,
DescribeDelegationToken), answered as a Kafka broker answers them with tokens off: the gateway
issues none (issue 34 brings them).

Kafka's order (ControllerApis.handleCreateDelegationTokenRequest and the Renew/Expire handlers,
KafkaApis.handleDescribeTokensRequest): a connection that did not authenticate with SASL (Kafka's
PLAINTEXT, or SSL without a client certificate) is refused first, DELEGATION_TOKEN_REQUEST_NOT_ALLOWED;
a token for another owner needs CREATE_TOKENS on that user; then, with no token secret configured,
DELEGATION_TOKEN_AUTH_DISABLED. The timestamps of a refusal are DelegationTokenManager's -1.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import Operation, ResourceType
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, RequestContext, handles

NO_TIME = datetime.fromtimestamp(-0.001, UTC)  # DelegationTokenManager.ErrorTimestamp, -1 ms, as kio writes it
ANONYMOUS = ("User", "ANONYMOUS")  # KafkaPrincipal.ANONYMOUS, the principal of a connection that did not log in


def _refusal(ctx: RequestContext) -> KafkaError:
    """What Kafka answers a token request on this connection, with tokens off."""
    if ctx.connection.principal is None:
        return KafkaError.delegation_token_request_not_allowed
    return KafkaError.delegation_token_auth_disabled


def _principal(ctx: RequestContext) -> tuple[str, str]:
    if ctx.connection.principal is None:
        return ANONYMOUS
    kind, _, name = ctx.connection.principal.partition(":")
    return kind, name


@handles(ApiKey.CREATE_DELEGATION_TOKEN, 1, 3)
async def create_delegation_token(ctx: RequestContext, req: Any) -> Any:
    requester = _principal(ctx)
    owner_name = getattr(req, "owner_principal_name", None)
    owner = (req.owner_principal_type, owner_name) if owner_name else requester
    error = _refusal(ctx)
    if (error == KafkaError.delegation_token_auth_disabled and owner != requester
            and not await ctx.allowed(ResourceType.USER, f"{owner[0]}:{owner[1]}", Operation.CREATE_TOKENS)):
        error = KafkaError.delegation_token_authorization_failed
    cls = codec.response_class(ApiKey.CREATE_DELEGATION_TOKEN, ctx.api_version)
    return codec.build(cls, {
        "error_code": error, "principal_type": owner[0], "principal_name": owner[1],
        "token_requester_principal_type": requester[0], "token_requester_principal_name": requester[1],
        "issue_timestamp": NO_TIME, "expiry_timestamp": NO_TIME, "max_timestamp": NO_TIME,
        "token_id": "", "hmac": b"", "throttle_time": 0,
    })


@handles(ApiKey.RENEW_DELEGATION_TOKEN, 1, 2)
async def renew_delegation_token(ctx: RequestContext, req: Any) -> Any:
    cls = codec.response_class(ApiKey.RENEW_DELEGATION_TOKEN, ctx.api_version)
    return codec.build(cls, {"error_code": _refusal(ctx), "expiry_timestamp": NO_TIME, "throttle_time": 0})


@handles(ApiKey.EXPIRE_DELEGATION_TOKEN, 1, 2)
async def expire_delegation_token(ctx: RequestContext, req: Any) -> Any:
    cls = codec.response_class(ApiKey.EXPIRE_DELEGATION_TOKEN, ctx.api_version)
    return codec.build(cls, {"error_code": _refusal(ctx), "expiry_timestamp": NO_TIME, "throttle_time": 0})


@handles(ApiKey.DESCRIBE_DELEGATION_TOKEN, 1, 3)
async def describe_delegation_token(ctx: RequestContext, req: Any) -> Any:
    cls = codec.response_class(ApiKey.DESCRIBE_DELEGATION_TOKEN, ctx.api_version)
    return codec.build(cls, {"error_code": _refusal(ctx), "tokens": [], "throttle_time": 0})
