"""DescribeClientQuotas and AlterClientQuotas (KIP-546) over the gateway's client quotas, and how a
request's quotas throttle its response and connection (KIP-219).

As Kafka 4.4 answers them: describing wants DESCRIBE_CONFIGS on the cluster and a bad filter is the
response's error (ClientQuotasImage.describe: INVALID_REQUEST, or UNSUPPORTED_VERSION for an unknown
entity type); altering wants ALTER_CONFIGS on the cluster and refuses entity by entity, with
INVALID_REQUEST, what ClientQuotaControlManager refuses (`gateway.domain.quotas.refusal`); a
`<default>` entity is a null name on the wire.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.quotas import FETCH, REQUEST, Alteration
from gateway.domain.security import CLUSTER_NAME, USER_PREFIX, Operation, ResourceType
from gateway.errors import GatewayError
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, Encoded, RequestContext, handles
from gateway.kafka.errors import error_message, kafka_error


def identity(ctx: RequestContext) -> tuple[str | None, str | None]:
    """(user, client id) as quotas name them: the principal's name without its type."""
    principal = ctx.connection.principal
    return principal.removeprefix(USER_PREFIX) if principal else None, ctx.client_id


async def recorded(ctx: RequestContext, key: str, amount: float) -> int:
    """Record `amount` against this client's quota `key`: the throttle time it earns (0 within its
    quota, or where none applies), not yet applied (`throttle`)."""
    return await ctx.services.quotas.record(key, *identity(ctx), amount)


async def request_time(ctx: RequestContext) -> int:
    """Record the time this request has taken on the gateway so far against request_percentage
    (KIP-124: ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs, a request handler's time in
    percent of a second; the gateway has no network threads apart, so it is all one time), less what
    it spent waiting for data as Kafka's purgatory waits (a fetch's long poll, `ctx.remote`): the
    throttle time it earns, not yet applied. No clock is read unless some entity sets the quota."""
    if not counts_time(ctx):
        return 0
    return await recorded(ctx, REQUEST, (time.perf_counter() - ctx.began - ctx.remote) * 100)


def counts_time(ctx: RequestContext) -> bool:
    """Whether some entity sets request_percentage: a set lookup, the whole cost on the hot path."""
    return ctx.services.quotas.sets(REQUEST)


def throttle(ctx: RequestContext, *earned: tuple[str, int]) -> int:
    """The throttle time a response carries: the longest its quotas earned, counted for that quota
    and applied by muting the connection (KafkaApis: the quota whose throttle is larger throttles,
    the first named on a tie; ClientQuotaManager.throttle)."""
    key, took = max(earned, key=lambda e: e[1])
    if took > 0:
        ctx.services.quotas.count(key, *identity(ctx), took)
        mute(ctx, took)
    return took


def fetch_max_bytes(ctx: RequestContext, asked: int) -> int:
    """The most a Fetch or ShareFetch may answer: what it asked, at most the gateway's
    --fetch-max-bytes and the client's consumer_byte_rate for one quota window, so that one response
    never outgrows the quota for good (KafkaApis.handleFetchRequest's and
    handleFetchFromShareFetchRequest's maxQuotaWindowBytes)."""
    most = min(asked, ctx.services.config.fetch_max_bytes)
    window = ctx.services.quotas.window_max(FETCH, *identity(ctx))
    return most if window is None else min(most, window)


async def fetch_throttle(ctx: RequestContext, size: int) -> int:
    """The throttle a fetch's response of `size` bytes earns, request time and byte rate weighed
    together and applied (KafkaApis.handleFetchRequest, and processShareFetchResponse for a
    ShareFetch): when it is not 0 the response goes out empty, as Kafka's throttled FetchContext and
    ShareFetchContext.throttleResponse answer, and what it would have sent comes off the byte rate's
    count again (ClientQuotaManager.unrecordQuotaSensor)."""
    took = throttle(ctx, (REQUEST, await request_time(ctx)), (FETCH, await recorded(ctx, FETCH, size)))
    if took:
        await ctx.services.quotas.record(FETCH, *identity(ctx), -size)
    return took


async def throttled_response(ctx: RequestContext, response: Any) -> Any:
    """A response with the request-time throttle its request earned, or the one it carries if longer
    (Kafka's RequestHandlerHelper.sendResponseMaybeThrottle, and ...WithControllerQuota for topic
    creation and deletion, which every client-facing API but Produce, Fetch and ShareFetch answers
    through: they weigh it against their byte rates themselves)."""
    if ctx.api_key in EXEMPT or authenticating(ctx) or (took := throttle(ctx, (REQUEST, await request_time(ctx)))) == 0:
        return response
    if isinstance(response, Encoded):  # a throttle time already there (a controller mutation's) may be longer
        if response.throttle_at is None:
            return response
        first, at = response.chunks[0], response.throttle_at
        took = max(took, int.from_bytes(first[at:at + 4], "big"))
        chunks = [bytes(first[:at]) + took.to_bytes(4, "big") + bytes(first[at + 4:]), *response.chunks[1:]]
        return response._replace(chunks=chunks)
    if hasattr(response, "throttle_time"):
        took = max(took, int(response.throttle_time.total_seconds() * 1000))
        return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=took))
    return response


def authenticating(ctx: RequestContext) -> bool:
    """Whether the connection has yet to log in: Kafka's authenticator answers its requests
    (ApiVersions among them) before KafkaApis, so no quota counts them."""
    return ctx.services.security.enabled and ctx.connection.principal is None


EXEMPT = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
                    ApiKey.SHARE_FETCH})
"""Requests `throttled_response` leaves alone: Produce, Fetch and ShareFetch record request time
beside their byte rates; SASL's are the authenticator's on Kafka, before KafkaApis sees a request."""


def mute(ctx: RequestContext, throttle_ms: int) -> None:
    """Read nothing more from this connection for `throttle_ms` (a later mute never shortens an
    earlier one), and from now on read its requests one at a time, as Kafka does, so that each
    throttle is known before the next request is read."""
    ctx.connection.throttled = True
    ctx.connection.muted_until = max(ctx.connection.muted_until, time.monotonic() + throttle_ms / 1000)


class MutationQuota:
    """One request's controller mutation quota (KIP-599), as ControllerMutationQuotaManager.newQuotaFor
    makes it: strict from `strict_since` (a topic past the quota is refused THROTTLING_QUOTA_EXCEEDED),
    permissive before (taken, and throttled); `throttle_ms` is what the response carries."""

    def __init__(self, ctx: RequestContext, strict_since: int) -> None:
        self.ctx = ctx
        self.strict = ctx.api_version >= strict_since
        self.throttle_ms = 0

    async def take(self, permits: int) -> bool:
        taken, took = await self.ctx.services.quotas.mutate(*identity(self.ctx), permits, self.strict)
        if took:
            self.throttle_ms = took
            mute(self.ctx, took)
        return taken


THROTTLED = "The throttling quota has been exceeded."


def _response(ctx: RequestContext, values: dict[str, Any]) -> Any:
    return codec.build(codec.response_class(ctx.api_key, ctx.api_version), {"throttle_time": 0, **values})


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def describe_client_quotas(ctx: RequestContext, req: Any) -> Any:
    if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE_CONFIGS):
        return _response(ctx, {"error_code": KafkaError.cluster_authorization_failed,
                               "error_message": "Cluster authorization failed.", "entries": None})
    try:
        found = await ctx.services.quotas.describe(
            [(c.entity_type, c.match_type, c.match) for c in req.components], req.strict)
    except GatewayError as exc:
        return _response(ctx, {"error_code": kafka_error(exc), "error_message": error_message(exc), "entries": None})
    entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "values": [{"key": k, "value": v} for k, v in values.items()]} for entity, values in found]
    return _response(ctx, {"error_code": KafkaError.none, "error_message": None, "entries": entries})


@handles(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
async def alter_client_quotas(ctx: RequestContext, req: Any) -> Any:
    def entity(e: Any) -> list[dict[str, Any]]:
        return [{"entity_type": d.entity_type, "entity_name": d.entity_name} for d in e.entity]

    if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.ALTER_CONFIGS):
        return _response(ctx, {"entries": [
            {"error_code": KafkaError.cluster_authorization_failed, "error_message": "Cluster authorization failed.",
             "entity": entity(e)} for e in req.entries]})
    alterations = [Alteration([(d.entity_type, d.entity_name) for d in e.entity],
                              [(op.key, None if op.remove else op.value) for op in e.ops]) for e in req.entries]
    try:
        refused = await ctx.services.quotas.alter(alterations, req.validate_only)
    except GatewayError as exc:
        return _response(ctx, {"entries": [
            {"error_code": kafka_error(exc), "error_message": error_message(exc), "entity": entity(e)}
            for e in req.entries]})
    return _response(ctx, {"entries": [
        {"error_code": KafkaError.none if why is None else KafkaError.invalid_request, "error_message": why,
         "entity": entity(e)} for e, why in zip(req.entries, refused, strict=True)]})
