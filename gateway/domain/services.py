"""The domain services one gateway process runs, shared by every face.

The bundle alone: `gateway.server.wiring` builds it (and closes it), so a face sees the services
and never the store beneath them."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import Config
from gateway.domain.client_metrics import ClientMetricsService
from gateway.domain.delay import DelayService
from gateway.domain.features import Features
from gateway.domain.fence import FenceService
from gateway.domain.groups.coordinator import GroupCoordinator
from gateway.domain.groups.lag_history import LagHistory
from gateway.domain.groups.share_coordinator import ShareCoordinator
from gateway.domain.log import LogService
from gateway.domain.memory import MemoryBudget
from gateway.domain.producer_txn import TransactionalProducers
from gateway.domain.quotas import QuotaService
from gateway.domain.registry import Registry
from gateway.domain.roles import RoleLeases
from gateway.domain.schemas.service import SchemaRegistry
from gateway.domain.security import SecurityService
from gateway.domain.subscriptions import SubscriptionService
from gateway.domain.txn import TransactionCoordinator
from gateway.domain.watermark import WatermarkService


@dataclass(frozen=True)
class Services:
    config: Config
    log: LogService
    txn: TransactionCoordinator
    fence: FenceService
    delay: DelayService
    groups: GroupCoordinator
    txn_producers: TransactionalProducers  # Kafka's transactional.id semantics
    watermark: WatermarkService
    subscriptions: SubscriptionService  # the native face's, settled by every transaction's end
    registry: Registry  # the gateways sharing this Redis: Metadata's brokers, who leads what
    roles: RoleLeases  # background roles run by one gateway at a time
    security: SecurityService
    share: ShareCoordinator  # KIP-932's share groups, over the subscriptions
    memory: MemoryBudget  # Redis's memory per primary, and produce's high-water mark
    schemas: SchemaRegistry  # the Schema Registry, over the _schemas topic
    features: Features  # finalized features (transaction.version), as UpdateFeatures set them
    client_metrics: ClientMetricsService  # KIP-714's client telemetry
    quotas: QuotaService  # client quotas, their usage shared through Redis
    lag: LagHistory  # consumer groups' lag over time, sampled by a leased role
