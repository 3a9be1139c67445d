"""Consumer groups: one state machine per group protocol (`classic`, `consumer`) and for the moves
between them (`migration`), the driver that runs them over the store (`driver` shared, one module per
protocol, joined in `coordinator`) and committed offsets (`offsets`)."""

from gateway.domain.groups.classic import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    STATES,
    GroupDescription,
    JoinedMember,
    JoinResult,
    MemberDescription,
    SyncResult,
)
from gateway.domain.groups.coordinator import (
    GroupCoordinator,
    GroupListing,
    open_coordinator,
)
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.offsets import MAX_METADATA_BYTES, consumer_assignment

__all__ = [
    "COMPLETING_REBALANCE",
    "DEAD",
    "EMPTY",
    "MAX_METADATA_BYTES",
    "PREPARING_REBALANCE",
    "STABLE",
    "STATES",
    "GroupCoordinator",
    "GroupDescription",
    "GroupError",
    "GroupErrorKind",
    "GroupListing",
    "JoinResult",
    "JoinedMember",
    "MemberDescription",
    "SyncResult",
    "consumer_assignment",
    "open_coordinator",
]
