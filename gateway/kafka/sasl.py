"""SASL on the Kafka listener: SaslHandshake and SaslAuthenticate, and the older unframed flow.

With authentication on, a connection may send only ApiVersions, SaslHandshake and SaslAuthenticate
until it has authenticated; anything else closes it, as a Kafka broker does. SaslHandshake v1
(KIP-152) is followed by SaslAuthenticate requests carrying the mechanism's messages; after
SaslHandshake v0 the client sends those messages bare, each behind a 4-byte length, and gets the
answers the same way. A failed authentication is answered (SaslAuthenticate: SASL_AUTHENTICATION_FAILED
with a message) and the connection closed. With authentication off, SaslHandshake offers no mechanism.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import FAILED_AUTHENTICATION_DELAY, SaslExchange, SecurityService
from gateway.errors import AuthenticationFailed, GatewayError
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, ConnectionState, RequestContext, handles

log = logging.getLogger(__name__)

BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass
class KafkaSasl:
    exchange: SaslExchange
    unframed: bool  # after SaslHandshake v0: messages travel bare, not in SaslAuthenticate
    failed: bool = False


def closing_delay(state: ConnectionState) -> float:
    """How long a connection that is closing waits before it closes."""
    return FAILED_AUTHENTICATION_DELAY if isinstance(state.sasl, KafkaSasl) and state.sasl.failed else 0.0


def permitted(security: SecurityService, state: ConnectionState, api_key: int) -> bool:
    """Whether a request may be handled on this connection now."""
    return not security.enabled or state.principal is not None or api_key in BEFORE_AUTHENTICATION


def unframed(state: ConnectionState) -> bool:
    """Whether the next frame is a bare SASL message (the v0 flow)."""
    return isinstance(state.sasl, KafkaSasl) and state.sasl.unframed


async def unframed_step(state: ConnectionState, message: bytes) -> list[bytes | memoryview] | None:
    """The length-prefixed answer to a bare SASL message; None (close) when authentication failed."""
    sasl = state.sasl
    assert isinstance(sasl, KafkaSasl)
    try:
        answer = await sasl.exchange.step(message)
    except GatewayError as exc:
        log.info("kafka client %s failed to authenticate: %s", state.peer, exc)
        sasl.failed = True
        return None
    _finish(state, sasl)
    return [struct.pack(">i", len(answer)) + answer]


def _finish(state: ConnectionState, sasl: KafkaSasl) -> None:
    if sasl.exchange.principal is not None:
        state.principal = sasl.exchange.principal
        state.token_authenticated = sasl.exchange.token_authenticated
        state.sasl = None


@handles(ApiKey.SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx: RequestContext, req: Any) -> Any:
    security = ctx.services.security
    cls = codec.response_class(ApiKey.SASL_HANDSHAKE, ctx.api_version)
    if not security.enabled:  # as a Kafka PLAINTEXT listener: nothing to authenticate against
        return codec.build(cls, {"error_code": KafkaError.unsupported_sasl_mechanism, "mechanisms": ()})
    mechanisms = tuple(security.mechanisms)
    if ctx.connection.principal is not None or ctx.connection.sasl is not None:
        return codec.build(cls, {"error_code": KafkaError.illegal_sasl_state, "mechanisms": mechanisms})
    try:
        exchange = security.sasl(req.mechanism)
    except GatewayError:
        return codec.build(cls, {"error_code": KafkaError.unsupported_sasl_mechanism, "mechanisms": mechanisms})
    ctx.connection.sasl = KafkaSasl(exchange, unframed=ctx.api_version == 0)
    return codec.build(cls, {"error_code": KafkaError.none, "mechanisms": mechanisms})


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, req: Any) -> Any:
    cls = codec.response_class(ApiKey.SASL_AUTHENTICATE, ctx.api_version)
    sasl = ctx.connection.sasl
    if not isinstance(sasl, KafkaSasl) or sasl.unframed:
        ctx.connection.close = True
        return codec.build(cls, {"error_code": KafkaError.illegal_sasl_state, "auth_bytes": b"",
                                 "error_message": "SaslHandshake v1 must come first"})
    try:
        answer = await sasl.exchange.step(req.auth_bytes)
    except AuthenticationFailed as exc:
        log.info("kafka client %s failed to authenticate: %s", ctx.connection.peer, exc)
        sasl.failed = True
        ctx.connection.close = True
        message = str(exc) if str(exc).startswith("Authentication failed") else f"Authentication failed: {exc}"
        return codec.build(cls, {"error_code": KafkaError.sasl_authentication_failed, "auth_bytes": b"",
                                 "error_message": message})
    except GatewayError as exc:  # Redis away: no verdict; the client connects again and retries
        log.warning("kafka client %s: authentication interrupted: %s", ctx.connection.peer, exc)
        ctx.connection.close = True
        return None
    _finish(ctx.connection, sasl)
    return codec.build(cls, {"error_code": KafkaError.none, "error_message": None, "auth_bytes": answer,
                             "session_lifetime": 0})
