"""Errors only a client can see; everything the gateway reports comes typed from `gateway.errors`."""

from __future__ import annotations

from gateway.errors import ErrorCode, GatewayError


class ConnectionLost(GatewayError):
    """The connection to the gateway closed; connect again and retry (idempotent sends never duplicate)."""

    code = ErrorCode.UNKNOWN

    @property
    def retriable(self) -> bool:
        return True


class ClientClosed(GatewayError):
    """The client, producer or consumer was closed by its owner."""

    code = ErrorCode.NOT_ALLOWED
