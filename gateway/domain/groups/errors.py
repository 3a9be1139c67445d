"""Why a group operation is refused: one error for every group protocol and the offsets store."""

from __future__ import annotations

from enum import IntEnum

from gateway.errors import ErrorCode, GatewayError


class GroupErrorKind(IntEnum):
    """Why a group operation was refused. The values are Kafka's error codes on purpose: the group
    protocol exists only on the Kafka face, and the Lua scripts return these same numbers."""

    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    OFFSET_METADATA_TOO_LARGE = 12
    UNKNOWN_TOPIC_OR_PARTITION = 3
    GROUP_MAX_SIZE_REACHED = 81
    INVALID_REQUEST = 42
    UNSUPPORTED_VERSION = 35
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86


_RETRIABLE_KINDS = frozenset({GroupErrorKind.COORDINATOR_NOT_AVAILABLE})


class GroupError(GatewayError):
    """A group operation refused for `kind`; MEMBER_ID_REQUIRED carries the id to rejoin with."""

    code = ErrorCode.GROUP_ERROR

    def __init__(self, kind: GroupErrorKind, message: str = "", member_id: str = "") -> None:
        self.kind = kind
        self.member_id = member_id
        super().__init__(message or kind.name.lower().replace("_", " "))

    @property
    def retriable(self) -> bool:
        return self.kind in _RETRIABLE_KINDS
