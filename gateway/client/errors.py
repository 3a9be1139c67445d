"""Errors only a client can see; everything the gateway reports comes typed from `gateway.errors`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.errors import ErrorCode, GatewayError

if TYPE_CHECKING:
    from gateway.client.message import Message


class ConnectionLost(GatewayError):
    """The connection to the gateway closed; connect again and retry (idempotent sends never duplicate)."""

    code = ErrorCode.UNKNOWN

    @property
    def retriable(self) -> bool:
        return True


class ClientClosed(GatewayError):
    """The client, producer or consumer was closed by its owner."""

    code = ErrorCode.NOT_ALLOWED


class SchemaError(GatewayError):
    """A value that does not match its schema, or bytes that are not a value of a registered schema:
    refused before sending, or raised by `receive` and `batch_receive`, whose messages (the
    undecodable one among them, all still unacknowledged) are `messages`, for the application to
    acknowledge or negatively acknowledge."""

    code = ErrorCode.INVALID_RECORD

    def __init__(self, message: str, messages: Sequence[Message] = ()) -> None:
        super().__init__(message)
        self.messages = list(messages)

    @property
    def retriable(self) -> bool:
        """When the registry could not be reached to read the schema: the record may be fine."""
        return isinstance(self.__cause__, GatewayError) and self.__cause__.retriable


class SchemaRegistryError(GatewayError):
    """The Schema Registry refused a call (`status`, its `error_code`) or could not be reached
    (`status` 0): retriable when the registry or the way to it failed, not when it said no."""

    code = ErrorCode.INVALID_REQUEST

    def __init__(self, message: str, *, status: int, error_code: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code

    @property
    def retriable(self) -> bool:
        return self.status == 0 or self.status >= 500


class IncompatibleSchema(SchemaRegistryError):
    """The registry's 409: the schema is incompatible with the subject's earlier ones under its
    compatibility level (Pulsar's IncompatibleSchema)."""
