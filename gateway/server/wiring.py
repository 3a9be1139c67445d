"""Building one gateway's services, the one place that knows how they depend on each other.

Each service is given its collaborators through its constructor, in dependency order, and every
hook a transaction's end calls is registered here, whichever listeners the gateway runs: a
gateway without the native listener (or the one running the transaction reaper) settles native
pending acks, and a roll-forward after a restart applies Kafka's staged group offsets.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from gateway.config import SETTINGS, Config
from gateway.domain.client_metrics import ClientMetricsService
from gateway.domain.delay import DelayService
from gateway.domain.delegation_tokens import DelegationTokens
from gateway.domain.features import Features
from gateway.domain.fence import FenceService
from gateway.domain.groups.consumer import ConsumerGroupConfig
from gateway.domain.groups.coordinator import open_coordinator
from gateway.domain.groups.lag_history import LagHistory
from gateway.domain.groups.share_coordinator import ShareCoordinator
from gateway.domain.groups.streams import StreamsGroupConfig
from gateway.domain.log import LogService
from gateway.domain.memory import MemoryBudget
from gateway.domain.producer_txn import TransactionalProducers, group_offsets_settler, subscription_settler
from gateway.domain.quotas import QuotaService
from gateway.domain.registry import Registry
from gateway.domain.roles import RoleLeases
from gateway.domain.schemas.service import SchemaRegistry
from gateway.domain.security import SecurityService
from gateway.domain.services import Services
from gateway.domain.subscriptions import SubscriptionService
from gateway.domain.txn import TransactionCoordinator
from gateway.domain.watermark import WatermarkService
from gateway.errors import GatewayError
from gateway.store import Store
from gateway.store.objects import ObjectStore, ObjectStoreUnavailable
from gateway.store.objects.open import open_object_store
from gateway.store.persistence import warn_restart_loss


def open_tier_store(location: str) -> ObjectStore | None:
    """The object store of `--tier-store`, None when tiering is off; one line naming the setting when
    it cannot be opened."""
    if not location:
        return None
    try:
        return open_object_store(location)
    except (ValueError, ObjectStoreUnavailable) as exc:
        raise GatewayError(f"{exc}: check {SETTINGS['tier_store'].label}") from None


@contextlib.asynccontextmanager
async def wired_services(config: Config, store: Store, registry: Registry) -> AsyncIterator[Services]:
    """The services over `store`, for a gateway whose node id `registry` has claimed
    (`config.node_id`), for as long as the block runs. On the way out the registry lets the other
    gateways know first (so they stop sending clients here), then the services close in the
    reverse order of their building; the store, the caller's, closes after."""
    async with contextlib.AsyncExitStack() as closing:
        store.replication.configure(config.state_min_insync_replicas, config.state_replication_timeout_ms,
                                    config.replica_lag_max_ms, config.unclean_replica_promotion)
        await store.replication.learn()
        with contextlib.suppress(GatewayError):  # else the first producer reserves them
            await store.log.producer_ids.reserve()  # (`ProducerIds`)
        memory = MemoryBudget(store, config.redis_memory_high_watermark)
        await memory.check_start()  # an evicting Redis would lose acknowledged records: refused here
        objects = open_tier_store(config.tier_location)
        if objects is not None:
            closing.push_async_callback(objects.close)
        log = LogService(store, auto_create=config.auto_create_topics,
                         default_partitions=config.default_partitions, peers=registry.peers,
                         node_id=config.node_id, memory=memory, objects=objects)
        closing.push_async_callback(log.close)
        await log.warn_unmet_min_insync()  # acks=all produces to such topics are refused: say so at once
        await warn_restart_loss(store.replication)  # a primary restarted in place can drop what its replicas held
        delay = DelayService(store, notify_partition=log.notifier.notify, memory=memory)
        watermark = WatermarkService(store, log, snapshot_marks=config.watermark_snapshot_marks)
        subscriptions = SubscriptionService(log, store, config.node_id, watermarks=watermark, lease_ms=config.lease_ms)
        closing.push_async_callback(subscriptions.close)  # hands subscription leases over
        txn = TransactionCoordinator(
            store,
            coordinator_id=config.node_id,
            default_timeout_ms=config.txn_default_timeout_ms,
            max_timeout_ms=config.txn_max_timeout_ms,
            notify_partition=log.notifier.notify,
            partition_settlers={delay.settle_kind: delay.settle_txn, watermark.settle_kind: watermark.settle_txn},
            settlers=[group_offsets_settler(store), subscription_settler(subscriptions.settle_txn)],
        )
        fence = FenceService(store, txn)
        txn_producers = TransactionalProducers(store, txn, fence)
        streams_config = StreamsGroupConfig(
            session_timeout_ms=config.group_streams_session_timeout_ms,
            min_session_timeout_ms=config.group_streams_min_session_timeout_ms,
            max_session_timeout_ms=config.group_streams_max_session_timeout_ms,
        )
        groups = open_coordinator(
            store, log, node_id=config.node_id,
            consumer_config=ConsumerGroupConfig(
                session_timeout_ms=config.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
                migration_policy=config.group_consumer_migration_policy,
            ),
            prefers=lambda group_id: registry.group_coordinator(group_id).node_id == config.node_id,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms, streams_config=streams_config,
        )
        closing.push_async_callback(groups.close)  # hands group leases over, answers waiting clients first
        roles = RoleLeases(store, config.node_id, registry.instance, lease_ms=config.lease_ms)
        security = SecurityService(
            store, enabled=config.auth, mechanisms=config.sasl_mechanisms.split(","),
            super_users=config.super_users.split(","), admin_token=config.admin_token,
            cache_seconds=config.acl_cache_seconds,
            delegation_tokens=DelegationTokens(
                store, config.delegation_token_secret_key, expiry_time_ms=config.delegation_token_expiry_time_ms,
                max_lifetime_ms=config.delegation_token_max_lifetime_ms),
        )
        share = ShareCoordinator(
            log, subscriptions, store, session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            lock_durations_ms=(config.group_share_min_record_lock_duration_ms,
                               config.group_share_record_lock_duration_ms,
                               config.group_share_max_record_lock_duration_ms),
            leads=lambda topic, p: registry.leader(topic, p).node_id == config.node_id,
            streams_config=streams_config,
        )
        closing.push_async_callback(share.close)  # releases what its members hold, before the subscriptions close
        closing.push_async_callback(registry.release)
        yield Services(config, log, txn, fence, delay, groups, txn_producers, watermark, subscriptions,
                       registry, roles, security, share, memory, SchemaRegistry(log, store),
                       Features(store.features),
                       ClientMetricsService(store),
                       QuotaService(store),
                       LagHistory(groups, log, store))
