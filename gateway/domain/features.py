"""Finalized features (KIP-584): the one the gateway versions is `transaction.version`.

Its level says which transaction protocol Kafka's clients speak: under 2 (KIP-890 part 2,
"transactions V2") they bump their epoch at every EndTxn, add partitions by producing and groups by
committing offsets. The broker's side follows the request versions the client picks (EndTxn v5,
Produce v12, TxnOffsetCommit v5, as Kafka's `TransactionVersion.transactionVersionForEndTxn` and
`ProduceRequest.transactionVersion` do), so the level only tells clients which to pick. It is kept in
Redis, so every gateway advertises the same level; none set is level 0, not finalized, as on a Kafka
cluster formatted without it.

Updates are judged as Kafka 4.4's `FeatureControlManager.updateFeature` judges them, with its messages.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from enum import IntEnum

from gateway.errors import GatewayError
from gateway.store.cluster_config import ClusterConfigStore

TRANSACTION_VERSION = "transaction.version"
SUPPORTED: dict[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, 2)}  # name -> (min, max) level


class UpgradeType(IntEnum):
    """UpdateFeaturesRequest's upgrade_type (v1+; v0's allow_downgrade is SAFE_DOWNGRADE or UPGRADE)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


class FeatureUpdateRefused(Exception):
    """Kafka's INVALID_UPDATE_VERSION, with its message."""


@dataclass(frozen=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: UpgradeType


ADVERTISE_WAIT = 1.0  # seconds ApiVersions waits for Redis's levels before answering with the last read
ADVERTISE_FRESH = 1.0  # seconds ApiVersions answers from the levels last read before reading them again


class Features:
    def __init__(self, store: ClusterConfigStore) -> None:
        self.store = store
        self._last: tuple[int, dict[str, int]] = (-1, {})  # as last read: what ApiVersions says while Redis cannot
        self._read_at = -ADVERTISE_FRESH  # time.monotonic() of the last read

    async def finalized(self) -> tuple[int, dict[str, int]]:
        """(epoch, feature -> finalized level), levels of 0 left out as Kafka leaves them out;
        epoch -1 while none was ever set (Kafka's "no finalized features epoch")."""
        read_at = time.monotonic()
        version, levels = await self.store.get()
        self._last = (version if version else -1), {k: int(v) for k, v in levels.items() if int(v) > 0}
        self._read_at = read_at
        return self._last

    async def advertised(self) -> tuple[int, dict[str, int]]:
        """`finalized()` for ApiVersions, which must be answered whatever Redis does: Kafka's broker
        answers it from its metadata cache. A connection whose ApiVersions fails or outlasts the
        client's api.version.request.timeout.ms (a primary paused through a failover) is taken by
        librdkafka for a broker without ApiVersions, whose fallback features lack the transaction
        APIs, and its send_offsets_to_transaction then waits for ever for a coordinator it will not
        use (tests/jepsen's primary-paused; librdkafka issue 3013). So within ADVERTISE_WAIT, else the
        levels this gateway read last. Levels read under ADVERTISE_FRESH ago are answered without
        Redis, as Kafka's broker answers from its metadata cache (every client connection opens with
        ApiVersions): an update through this gateway is read back at once, through another one
        within ADVERTISE_FRESH, as a Kafka broker learns it when the metadata log reaches it."""
        if time.monotonic() - self._read_at < ADVERTISE_FRESH:
            return self._last
        try:
            async with asyncio.timeout(ADVERTISE_WAIT):
                return await self.finalized()
        except (GatewayError, TimeoutError):
            return self._last

    async def level(self, feature: str) -> int:
        return (await self.finalized())[1].get(feature, 0)

    async def update(self, updates: list[FeatureUpdate], validate_only: bool) -> None:
        """Apply every update or none (FeatureUpdateRefused names the first refused), judged against
        the levels as they are when written."""

        def change(current: dict[str, str]) -> dict[str, str]:
            new = dict(current)
            for u in updates:
                _check(u, int(current.get(u.feature, "0")))
                new[u.feature] = str(u.level)
            return new

        if validate_only:
            change((await self.store.get())[1])
        else:
            await self.store.alter(change)
            await self.finalized()  # this gateway's ApiVersions says the new levels at once


def _check(u: FeatureUpdate, current: int) -> None:
    """FeatureControlManager.updateFeature's checks, in its order and words."""

    def refuse(why: str) -> FeatureUpdateRefused:
        return FeatureUpdateRefused(f"Invalid update version {u.level} for feature {u.feature}. {why}")

    if u.upgrade_type == UpgradeType.UNKNOWN:
        raise refuse("The controller does not support the given upgrade type.")
    if u.level < 0:
        raise refuse("A feature version cannot be less than 0.")
    supported = SUPPORTED.get(u.feature)
    if supported is None:
        raise refuse("The gateway does not support this feature.")
    if not supported[0] <= u.level <= supported[1]:
        raise refuse(f"The gateway supports versions {supported[0]}-{supported[1]} of it.")
    if u.level < current and u.upgrade_type == UpgradeType.UPGRADE:
        raise refuse("Can't downgrade the version of this feature without setting the upgrade type to "
                     "either safe or unsafe downgrade.")
    if u.level > current and u.upgrade_type != UpgradeType.UPGRADE:
        raise refuse("Can't downgrade to a newer version.")
